// Conversation window guard micro-benchmark (src/sender/README.md "Conversation window"): what
// the guard adds to each send request, and what the table costs in memory and at start-up.
//   1. lookup: ConversationTable.lookup for a customer with an open window (hit) and one never
//      seen (miss), in a table of --entries open windows; then the whole per-request decision
//      (decideConversation with its lookup), which is what the processor runs per text.
//   2. memory: heap and array buffers used per open window (keys like biz_1:15550000000, as the topic's), measured
//      with the GC run before and after filling the table.
//   3. initial read: parse + apply of one `conversations` record (conversationEntry + apply), the
//      CPU the start-up wait spends per record beyond Kafka's own fetch.
//
//   node --expose-gc --import tsx bench/window-lookup.ts [--entries 1000000] [--lookups 5000000] [--rounds 5]
import { cpus } from 'node:os';
import { decideConversation } from '../src/sender/conversation-guard.js';
import { ConversationTable, conversationEntry } from '../src/sender/conversation-table.js';
import { benchArgs } from './args.js';

const args = benchArgs(import.meta.url, {
  entries: { type: 'string', default: '1000000' },
  lookups: { type: 'string', default: '5000000' },
  rounds: { type: 'string', default: '5' },
});
const ENTRIES = args.wholeNumber('entries', 1);
const LOOKUPS = args.wholeNumber('lookups', 1);
const ROUNDS = args.wholeNumber('rounds', 1);

const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) {
  console.error('run with node --expose-gc --import tsx bench/window-lookup.ts (the memory figure needs the GC)');
  process.exit(2);
}

const now = Date.now();
const customer = (i: number) => `+1555${String(i).padStart(7, '0')}`;
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;

/** The heap and the array buffers outside it (the table's link arrays), after full collections. */
function heapUsed(): number {
  gc!();
  gc!();
  const { heapUsed: heap, arrayBuffers } = process.memoryUsage();
  return heap + arrayBuffers;
}

// 2. memory (first, on a quiet heap)
const before = heapUsed();
const table = new ConversationTable({ maxEntries: ENTRIES, now: () => now });
for (let i = 0; i < ENTRIES; i++)
  table.apply({
    key: `biz_1:${customer(i).slice(1)}`,
    businessId: 'biz_1',
    openUntil: now + 3_600_000 + (i % 86_400) * 1000,
  });
const after = heapUsed();
const bytesPerEntry = (after - before) / ENTRIES;

// 1. lookups
let sink = 0;
function timeLookups(label: string, pick: (i: number) => string): void {
  const results: number[] = [];
  for (let round = 0; round < ROUNDS; round++) {
    const started = process.hrtime.bigint();
    for (let i = 0; i < LOOKUPS; i++) {
      const found = table.lookup('biz_1', pick(i), now);
      if (found.state === 'open') sink++;
    }
    results.push(Number(process.hrtime.bigint() - started) / LOOKUPS);
  }
  const ns = median(results);
  console.log(
    `${label}: ${ns.toFixed(0)} ns per lookup (median of ${ROUNDS} rounds of ${LOOKUPS.toLocaleString('en')})`,
  );
}
// The customers are formatted outside the timed loop: a request arrives with its recipient as a string.
const hits = Array.from({ length: 65_536 }, (_, i) => customer((i * 7919) % ENTRIES));
const misses = Array.from({ length: 65_536 }, (_, i) => customer(ENTRIES + i));
timeLookups('lookup, open window (hit)', (i) => hits[i & 65_535]!);
timeLookups('lookup, never seen (miss)', (i) => misses[i & 65_535]!);

const request = { type: 'text' as const, conversationWindow: undefined, fallbackTemplate: undefined };
const decisionRuns: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const started = process.hrtime.bigint();
  for (let i = 0; i < LOOKUPS; i++) {
    const to = (i & 1) === 0 ? hits[i & 65_535]! : misses[i & 65_535]!;
    const decision = decideConversation({
      mode: 'reject',
      request,
      lookup: () => table.lookup('biz_1', to, now),
      now,
      requestTime: now - 5000,
      graceMs: 1000,
    });
    if (decision.action === 'send') sink++;
  }
  decisionRuns.push(Number(process.hrtime.bigint() - started) / LOOKUPS);
}
const decisionNs = median(decisionRuns);
console.log(`whole decision (half open, half never seen): ${decisionNs.toFixed(0)} ns per request`);

// 3. initial read: parse + apply per record
const RECORDS = Math.min(ENTRIES, 500_000);
const records = Array.from({ length: RECORDS }, (_, i) => {
  const c = customer(i);
  const last = new Date(now - (i % 172_800) * 1000);
  return {
    key: Buffer.from(`biz_1:${c}`),
    value: Buffer.from(
      JSON.stringify({
        businessId: 'biz_1',
        customer: c,
        lastInboundAt: last.toISOString(),
        windowOpenUntil: new Date(last.getTime() + 86_400_000).toISOString(),
      }),
    ),
  };
});
const applyRuns: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  const fresh = new ConversationTable({ maxEntries: ENTRIES, now: () => now });
  const started = process.hrtime.bigint();
  for (const r of records) {
    const entry = conversationEntry(r.key, r.value);
    if (!('invalid' in entry)) fresh.apply(entry);
  }
  applyRuns.push(Number(process.hrtime.bigint() - started) / RECORDS);
}
const applyNs = median(applyRuns);
console.log(
  `initial read, parse + apply: ${(applyNs / 1000).toFixed(2)} µs per record (${Math.round(1e9 / applyNs).toLocaleString('en')} records/s)`,
);

console.log(
  `memory: ${bytesPerEntry.toFixed(0)} bytes per open window (heap and array buffers) (${ENTRIES.toLocaleString('en')} entries: ${((after - before) / 2 ** 20).toFixed(0)} MiB)`,
);
console.log(
  `budget: at the sender's measured 602 sends/s (docs/benchmarks.md) a request has 1,661 µs; the decision takes ${(decisionNs / 1000).toFixed(2)} µs (${((decisionNs / 1_661_000) * 100).toFixed(3)}%)`,
);
console.log(`machine: ${cpus().length} × ${cpus()[0]?.model ?? 'cpu'}, Node ${process.version}${sink < 0 ? '' : ''}`);
