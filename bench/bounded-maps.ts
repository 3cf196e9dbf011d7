// Bounded Maps once full: the tracker's state cache (src/tracker/state-cache.ts), which evicts with
// an EvictionCursor, against the same LRU evicting with `keys().next()`, as it did before.
//   npx tsx bench/bounded-maps.ts [--max 5000,100000] [--inserts 600000]
// µs per insert of a new key (plus a get of a recent one, as the tracker reads the state it
// updates), in windows of 50,000 inserts; * marks windows after the bound was reached.
import { parseArgs } from 'node:util';
import { StateCache } from '../src/tracker/state-cache.js';

const { values: args } = parseArgs({ options: { max: { type: 'string', default: '5000,100000' }, inserts: { type: 'string', default: '600000' } } });
const INSERTS = Number(args.inserts);
const bounds = args.max.split(',').map(Number);
if (!Number.isInteger(INSERTS) || INSERTS < 50_000 || bounds.some((b) => !Number.isInteger(b) || b < 1)) throw new Error('--max takes whole numbers, --inserts at least 50000');

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

const keys = Array.from({ length: INSERTS }, (_, i) => `wamid.HBgLMTU1NTMwMDAwMDEVAgARGBI${i}`);
function run(name: string, max: number, lru: Lru): void {
  const windows: string[] = [];
  let t = performance.now();
  for (let i = 0; i < INSERTS; i++) {
    lru.set(keys[i]!, { i });
    if (i >= 5) lru.get(keys[i - 5]!);
    if ((i + 1) % 50_000 === 0) {
      windows.push(`${(((performance.now() - t) / 50_000) * 1000).toFixed(2)}${i + 1 > max ? '*' : ''}`);
      t = performance.now();
    }
  }
  console.log(`bound ${max.toLocaleString('en')}, ${name.padEnd(20)} µs per insert by 50,000: ${windows.join(' ')}`);
}

for (const max of bounds) {
  run('keys().next()', max, freshIteratorLru(max));
  run('StateCache (cursor)', max, new StateCache<object>({ maxEntries: max }));
}
