import type { Database, RootDatabase } from 'lmdb';
import {
  LocalStore,
  localStoreDir,
  sortableTime,
  type ChangelogEntry,
  type Checkpoint,
} from '../platform/local-store.js';
import {
  decodeCallingBatch,
  decodeLedgerEntry,
  encodeLedgerEntry,
  isCallingBatch,
  ledgerEntryTime,
  type LedgerEntry,
} from './ledger-records.js';

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
/** Records kept in memory before they are written together (about 500 bytes each). */
const FLUSH_AT = 2000;

export class LedgerStore extends LocalStore<Handles, LedgerCheckpoint, LedgerIdentity> {
  /** Records kept and not yet written (`flush`): reads see them first. */
  private readonly unflushed = new Map<string, LedgerEntry>();
  /** Records being written. */
  private readonly writing = new Map<string, LedgerEntry>();
  /** Records other than `calling` kept since the last flush. */
  private waiting = 0;

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
    return this.unflushed.get(key) ?? this.writing.get(key) ?? decodeLedgerEntry(this.live.entries.get(key));
  }

  /**
   * Keeps a record this member wrote (once Kafka has it), readable at once. It reaches the disk
   * with others: one write of everything kept since the last (`flush`), when `FLUSH_AT` are
   * waiting and with every checkpoint. A write per record cost lmdb a commit each (a third of the
   * sender's CPU per result at 128 calls in flight). Nothing is lost meanwhile: the changelog
   * holds it, and the checkpoint never passes what is not on disk. A `calling` record stays in
   * memory until its outcome replaces it, and is written by a flush while still open.
   */
  record(key: string, entry: LedgerEntry): void {
    this.assertOpen();
    this.unflushed.set(key, entry);
    if (entry.state !== 'calling' && ++this.waiting >= FLUSH_AT) void this.flush();
  }

  /** Writes what `record` kept since the last flush, in one asynchronous transaction. */
  flush(): Promise<void> {
    if (this.unflushed.size === 0) return this.flushed();
    const batch = [...this.unflushed];
    this.waiting = 0;
    for (const [key, entry] of batch) if (entry.state !== 'calling') this.unflushed.delete(key);
    // Still readable until written: a read between here and the commit finds it in `writing`.
    for (const [key, entry] of batch) if (entry.state !== 'calling') this.writing.set(key, entry);
    return this.writeAsync(
      () => {
        for (const [key, entry] of batch) this.put(key, entry);
      },
      () => {
        for (const [key, entry] of batch) if (this.writing.get(key) === entry) this.writing.delete(key);
      },
    );
  }

  /**
   * Changelog records (a restore, in offset order) up to `position`, in one synchronous
   * transaction: later records of a key replace earlier ones, a tombstone or a value this release
   * does not understand deletes, a record older than `expireBeforeMs` is not kept. A batch of
   * `calling` records is the records it names, in its place.
   */
  applyChangelog(entries: ChangelogEntry[], position: number | undefined, expireBeforeMs: number): void {
    this.assertOpen();
    const next = position === undefined ? undefined : { ...this.pendingCheckpoint(EMPTY), ledger: position };
    // A request's records (calling, then done) mostly share a chunk: only the last of each key is
    // read and written, as its own text: 100,000 requests' records applied with 1.4 s of CPU
    // instead of 2.4 s, where records that a later one replaced were decoded and re-encoded.
    const last = new Map<string, string | undefined>();
    for (const { key, value } of entries) {
      const text = value?.toString();
      if (text !== undefined && isCallingBatch(text)) {
        // The `calling` records it stands for, in its place; the batch itself is not kept.
        for (const call of decodeCallingBatch(text) ?? []) last.set(call.key, encodeLedgerEntry(call.entry));
      } else last.set(key, text);
    }
    this.env.transactionSync(() => {
      for (const [key, text] of last) {
        const at = ledgerEntryTime(text);
        if (at === undefined || at < expireBeforeMs) this.remove(key);
        else this.putText(key, text!, at);
      }
      if (next) this.meta.putSync('checkpoint', next);
    });
    if (next) this.advanceCheckpoint(next);
  }

  /**
   * Everything below `position` of the changelog is in the store (this member being its only
   * writer): the `calling` records still open are written with the new checkpoint.
   */
  async advanceTo(position: number): Promise<void> {
    await this.flush();
    await this.flushed();
    const next = { ...this.pendingCheckpoint(EMPTY), ledger: position };
    if (next.ledger <= (this.checkpoint()?.ledger ?? 0)) return;
    // On lmdb's write thread: a synchronous commit held the event loop while the disk synced
    // (0.7 s of a 20,000-request run at 128 calls in flight, in a CPU profile).
    await this.writeAsync(
      () => {
        for (const [key, entry] of this.unflushed) if (entry.state === 'calling') this.put(key, entry);
        void this.meta.put('checkpoint', next);
      },
      () => undefined,
    );
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
        const at = ledgerEntryTime(entries.get(key));
        byTime.removeSync(indexKey);
        if (at !== undefined && timeKey(at, key) === indexKey && !this.unflushed.has(key) && !this.writing.has(key)) {
          entries.removeSync(key);
          removed++;
        }
      }
    });
    return removed;
  }

  /** Writes what is kept, then closes (the directory stays for a later start). */
  override async close(): Promise<void> {
    if (!this.isClosed()) await this.flush().catch(() => undefined);
    await super.close();
  }

  stats(): { entries: number; bytes: number } {
    return { entries: this.entries(this.live.entries), bytes: this.bytes() };
  }

  /** The entry and its time; an earlier time of the key is left to the sweep, which drops what no entry matches. */
  private put(key: string, entry: LedgerEntry): void {
    this.putText(key, encodeLedgerEntry(entry), entry.at);
  }

  private putText(key: string, text: string, at: number): void {
    const { entries, byTime } = this.h;
    void entries.put(key, text);
    void byTime.put(timeKey(at, key), '');
  }

  private remove(key: string): void {
    const { entries, byTime } = this.h;
    const at = ledgerEntryTime(entries.get(key));
    if (at === undefined) return;
    entries.remove(key);
    byTime.remove(timeKey(at, key));
  }
}

/** The directory of a partition's ledger: `<stateDir>/<groupId>/partition-<p>`. */
export function ledgerStoreDir(stateDir: string, groupId: string, partition: number): string {
  return localStoreDir(stateDir, groupId, `partition-${partition}`);
}
