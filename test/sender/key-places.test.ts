import { describe, expect, it } from 'vitest';
import { KeyPlaces } from '../../src/sender/key-places.js';

/** The same operations on a plain multiset of (fingerprint, place): what the table must answer. */
class Reference {
  private readonly slots = new Map<number, number[]>();
  add(fingerprint: number, place: number) {
    this.slots.set(fingerprint, [...(this.slots.get(fingerprint) ?? []), place]);
  }
  remove(fingerprint: number, place: number): boolean {
    const places = this.slots.get(fingerprint) ?? [];
    const at = places.indexOf(place);
    if (at < 0) return false;
    places.splice(at, 1);
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

describe('key places (the ledger store in memory index)', () => {
  it('answers every place stored under a fingerprint, newest first; removes one slot per entry', () => {
    const table = new KeyPlaces();
    expect(table.placesOf(7)).toEqual([]);
    table.add(7, 100);
    table.add(7, 102);
    table.add(7, 100); // a slot a journal brought back may share a live slot's fingerprint and place: its own slot
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
        const place = next(6);
        if (next(3) === 0 || reference.size > 3000)
          expect(table.remove(fingerprint, place)).toBe(reference.remove(fingerprint, place));
        else {
          table.add(fingerprint, place);
          reference.add(fingerprint, place);
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

  it('drops every slot before a place and keeps the rest, as a plain multiset would', () => {
    const next = random(11);
    const table = new KeyPlaces(16);
    const reference = new Reference();
    for (let i = 0; i < 3000; i++) {
      const fingerprint = 1 + next(400);
      const place = next(30);
      table.add(fingerprint, place);
      reference.add(fingerprint, place);
    }
    const kept = [...Array(401).keys()].map((f) => reference.placesOf(f).filter((m) => m >= 12));
    expect(table.dropBefore(12)).toBe(reference.size - kept.flat().length);
    for (let fingerprint = 1; fingerprint <= 400; fingerprint++)
      expect(table.placesOf(fingerprint)).toEqual(kept[fingerprint]);
    expect(table.size).toBe(kept.flat().length);
    expect(table.dropBefore(Infinity)).toBe(kept.flat().length);
    expect(table.size).toBe(0);
  });

  it('holds places up to 2^53 - 1 exactly, through its bytes; bytes with anything else are not a table', () => {
    const table = new KeyPlaces(16);
    const last = Number.MAX_SAFE_INTEGER;
    // The last minute a place names (2^32 - 1), its first and last number (2^21 per minute).
    const lastMinute = 0xffffffff * 2 ** 21;
    for (const [fingerprint, place] of [
      [1, 0],
      [2, lastMinute],
      [3, last],
      [2, 29_500_000 * 2 ** 21 + 12_345],
    ] as const)
      table.add(fingerprint, place);
    const back = KeyPlaces.fromBytes(table.toBytes())!;
    expect([back.size, back.placesOf(1), back.placesOf(2), back.placesOf(3)]).toEqual([
      4,
      [0],
      [lastMinute, 29_500_000 * 2 ** 21 + 12_345],
      [last],
    ]);
    // A slot whose place is not a whole number from 0 to 2^53 - 1 (a torn or foreign file).
    for (const bad of [-1, 0.5, 2 ** 53, Number.NaN]) {
      const bytes = table.toBytes();
      const size = bytes.readUInt32LE(4);
      // The places come first, then the fingerprints: the slot of fingerprint 3 gets the bad place.
      const slot = [...Array(size).keys()].find((i) => bytes.readUInt32LE(8 + size * 8 + i * 4) === 3)!;
      bytes.writeDoubleLE(bad, 8 + slot * 8);
      expect(KeyPlaces.fromBytes(bytes)).toBeUndefined();
    }
    expect(KeyPlaces.fromBytes(table.toBytes().subarray(0, 100))).toBeUndefined();
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
