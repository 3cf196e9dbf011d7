import { describe, expect, it } from 'vitest';
import { KeyPlaces } from '../../src/sender/key-places.js';

/** The same operations on a plain multiset of (fingerprint, minute): what the table must answer. */
class Reference {
  private readonly slots = new Map<number, number[]>();
  add(fingerprint: number, minute: number) {
    this.slots.set(fingerprint, [...(this.slots.get(fingerprint) ?? []), minute]);
  }
  remove(fingerprint: number, minute: number): boolean {
    const minutes = this.slots.get(fingerprint) ?? [];
    const at = minutes.indexOf(minute);
    if (at < 0) return false;
    minutes.splice(at, 1);
    return true;
  }
  placesOf(fingerprint: number): number[] {
    return [...(this.slots.get(fingerprint) ?? [])].sort((a, b) => b - a);
  }
  get size() {
    return [...this.slots.values()].reduce((n, m) => n + m.length, 0);
  }
}

/** A small deterministic generator: the same run every time. */
function random(seed: number) {
  let s = seed;
  return (n: number) => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return s % n;
  };
}

describe('key minutes (the ledger store in memory index)', () => {
  it('answers every minute stored under a fingerprint, newest first; removes one slot per entry', () => {
    const table = new KeyPlaces();
    expect(table.placesOf(7)).toEqual([]);
    table.add(7, 100);
    table.add(7, 102);
    table.add(7, 100); // another key with the same fingerprint and minute: its own slot
    table.add(8, 50);
    expect(table.placesOf(7)).toEqual([102, 100, 100]);
    expect(table.size).toBe(4);
    expect(table.remove(7, 100)).toBe(true);
    expect(table.placesOf(7)).toEqual([102, 100]);
    expect(table.remove(7, 101)).toBe(false);
    expect(table.remove(9, 100)).toBe(false);
    expect([table.placesOf(8), table.size]).toEqual([[50], 3]);
  });

  it('matches a plain multiset through long runs of colliding fingerprints, wrapping round, growing and shrinking', () => {
    for (const fingerprints of [24, 5000]) {
      const next = random(fingerprints);
      const table = new KeyPlaces(16);
      const reference = new Reference();
      for (let step = 0; step < 40_000; step++) {
        // Few distinct fingerprints (1…24) crowd a few probe runs; many (1…5000) spread them.
        const fingerprint = 1 + next(fingerprints);
        const minute = next(6);
        if (next(3) === 0 || reference.size > 3000)
          expect(table.remove(fingerprint, minute)).toBe(reference.remove(fingerprint, minute));
        else {
          table.add(fingerprint, minute);
          reference.add(fingerprint, minute);
        }
        if (step % 97 === 0) {
          const probe = 1 + next(fingerprints);
          expect(table.placesOf(probe)).toEqual(reference.placesOf(probe));
        }
      }
      expect(table.size).toBe(reference.size);
      for (let fingerprint = 1; fingerprint <= fingerprints; fingerprint++)
        expect(table.placesOf(fingerprint)).toEqual(reference.placesOf(fingerprint));
      // Fingerprints near the top of the 32-bit range place by their low bits like any other.
      table.add(0xffffffff, 3);
      expect(table.placesOf(0xffffffff)).toEqual([3]);
    }
  });

  it('drops every slot before a minute and keeps the rest, as a plain multiset would', () => {
    const next = random(11);
    const table = new KeyPlaces(16);
    const reference = new Reference();
    for (let i = 0; i < 3000; i++) {
      const fingerprint = 1 + next(400);
      const minute = next(30);
      table.add(fingerprint, minute);
      reference.add(fingerprint, minute);
    }
    const kept = [...Array(401).keys()].map((f) => reference.placesOf(f).filter((m) => m >= 12));
    expect(table.dropBefore(12)).toBe(reference.size - kept.flat().length);
    for (let fingerprint = 1; fingerprint <= 400; fingerprint++)
      expect(table.placesOf(fingerprint)).toEqual(kept[fingerprint]);
    expect(table.size).toBe(kept.flat().length);
    expect(table.dropBefore(Infinity)).toBe(kept.flat().length);
    expect(table.size).toBe(0);
  });

  it('fingerprints a key into a non-zero 32-bit number, the same every time, spread over the table', () => {
    const keys = Array.from({ length: 20_000 }, (_, i) => `["biz_1","cli-${i.toString(36)}"]`);
    const prints = keys.map((k) => KeyPlaces.fingerprint(k));
    expect(prints.every((p) => Number.isInteger(p) && p > 0 && p <= 0xffffffff)).toBe(true);
    expect(KeyPlaces.fingerprint(keys[0]!)).toBe(prints[0]);
    expect(new Set(prints).size).toBeGreaterThan(19_990);
    // Keys that differ in one character land in every part of a 1,024-slot table.
    const homes = new Set(prints.map((p) => p & 1023));
    expect(homes.size).toBeGreaterThan(1000);
  });
});
