import { createHash } from 'node:crypto';
import { pathToFileURL } from 'node:url';
import { encodeLedgerEntry, ledgerKey, type LedgerEntry } from '../../src/sender/ledger-records.js';
import { LedgerStore } from '../../src/sender/ledger-store.js';

/**
 * Writes a ledger store without end until it is killed (`ledger-store-kill.test.ts`): restore
 * chunks of new requests, chunks that replace or delete earlier ones, and the member's own
 * records with flushes and checkpoints. Run as `node --import tsx ledger-store-child.ts <dir>
 * <first>`: request n is `requestKey(n)`, written from n = first on. Prints `open <how>` once
 * the store is open, then `landed <n>` each time every request below n is durable.
 */

export const identity = { clusterId: 'kill', topic: 'send-ledger', partition: 0, partitions: 1 };
const MINUTE = 60_000;
/** Every request's time: a minute of its own every 500 requests, from a fixed start. */
export const timeOf = (n: number): number => 1_700_000_000_000 + Math.floor(n / 500) * MINUTE + (n % 500);
export const requestKey = (n: number): string =>
  ledgerKey('biz', createHash('sha1').update(String(n)).digest('hex').slice(0, 32));
/** Every seventh request is deleted again a chunk later; every fifth moves to a later minute. */
export const deleted = (n: number): boolean => n % 7 === 3;
export const moved = (n: number): boolean => n % 5 === 1 && !deleted(n);
export const finalEntry = (n: number): LedgerEntry => ({
  state: 'done',
  offset: n,
  at: moved(n) ? timeOf(n) + 3 * MINUTE : timeOf(n),
  remember: true,
  result: `{"requestId":"r${n}"}`,
});
const CHUNK = 1000;

async function main(): Promise<void> {
  const [dir, firstArg] = process.argv.slice(2);
  const store = LedgerStore.open(dir!, identity);
  process.stdout.write(`open ${store.index.from}\n`);
  let position = store.checkpoint()?.ledger ?? 0;
  for (let first = Number(firstArg); ; first += CHUNK) {
    const chunk = [];
    for (let n = first; n < first + CHUNK; n++) {
      const entry: LedgerEntry = { ...finalEntry(n), at: timeOf(n) };
      chunk.push({ key: requestKey(n), value: Buffer.from(encodeLedgerEntry(entry)) });
    }
    // The previous chunk's deletions, as tombstones.
    for (let n = first - CHUNK; n < first; n++)
      if (n >= 0 && deleted(n)) chunk.push({ key: requestKey(n), value: null });
    store.applyChangelog(chunk, ++position, 0);
    // The member's own writes: the moved requests' later records, then a checkpoint.
    for (let n = first; n < first + CHUNK; n++) if (moved(n)) store.record(requestKey(n), finalEntry(n));
    await store.advanceTo(++position);
    await store.written();
    // Deletions of this chunk come with the next one: only what is below `first` is final.
    process.stdout.write(`landed ${first}\n`);
  }
}

// Imported by the test for its helpers; run as a script, it writes.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
