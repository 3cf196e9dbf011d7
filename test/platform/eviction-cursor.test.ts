import { describe, expect, it } from 'vitest';
import { EvictionCursor } from '../../src/platform/eviction-cursor.js';

function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('EvictionCursor', () => {
  it('answers undefined for an empty map, then its first key once one is set', () => {
    const map = new Map<string, number>();
    const cursor = new EvictionCursor(map);
    expect(cursor.next()).toBeUndefined();
    map.set('a', 1);
    expect(cursor.next()).toBe('a');
  });

  it('gives the least recently inserted key through every kind of change, across many rehashes of the table', () => {
    const next = random(11);
    const map = new Map<number, number>();
    const cursor = new EvictionCursor(map);
    // The insertion order a Map keeps: an update in place keeps its place, delete + set moves to the end.
    let order: number[] = [];
    let fresh = 0;
    for (let step = 0; step < 40_000; step++) {
      const r = next();
      const some = order.length > 0 ? order[Math.floor(next() * order.length)]! : undefined;
      if (r < 0.45 || some === undefined) {
        map.set(fresh, step);
        order.push(fresh++);
      } else if (r < 0.6) {
        map.delete(some);
        map.set(some, step);
        order = order.filter((k) => k !== some);
        order.push(some);
      } else if (r < 0.7) {
        map.set(some, step); // in place
      } else if (r < 0.8) {
        map.delete(some);
        order = order.filter((k) => k !== some);
      } else if (r < 0.9995) {
        const oldest = cursor.next();
        expect(oldest).toBe(order[0]);
        map.delete(oldest!);
        order.shift();
      } else {
        map.clear();
        order = [];
      }
    }
    expect([...map.keys()]).toEqual(order);
  });

  it('gives again a key it gave that was kept, once it has passed the rest (the contract broken, nothing lost)', () => {
    const map = new Map([
      ['a', 1],
      ['b', 2],
    ]);
    const cursor = new EvictionCursor(map);
    expect(cursor.next()).toBe('a'); // kept
    expect(cursor.next()).toBe('b');
    map.delete('b');
    expect(cursor.next()).toBe('a');
  });

  it('resumes one iterator instead of starting one per eviction (a new one walks every deleted slot)', () => {
    const map = new Map<number, number>();
    let iterators = 0;
    const keys = map.keys.bind(map);
    map.keys = () => {
      iterators += 1;
      return keys();
    };
    const cursor = new EvictionCursor(map);
    for (let i = 0; i < 100_000; i++) {
      map.set(i, i);
      if (map.size > 20_000) map.delete(cursor.next()!);
    }
    expect(map.size).toBe(20_000);
    expect(map.keys().next().value).toBe(80_000);
    // The one made with the cursor and the one just above: no other.
    expect(iterators).toBe(2);
  });
});
