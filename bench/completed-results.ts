// The sender's memory of completed request ids: the Map of strings it used to be against
// CompletedResults (src/sender/completed-results.ts), one process, no Kafka.
//   node --expose-gc --import tsx bench/completed-results.ts [--max 100000] [--keeps 600000]
// For each: µs per keep (a lookup that misses, then keep, as a new request does) in windows of
// 50,000 keeps, before and after the bound is reached; heap used once it is full.
import { benchArgs } from './args.js';
import { CompletedResults } from '../src/sender/completed-results.js';

const args = benchArgs(import.meta.url, { max: { type: 'string', default: '100000' }, keeps: { type: 'string', default: '600000' } });
const MAX = args.wholeNumber('max', 1);
const KEEPS = args.wholeNumber('keeps', MAX);

interface Store {
  get(id: string): string | undefined;
  keep(id: string, value: string): void;
}

/** What processor.ts did before: delete and set to move an id to the newest end, evict from the oldest. */
function mapLru(): Store {
  const map = new Map<string, string>();
  return {
    get: (id) => map.get(id),
    keep(id, value) {
      map.delete(id);
      map.set(id, value);
      while (map.size > MAX) map.delete(map.keys().next().value as string);
    },
  };
}

// A result as kept for repeats (its JSON without content, about 400 bytes), built for each keep
// as the sender builds it (that is in the figures), ids as the processor builds them.
const ids = Array.from({ length: KEEPS }, (_, i) => `biz_1\u0000req-${i}-7f3c9a2e`);
function resultJson(i: number): string {
  return JSON.stringify({
    requestId: `req-${i}-7f3c9a2e`,
    businessId: 'biz_1',
    outcome: 'accepted',
    messageId: `wamid.HBgLMTU1NTMwMDAwMDEVAgARGBI${i}`,
    attempts: 1,
    maybeSent: false,
    recipient: { channelType: 'whatsapp', id: '+15553000001' },
    type: 'text',
    sentAs: 'text',
    receivedAt: '2026-11-27T06:00:00.000Z',
    completedAt: '2026-11-27T06:00:00.021Z',
    relay: { name: 'msgbridge', version: '0.1.0', instance: 'sender-7d9f8c6b5-x2x9q' },
  });
}

const gc = (globalThis as { gc?: () => void }).gc;
function run(name: string, make: () => Store): void {
  gc?.();
  const heapBefore = process.memoryUsage().heapUsed;
  const store = make();
  const windows: string[] = [];
  let t = performance.now();
  for (let i = 0; i < KEEPS; i++) {
    if (store.get(ids[i]!) !== undefined) throw new Error('a new id was found');
    store.keep(ids[i]!, resultJson(i));
    if ((i + 1) % 50_000 === 0) {
      windows.push(`${(((performance.now() - t) / 50_000) * 1000).toFixed(2)}${i + 1 <= MAX ? '' : '*'}`);
      t = performance.now();
    }
  }
  gc?.();
  const heap = (process.memoryUsage().heapUsed - heapBefore) / 1048576;
  // Read after the measure, so the store is alive while it is taken.
  if (store.get(ids[KEEPS - 1]!) === undefined) throw new Error('the newest id was forgotten');
  console.log(`${name.padEnd(17)} µs per keep, by 50,000 (* = full): ${windows.join(' ')}; heap held ${gc ? `${heap.toFixed(0)} MiB` : 'n/a (run with node --expose-gc)'}`);
}

run('Map of strings', mapLru);
run('CompletedResults', () => new CompletedResults({ maxEntries: MAX }));
