import type { Database, RootDatabase } from 'lmdb';
import { LocalStore, localStoreDir, sortableTime, type ChangelogEntry, type Checkpoint } from '../platform/local-store.js';
import { decodeLedgerEntry, encodeLedgerEntry, type LedgerEntry } from './ledger-records.js';

/**
 * One partition's request ledger on local disk (README "Sent once"): the last ledger record of
 * each request of partition p, read back synchronously (about 2 µs), with a time index for
 * the idempotency window and the size bound. A materialisation of partition p of `send-ledger`,
 * which stays the source of truth; the checkpoint says up to where.
 */
export interface LedgerIdentity {
  clusterId: string;
  topic: string;
  partition: number;
  partitions: number;
}

export interface LedgerCheckpoint extends Checkpoint {
  ledger: number;
}

interface Handles {
  env: RootDatabase;
  entries: Database<string, string>;
  /** `<time>\0<key>` → '': oldest first, for expiry and eviction. */
  byTime: Database<string, string>;
  meta: Database<unknown, string>;
}

function openHandles(env: RootDatabase): Handles {
  return {
    env,
    entries: env.openDB<string, string>({ name: 'entries', encoding: 'string' }),
    byTime: env.openDB<string, string>({ name: 'by-time', encoding: 'string' }),
    meta: env.openDB<unknown, string>({ name: 'meta', encoding: 'msgpack' }),
  };
}

const SEP = '\u0000';
const timeKey = (at: number, key: string) => `${sortableTime(at)}${SEP}${key}`;
const EMPTY: LedgerCheckpoint = { ledger: 0 };

export class LedgerStore extends LocalStore<Handles, LedgerCheckpoint, LedgerIdentity> {
  /** Records written and not yet durable: reads see them first. */
  private readonly unflushed = new Map<string, LedgerEntry>();

  private constructor(dir: string, identity: LedgerIdentity) {
    super(dir, identity, openHandles);
  }

  /** Opens (or creates) the ledger of a partition; a directory of another identity is wiped first. */
  static open(dir: string, identity: LedgerIdentity): LedgerStore {
    const store = new LedgerStore(dir, identity);
    store.claim();
    return store;
  }

  /** Wipes the store (its checkpoint does not match the changelog) and opens it empty. */
  static rebuild(store: LedgerStore): LedgerStore {
    store.wipe();
    return LedgerStore.open(store.dir, store.identity);
  }

  get(key: string): LedgerEntry | undefined {
    return this.unflushed.get(key) ?? decodeLedgerEntry(this.live.entries.get(key));
  }

  /** Keeps a record this member wrote (once Kafka has it); readable at once, durable when the promise resolves. */
  record(key: string, entry: LedgerEntry): Promise<void> {
    this.unflushed.set(key, entry);
    return this.writeAsync(
      () => this.put(key, entry),
      () => {
        if (this.unflushed.get(key) === entry) this.unflushed.delete(key);
      },
    );
  }

  /**
   * Changelog records (a restore, in offset order) up to `position`, in one synchronous
   * transaction: later records of a key replace earlier ones, a tombstone or a value this release
   * does not understand deletes, a record older than `expireBeforeMs` is not kept.
   */
  applyChangelog(entries: ChangelogEntry[], position: number | undefined, expireBeforeMs: number): void {
    this.assertOpen();
    const next = position === undefined ? undefined : { ...this.pendingCheckpoint(EMPTY), ledger: position };
    this.env.transactionSync(() => {
      for (const { key, value } of entries) {
        const entry = decodeLedgerEntry(value);
        if (entry && entry.at >= expireBeforeMs) this.put(key, entry);
        else this.remove(key);
      }
      if (next) this.meta.putSync('checkpoint', next);
    });
    if (next) this.advanceCheckpoint(next);
  }

  /** Everything below `position` of the changelog is in the store (this member being its only writer). */
  async advanceTo(position: number): Promise<void> {
    await this.flushed();
    const next = { ...this.pendingCheckpoint(EMPTY), ledger: position };
    if (next.ledger <= (this.checkpoint()?.ledger ?? 0)) return;
    this.meta.putSync('checkpoint', next);
    this.advanceCheckpoint(next);
  }

  /**
   * Drops records older than `beforeMs`, then the oldest while more than `maxEntries` are kept,
   * at most `limit` in one call; answers how many went.
   */
  expire(beforeMs: number, maxEntries: number, limit: number): number {
    this.assertOpen();
    const { entries, byTime } = this.live;
    const over = Math.max(0, this.entries(entries) - maxEntries);
    const old: string[] = [];
    for (const key of byTime.getKeys({ limit })) {
      if (Number(key.slice(0, key.indexOf(SEP))) >= beforeMs && old.length >= over) break;
      old.push(key);
    }
    if (old.length === 0) return 0;
    let removed = 0;
    this.env.transactionSync(() => {
      for (const indexKey of old) {
        const key = indexKey.slice(indexKey.indexOf(SEP) + 1);
        const entry = decodeLedgerEntry(entries.get(key));
        byTime.removeSync(indexKey);
        if (entry && timeKey(entry.at, key) === indexKey && !this.unflushed.has(key)) {
          entries.removeSync(key);
          removed++;
        }
      }
    });
    return removed;
  }

  stats(): { entries: number; bytes: number } {
    return { entries: this.entries(this.live.entries), bytes: this.bytes() };
  }

  private put(key: string, entry: LedgerEntry): void {
    const { entries, byTime } = this.h;
    const previous = decodeLedgerEntry(entries.get(key));
    if (previous && previous.at !== entry.at) byTime.remove(timeKey(previous.at, key));
    entries.put(key, encodeLedgerEntry(entry));
    byTime.put(timeKey(entry.at, key), '');
  }

  private remove(key: string): void {
    const { entries, byTime } = this.h;
    const previous = decodeLedgerEntry(entries.get(key));
    if (!previous) return;
    entries.remove(key);
    byTime.remove(timeKey(previous.at, key));
  }
}

/** The directory of a partition's ledger: `<stateDir>/<groupId>/partition-<p>`. */
export function ledgerStoreDir(stateDir: string, groupId: string, partition: number): string {
  return localStoreDir(stateDir, groupId, `partition-${partition}`);
}
