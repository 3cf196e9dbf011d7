// Bounded Maps once full (both on a RecencyMap, src/platform/recency-map.ts):
// - the tracker's state cache (src/tracker/state-cache.ts) against the same LRU on a Map that
//   evicts with `keys().next()`, as it did before;
// - the sender's conversation table (src/sender/conversation-table.ts), every window open, so
//   each new one past the bound evicts the least recently updated.
//   npx tsx bench/bounded-maps.ts [--max 5000,100000] [--table-max 500000] [--inserts 600000]
// µs per insert of a new key (plus a get or lookup of a recent one), in windows of 50,000
// inserts; * marks windows after the bound was reached.
import { benchArgs } from './args.js';
import { ConversationTable } from '../src/sender/conversation-table.js';
import { StateCache } from '../src/tracker/state-cache.js';

const args = benchArgs(import.meta.url, {
  max: { type: 'string', default: '5000,100000' },
  'table-max': { type: 'string', default: '500000' },
  inserts: { type: 'string', default: '600000' },
});
const INSERTS = args.wholeNumber('inserts', 50_000);
const bounds = args.wholeNumbers('max');
const tableBound = args.wholeNumber('table-max', 1);

interface Lru {
  get(key: string): unknown;
  set(key: string, value: object): void;
}

/** The state cache's LRU as it was: re-insert on access, evict `keys().next()`. */
function freshIteratorLru(max: number): Lru {
  const map = new Map<string, object>();
  return {
    get(key) {
      const value = map.get(key);
      if (value === undefined) return undefined;
      map.delete(key);
      map.set(key, value);
      return value;
    },
    set(key, value) {
      map.delete(key);
      map.set(key, value);
      while (map.size > max) map.delete(map.keys().next().value as string);
    },
  };
}

// The conversation table runs 300,000 inserts past its bound.
const tableInserts = Math.max(INSERTS, tableBound + 300_000);
const keys = Array.from({ length: tableInserts }, (_, i) => `wamid.HBgLMTU1NTMwMDAwMDEVAgARGBI${i}`);
function run(name: string, max: number, lru: Lru, inserts = INSERTS): void {
  const windows: string[] = [];
  let t = performance.now();
  for (let i = 0; i < inserts; i++) {
    lru.set(keys[i]!, { i });
    if (i >= 5) lru.get(keys[i - 5]!);
    if ((i + 1) % 50_000 === 0) {
      windows.push(`${(((performance.now() - t) / 50_000) * 1000).toFixed(2)}${i + 1 > max ? '*' : ''}`);
      t = performance.now();
    }
  }
  console.log(`bound ${max.toLocaleString('en')}, ${name.padEnd(17)} µs per insert by 50,000: ${windows.join(' ')}`);
}

for (const max of bounds) {
  run('keys().next()', max, freshIteratorLru(max));
  run('StateCache', max, new StateCache<object>({ maxEntries: max }));
}

/** The conversation table: a window for every key, each open a day, the clock a millisecond a record. */
function conversationTable(max: number): Lru {
  let now = Date.parse('2026-11-01T00:00:00Z');
  const table = new ConversationTable({ maxEntries: max, now: () => now });
  table.markComplete();
  return {
    get: (key) => table.lookup('biz_1', key),
    set: (key) => {
      now += 1;
      table.apply({ key: `biz_1:${key}`, businessId: 'biz_1', openUntil: now + 86_400_000 });
    },
  };
}
run('ConversationTable', tableBound, conversationTable(tableBound), tableInserts);
