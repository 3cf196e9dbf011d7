import { describe, expect, it } from 'vitest';
import { RecencyMap } from '../../src/platform/recency-map.js';
import { heapAfterGc } from '../helpers/heap.js';

function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

describe('RecencyMap', () => {
  it('starts empty', () => {
    const map = new RecencyMap<string, number>();
    expect(map.size).toBe(0);
    expect(map.oldest()).toBeUndefined();
    expect(map.oldestValue()).toBeUndefined();
    expect(map.get('a')).toBeUndefined();
    expect(map.delete('a')).toBe(false);
    expect([...map]).toEqual([]);
  });

  it('keeps the order of last set or get, and peek moves nothing', () => {
    const map = new RecencyMap<string, number>();
    map.set('a', 1);
    map.set('b', 2);
    map.set('c', 3);
    expect(map.oldest()).toBe('a');
    expect(map.peek('a')).toBe(1);
    expect(map.oldest()).toBe('a');
    expect(map.get('a')).toBe(1);
    expect([...map.entries()]).toEqual([
      ['b', 2],
      ['c', 3],
      ['a', 1],
    ]);
    map.set('b', 20);
    expect([...map.values()]).toEqual([3, 1, 20]);
    expect(map.delete('a')).toBe(true);
    expect(map.has('a')).toBe(false);
    expect(map.oldest()).toBe('c');
    map.clear();
    expect(map.size).toBe(0);
    map.set('d', 4);
    expect([...map]).toEqual([['d', 4]]);
  });

  it('agrees with a reference model through sets, touches, peeks, deletes, evictions and clears, across growth and slot reuse', () => {
    for (const seed of [11, 12, 13, 14, 15]) {
      const next = random(seed);
      const map = new RecencyMap<number, number>();
      let order: number[] = [];
      const values = new Map<number, number>();
      const gone: number[] = [];
      let fresh = 0;
      const moveToEnd = (key: number): void => {
        order = order.filter((k) => k !== key);
        order.push(key);
      };
      for (let step = 0; step < 30_000; step++) {
        const r = next();
        const some = order.length > 0 ? order[Math.floor(next() * order.length)]! : undefined;
        if (r < 0.4 || some === undefined) {
          // A new key, or one deleted before (its slot long since reused by another).
          const key = gone.length > 0 && next() < 0.3 ? gone.splice(Math.floor(next() * gone.length), 1)[0]! : fresh++;
          map.set(key, step);
          values.set(key, step);
          moveToEnd(key);
        } else if (r < 0.5) {
          map.set(some, step);
          values.set(some, step);
          moveToEnd(some);
        } else if (r < 0.6) {
          expect(map.get(some)).toBe(values.get(some));
          moveToEnd(some);
        } else if (r < 0.7) {
          expect(map.peek(some)).toBe(values.get(some));
        } else if (r < 0.8) {
          expect(map.delete(some)).toBe(true);
          values.delete(some);
          order = order.filter((k) => k !== some);
          gone.push(some);
        } else if (r < 0.9995) {
          const oldest = map.oldest();
          expect(oldest).toBe(order[0]);
          expect(map.oldestValue()).toBe(oldest === undefined ? undefined : values.get(oldest));
          if (oldest !== undefined) {
            map.delete(oldest);
            values.delete(oldest);
            order.shift();
            gone.push(oldest);
          }
        } else {
          map.clear();
          values.clear();
          order = [];
        }
        expect(map.size).toBe(order.length);
        if (step % 1_000 === 0) {
          expect([...map.entries()]).toEqual(order.map((k) => [k, values.get(k)]));
          expect([...map.values()]).toEqual(order.map((k) => values.get(k)));
        }
      }
      expect([...map]).toEqual(order.map((k) => [k, values.get(k)]));
    }
  });

  it('throws when changed while being iterated, instead of going astray in its slots', () => {
    const fill = () => {
      const map = new RecencyMap<string, number>();
      for (const [i, key] of ['a', 'b', 'c'].entries()) map.set(key, i);
      return map;
    };
    const changes: ((map: RecencyMap<string, number>, key: string) => unknown)[] = [
      (map, key) => map.delete(key),
      (map) => map.set('d', 9),
      (map, key) => map.set(key, 9),
      (map) => map.get('a'),
      (map) => map.clear(),
    ];
    for (const change of changes) {
      const map = fill();
      expect(() => {
        for (const [key] of map) change(map, key);
      }).toThrow(/changed while it was being iterated/);
    }
    // Reads, and a get of the newest entry (nothing moves), are not changes; a copy may be changed.
    const map = fill();
    const read: (number | undefined)[] = [];
    for (const [key] of map) read.push(map.peek(key), map.get('c'));
    expect(read).toEqual([0, 2, 1, 2, 2, 2]);
    for (const [key] of [...map]) map.delete(key);
    expect(map.size).toBe(0);
  });

  it('holds nothing more after a million moves of the same entries (a kept Map iterator held every outgrown table)', () => {
    const map = new RecencyMap<string, { i: number }>();
    for (let i = 0; i < 4_000; i++) map.set(`wamid.${i}`, { i });
    const before = heapAfterGc();
    for (let j = 0; j < 1_000_000; j++) {
      const key = `wamid.${j % 4_000}`;
      if (j % 2 === 0) map.get(key);
      else map.set(key, { i: j });
    }
    const grown = heapAfterGc() - before;
    expect(map.size).toBe(4_000);
    expect(grown).toBeLessThan(1024 * 1024);
  });

  it('keeps no object per entry: 100,000 entries of small-integer values cost under 80 bytes each, its link arrays included', () => {
    const keys = Array.from({ length: 100_000 }, (_, i) => `k${i}`);
    const used = () => heapAfterGc() + process.memoryUsage().arrayBuffers;
    const before = used();
    const map = new RecencyMap<string, number>();
    for (let i = 0; i < keys.length; i++) map.set(keys[i]!, i);
    const perEntry = (used() - before) / keys.length;
    expect(map.size).toBe(100_000);
    expect(perEntry).toBeLessThan(80);
  });
});
