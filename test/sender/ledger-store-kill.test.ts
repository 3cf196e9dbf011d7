import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { decodeLedgerEntry } from '../../src/sender/ledger-records.js';
import { LedgerStore } from '../../src/sender/ledger-store.js';
import { ledgerEntriesOnDisk } from '../helpers/ledger-disk.js';
import { deleted, finalEntry, identity, requestKey } from './ledger-store-child.js';

/**
 * The ledger store's index of minutes after a kill -9 (src/sender/README.md, "The store's
 * layout"): a child process writes without end (restore chunks, deletions, moves to a later
 * minute, its own records and checkpoints) and is killed mid-write, twice. The next open takes
 * the base and its journal instead of reading every key, and every entry on disk, read with an
 * independent lmdb handle, is found by its request key: a slot missing would mean a request
 * sent again.
 */
const CHILD = fileURLToPath(new URL('./ledger-store-child.ts', import.meta.url));

async function writeUntilKilled(
  dir: string,
  first: number,
  landings: number,
): Promise<{ opened: string; landed: number }> {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD, dir, String(first)], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp' },
  });
  let output = '';
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
    child.on('exit', (code, signal) => resolve(signal ?? code)),
  );
  child.stderr.on('data', (d: Buffer) => (output += d.toString()));
  const landed: number[] = [];
  let opened = '';
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (d: Buffer) => {
      output += d.toString();
      opened = /^open (\w+)$/m.exec(output)?.[1] ?? '';
      landed.splice(0, landed.length, ...[...output.matchAll(/^landed (\d+)$/gm)].map((m) => Number(m[1])));
      // Killed while it writes the chunk after its last landing.
      if (landed.length >= landings) {
        child.kill('SIGKILL');
        resolve();
      }
    });
    void exited.then(() => reject(new Error(`the child exited before it was killed:\n${output}`)));
  });
  expect(await exited).toBe('SIGKILL');
  return { opened, landed: landed.at(-1)! };
}

describe('ledger store under kill -9', () => {
  it('an open after a kill -9 takes the base and its journal, and finds every entry on disk', async () => {
    const dir = join(mkdtempSync(join(tmpdir(), 'msgbridge-ledger-kill-')), 'partition-0');
    // A first run, closed: a base with entries in it.
    const closed = LedgerStore.open(dir, identity);
    expect(closed.index.from).toBe('empty');
    await closed.close();
    const first = await writeUntilKilled(dir, 0, 6);
    expect(first.opened).toBe('base');
    // Opened from the journal, and killed again.
    const second = await writeUntilKilled(dir, first.landed + 1000, 4);
    expect(second.opened).toBe('journal');

    const store = LedgerStore.open(dir, identity);
    const how = store.index;
    expect(how.from).toBe('journal');
    // Every entry on disk, as an independent handle reads it, is found by its request key.
    const onDisk = await ledgerEntriesOnDisk(dir);
    const entries = onDisk.length;
    const missed: string[] = [];
    for (const { key, record } of onDisk) {
      const stored = decodeLedgerEntry(record);
      if (stored === undefined || JSON.stringify(store.get(key)) !== JSON.stringify(stored)) missed.push(key);
    }
    expect(missed).toEqual([]);
    // The journal may bring back slots of entries removed since its base, never fewer than the entries.
    expect(store.stats().indexSlots).toBeGreaterThanOrEqual(entries);
    // What landed before each kill is exact: a deleted request reads as nothing, a moved one as its last record.
    const checked = [
      ...Array(first.landed).keys(),
      ...Array.from({ length: 4000 }, (_, i) => first.landed + 1000 + i),
    ].filter((n) => n < second.landed);
    const wrong = checked.filter(
      (n) => JSON.stringify(store.get(requestKey(n))) !== JSON.stringify(deleted(n) ? undefined : finalEntry(n)),
    );
    expect(wrong).toEqual([]);
    console.log(
      `[ledger-kill] ${entries} entries on disk after two kills; index from the journal in ${how.ms} ms; ${checked.length} requests exact`,
    );
    await store.close();
  }, 120_000);
});
