import { describe, expect, it, vi } from 'vitest';
import { CompletedResults } from '../../src/sender/completed-results.js';
import { heapAfterGc } from '../helpers/heap.js';

/** The plain LRU the store replaces: what it must answer while no bound but maxEntries applies. */
class ReferenceLru {
  readonly map = new Map<string, string>();
  constructor(private readonly max: number) {}
  keep(id: string, value: string): void {
    this.map.delete(id);
    this.map.set(id, value);
    while (this.map.size > this.max) this.map.delete(this.map.keys().next().value as string);
  }
}

/** A small deterministic generator, so a failure can be replayed. */
function random(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function resultJson(i: number, pad: number): string {
  return JSON.stringify({ outcome: 'accepted', requestId: `req-${i}`, businessId: 'biz_1', messageId: `wamid.${i}`, note: 'é→✓'.repeat(pad) });
}

describe('CompletedResults', () => {
  it('answers what was kept, with non-ASCII text intact, and nothing for an id never kept', () => {
    const store = new CompletedResults({ maxEntries: 10 });
    store.keep('biz_1\u0000req-ü', '{"a":"é→✓ 😀"}');
    expect(store.get('biz_1\u0000req-ü')).toBe('{"a":"é→✓ 😀"}');
    expect(store.get('biz_1\u0000req-u')).toBeUndefined();
    expect(store.size).toBe(1);
  });

  it('evicts the least recently kept id beyond maxEntries, a repeat counting as a use', () => {
    const store = new CompletedResults({ maxEntries: 2 });
    store.keep('a', '1');
    store.keep('b', '2');
    store.keep('a', '1'); // a repeat: now the newest
    store.keep('c', '3');
    expect([store.get('a'), store.get('b'), store.get('c')]).toEqual(['1', undefined, '3']);
    expect(store.size).toBe(2);
  });

  it('answers as a plain LRU over many segments, across releases, while repeats leave room for their dead copies', () => {
    const next = random(7);
    const store = new CompletedResults({ maxEntries: 300, segmentBytes: 1024 });
    const reference = new ReferenceLru(300);
    for (let step = 0; step < 30_000; step++) {
      // Mostly new ids, some repeats of recent ones (a third of the ids at most are touched
      // again, so dead copies never reach the 2 × maxEntries records bound).
      const i = next() < 0.25 ? Math.max(0, step - 1 - Math.floor(next() * 400)) : step;
      const id = `biz_1\u0000req-${i}`;
      const value = reference.map.get(id) ?? resultJson(i, Math.floor(next() * 40));
      store.keep(id, value);
      reference.keep(id, value);
      if (step % 97 === 0) {
        expect(store.size).toBe(reference.map.size);
        for (const [k, v] of reference.map) expect(store.get(k)).toBe(v);
      }
    }
    expect(store.size).toBe(300);
    for (const [k, v] of reference.map) expect(store.get(k)).toBe(v);
    // Old segments were released: at most 2 × 300 records of under 500 bytes and two partial
    // segments, where the 30,000 kept would take about 7 MB.
    expect(store.bytes - new CompletedResults({ maxEntries: 300, segmentBytes: 1024 }).bytes).toBeLessThan(2 * 300 * 500 + 2 * 1024);
  });

  it('bounds the dead copies a flood of repeats leaves: never more than 2 × maxEntries records, and never an id the plain LRU would not remember', () => {
    const store = new CompletedResults({ maxEntries: 50, segmentBytes: 1024 });
    const reference = new ReferenceLru(50);
    for (let i = 0; i < 50; i++) {
      store.keep(`id-${i}`, resultJson(i, 0));
      reference.keep(`id-${i}`, resultJson(i, 0));
    }
    const bytesBefore = store.bytes;
    for (let round = 0; round < 2_000; round++) {
      store.keep('id-49', resultJson(49, 0));
      reference.keep('id-49', resultJson(49, 0));
    }
    // The flood of one id pushed the oldest ids out, as their records are the oldest: a subset.
    for (let i = 0; i < 50; i++) {
      const kept = store.get(`id-${i}`);
      if (kept !== undefined) expect(kept).toBe(reference.map.get(`id-${i}`));
    }
    expect(store.get('id-49')).toBe(resultJson(49, 0));
    expect(store.bytes).toBeLessThanOrEqual(bytesBefore + 2 * 50 * 120);
  });

  it('tells apart two ids whose hashes are equal, and keeps finding the second when the first leaves', () => {
    // The same 32-bit FNV-1a hash, found by search: the index must compare the ids themselves.
    const [first, second] = ['biz_1\u0000req-512789', 'biz_1\u0000req-749192'];
    const store = new CompletedResults({ maxEntries: 2 });
    store.keep(first, 'one');
    expect(store.get(second)).toBeUndefined();
    store.keep(second, 'two');
    expect([store.get(first), store.get(second)]).toEqual(['one', 'two']);
    store.keep('other', 'three'); // evicts the first, which sits ahead of the second in its probe run
    expect([store.get(first), store.get(second), store.get('other')]).toEqual([undefined, 'two', 'three']);
  });

  it('keeps apart ids that differ only in lone surrogates (found by a review: the same UTF-8 bytes and the same hash)', () => {
    const x = 'biz_1\u0000req-\udc61-\ud878-\ude0f-\udbd8-';
    const y = 'biz_1\u0000req-\udf72-\udd49-\udaec-\udb81-';
    const store = new CompletedResults({ maxEntries: 10 });
    store.keep(x, 'result-of-x');
    expect(store.get(y)).toBeUndefined();
    store.keep(y, 'result-of-y');
    expect([store.get(x), store.get(y), store.size]).toEqual(['result-of-x', 'result-of-y', 2]);
  });

  it('remembers one id, repeats included (a table of two slots had none empty during a keep)', () => {
    const store = new CompletedResults({ maxEntries: 1 });
    store.keep('a', '1');
    store.keep('a', '1');
    store.keep('b', '2');
    expect([store.get('a'), store.get('b'), store.size]).toEqual([undefined, '2', 1]);
  });

  it('reuses a released segment for the next one instead of allocating', () => {
    const allocate = vi.spyOn(Buffer, 'allocUnsafeSlow');
    try {
      const store = new CompletedResults({ maxEntries: 10, segmentBytes: 64 });
      for (let i = 0; i < 10_000; i++) store.keep(`id-${i}`, 'v'.repeat(20));
      expect(store.get('id-9999')).toBe('v'.repeat(20));
      // The scratch buffer, then at most the segments 10 live records span and one spare.
      expect(allocate.mock.calls.length).toBeLessThanOrEqual(1 + 10 + 1);
    } finally {
      allocate.mockRestore();
    }
  });

  it('keeps nothing for a record larger than a segment, and forgets an older copy of that id', () => {
    const store = new CompletedResults({ maxEntries: 5, segmentBytes: 128 });
    store.keep('a', 'short');
    expect(store.keep('a', 'x'.repeat(200))).toBe(false);
    expect(store.get('a')).toBeUndefined();
    expect(store.keep('b', 'x'.repeat(100))).toBe(true);
    expect(store.get('b')).toBe('x'.repeat(100));
  });

  it('reuses its one segment when everything in it was evicted', () => {
    const store = new CompletedResults({ maxEntries: 1, segmentBytes: 64 });
    for (let i = 0; i < 1_000; i++) store.keep(`id-${i}`, `v${i}`);
    expect(store.get('id-999')).toBe('v999');
    expect(store.get('id-998')).toBeUndefined();
    expect(store.bytes - new CompletedResults({ maxEntries: 1, segmentBytes: 64 }).bytes).toBeLessThanOrEqual(2 * 64);
  });

  it('bounds its segments too: with every slot in use, the oldest segment is evicted to make room', () => {
    // One record per 64-byte segment: 5,000 ids need more than the 4,096 segments addressable.
    const store = new CompletedResults({ maxEntries: 10_000, segmentBytes: 64 });
    for (let i = 0; i < 5_000; i++) store.keep(`id-${i}`, 'v'.repeat(40));
    expect(store.size).toBe(4_096);
    expect(store.bytes - new CompletedResults({ maxEntries: 10_000, segmentBytes: 64 }).bytes).toBe(4_096 * 64);
    expect(store.get('id-903')).toBeUndefined();
    for (let i = 904; i < 5_000; i++) expect(store.get(`id-${i}`)).toBe('v'.repeat(40));
  });

  it('refuses a bound that is not a positive integer or a segment size that is not a power of two in range', () => {
    expect(() => new CompletedResults({ maxEntries: 0 })).toThrow(RangeError);
    expect(() => new CompletedResults({ maxEntries: 1.5 })).toThrow(RangeError);
    expect(() => new CompletedResults({ maxEntries: 2 ** 28 + 1 })).toThrow(RangeError);
    expect(() => new CompletedResults({ maxEntries: 1, segmentBytes: 1000 })).toThrow(RangeError);
    expect(() => new CompletedResults({ maxEntries: 1, segmentBytes: 2 ** 19 })).toThrow(RangeError);
  });

  it('holds what it keeps outside the heap, ids and index included: 20,000 results add almost nothing to the heap (a Map of strings: about 470 bytes each)', () => {
    const store = new CompletedResults({ maxEntries: 20_000 });
    const values = Array.from({ length: 20_000 }, (_, i) => resultJson(i, 0) + ' '.repeat(300));
    const before = heapAfterGc();
    for (let i = 0; i < values.length; i++) store.keep(`biz_1\u0000req-${i}`, values[i]!);
    const perEntry = (heapAfterGc() - before) / values.length;
    expect(store.size).toBe(20_000);
    expect(perEntry).toBeLessThan(32);
  });
});
