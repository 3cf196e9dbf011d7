import type { RecordToWrite } from '../../src/kafka/port.js';
import type { LedgerEntry } from '../../src/sender/ledger-records.js';
import type { LedgerPort } from '../../src/sender/processor.js';

/**
 * The request ledger as the processor's unit tests need it: entries in a Map, each kept once its
 * record was published (as request-ledger.ts does with Kafka and LMDB, which the integration
 * tests use). `onRefresh` plays another member writing while this one waits.
 */
export function memoryLedger(
  options: { graceMs?: number; onRefresh?: (key: string, entries: Map<string, LedgerEntry>) => void } = {},
) {
  const entries = new Map<string, LedgerEntry>();
  const written: LedgerEntry[] = [];
  let refreshes = 0;
  const port: LedgerPort = {
    topic: 'ledger',
    owner: 'test-owner',
    graceMs: options.graceMs ?? 60_000,
    hold: () => true,
    release: () => undefined,
    lookup: (_partition, key) => entries.get(key),
    write: async (
      partition: number,
      key: string,
      entry: LedgerEntry,
      publish: (record: RecordToWrite) => Promise<boolean>,
    ) => {
      if (!(await publish({ key, partition, value: JSON.stringify(entry), headers: {} }))) return false;
      entries.set(key, entry);
      written.push(entry);
      return true;
    },
    refresh: async (_partition, key) => {
      refreshes++;
      await new Promise((r) => setTimeout(r, 5));
      options.onRefresh?.(key, entries);
      return entries.get(key);
    },
  };
  return { port, entries, written, refreshes: () => refreshes };
}
