import { describe, expect, it } from 'vitest';
import { applyEvent, type StatusEvent } from '../../src/tracker/state-rules.js';
import { type TrackedMessage } from '../../src/contracts/message-state.js';
import { messageStateCache, StateCache } from '../../src/tracker/state-cache.js';
import { heapAfterGc } from '../helpers/heap.js';

const NOW = new Date('2026-03-01T12:00:00Z');

function state(messageId: string, requestId: string | null): TrackedMessage {
  if (requestId === null) {
    const sent: StatusEvent = {
      kind: 'status',
      eventId: `s-${messageId}`,
      businessId: 'biz_1',
      messageId,
      status: 'sent',
      at: '2026-03-01T10:00:01Z',
    };
    return applyEvent(undefined, sent, NOW).state;
  }
  const result = {
    requestId,
    businessId: 'biz_1',
    messageId,
    type: 'text' as const,
    recipient: '+15550002222',
    acceptedAt: '2026-03-01T10:00:00Z',
  };
  return applyEvent(undefined, { kind: 'result', eventId: `r-${messageId}`, result }, NOW).state;
}

describe('StateCache (bounded LRU)', () => {
  it('keeps at most maxEntries, evicting the least recently used and counting evictions', () => {
    const evicted: string[] = [];
    const cache = new StateCache<number>({ maxEntries: 3, onEvict: (key) => evicted.push(key) });
    for (const [i, key] of ['a', 'b', 'c'].entries()) cache.set(key, i);
    expect(cache.get('a')).toBe(0); // a is now the most recent
    expect(cache.peek('b')).toBe(1); // peek does not refresh b
    cache.set('d', 3);
    expect(evicted).toEqual(['b']);
    cache.set('c', 20); // an update refreshes c
    cache.set('e', 4);
    expect(evicted).toEqual(['b', 'a']);
    expect([...cache].map(([key]) => key)).toEqual(['d', 'c', 'e']);
    expect(cache.size).toBe(3);
    expect(cache.evictions).toBe(2);
    expect(cache.has('a')).toBe(false);
    expect(cache.get('a')).toBeUndefined();
    // Explicit deletes are not evictions.
    expect(cache.delete('d')).toBe(true);
    expect(cache.delete('d')).toBe(false);
    expect(cache.evictions).toBe(2);
  });

  it('stays within the bound under many inserts', () => {
    const cache = new StateCache<number>({ maxEntries: 100 });
    for (let i = 0; i < 10_000; i++) cache.set(`k${i}`, i);
    expect(cache.size).toBe(100);
    expect(cache.evictions).toBe(9_900);
    expect(cache.peek('k9999')).toBe(9999);
    expect(cache.peek('k9899')).toBeUndefined();
  });

  it('refuses a bound that is not a positive integer', () => {
    for (const maxEntries of [0, -1, 1.5, NaN])
      expect(() => new StateCache<number>({ maxEntries })).toThrow(RangeError);
  });
});

describe('messageStateCache (request id index)', () => {
  it('finds a state by request id, and the index goes with its entry', () => {
    const cache = messageStateCache(2);
    cache.set('m1', state('m1', 'req-1'));
    cache.set('m2', state('m2', 'req-2'));
    expect(cache.getBySecondary('req-1')?.messageId).toBe('m1'); // m1 now most recent
    cache.set('m3', state('m3', 'req-3'));
    expect(cache.has('m2')).toBe(false);
    expect(cache.keyOf('req-2')).toBeUndefined();
    expect(cache.keyOf('req-1')).toBe('m1');
    cache.delete('m1');
    expect(cache.getBySecondary('req-1')).toBeUndefined();
  });

  it('indexes a state once its result has merged, and not before', () => {
    const cache = messageStateCache(10);
    const before = state('m1', null);
    cache.set('m1', before);
    expect(cache.keyOf('req-1')).toBeUndefined();
    const result = {
      requestId: 'req-1',
      businessId: 'biz_1',
      messageId: 'm1',
      type: 'text' as const,
      recipient: '+1555',
      acceptedAt: '2026-03-01T10:00:00Z',
    };
    cache.set('m1', applyEvent(before, { kind: 'result', eventId: 'r', result }, NOW).state);
    expect(cache.keyOf('req-1')).toBe('m1');
  });

  it('two messages of one request (a maybeSent resend): the latest set wins; evicting the older keeps its index', () => {
    const evicted: string[] = [];
    const cache = messageStateCache(2, (id) => evicted.push(id));
    cache.set('m1', state('m1', 'req-1'));
    cache.set('m2', state('m2', 'req-1'));
    expect(cache.keyOf('req-1')).toBe('m2');
    cache.set('m3', state('m3', 'req-3'));
    expect(evicted).toEqual(['m1']);
    expect(cache.keyOf('req-1')).toBe('m2');
  });

  it('deleteWhere drops the selected states and their index entries', () => {
    const cache = messageStateCache(10);
    for (const i of [1, 2, 3, 4]) cache.set(`m${i}`, state(`m${i}`, `req-${i}`));
    expect(cache.deleteWhere((key) => key === 'm2' || key === 'm4')).toBe(2);
    expect([...cache].map(([key]) => key)).toEqual(['m1', 'm3']);
    expect(cache.keyOf('req-2')).toBeUndefined();
    expect(cache.keyOf('req-3')).toBe('m3');
    expect(cache.evictions).toBe(0);
    cache.clear();
    expect(cache.size).toBe(0);
    expect(cache.keyOf('req-1')).toBeUndefined();
  });

  it('holds no more after a million reads and updates of the states it has, by message and by request id (below its bound)', () => {
    const cache = messageStateCache(5_000);
    const states = Array.from({ length: 2_000 }, (_, i) => state(`wamid.${i}`, `req-${i}`));
    for (const s of states) cache.set(s.messageId, s);
    const before = heapAfterGc();
    for (let j = 0; j < 1_000_000; j++) {
      const s = states[j % 2_000]!;
      if (j % 3 === 0) cache.getBySecondary(s.requestId!);
      else if (j % 3 === 1) cache.get(s.messageId);
      else cache.set(s.messageId, s);
    }
    // Before RecencyMap, the iterator kept for evictions pinned every table the Map outgrew: 55 MB here.
    expect(heapAfterGc() - before).toBeLessThan(4 * 1024 * 1024);
    expect(cache.size).toBe(2_000);
    expect(cache.keyOf('req-7')).toBe('wamid.7');
  });
});
