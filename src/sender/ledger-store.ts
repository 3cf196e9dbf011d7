import { randomUUID } from 'node:crypto';
import type { Database, RootDatabase } from 'lmdb';
import {
  LocalStore,
  localStoreDir,
  sortableTime,
  type ChangelogEntry,
  type Checkpoint,
} from '../platform/local-store.js';
import {
  decodeLedgerEntry,
  encodeLedgerEntry,
  batchBounds,
  isBatch,
  isReleased,
  ledgerEntryTime,
  releaseReplaces,
  standing,
  type LedgerEntry,
} from './ledger-records.js';

/**
 * One partition's request ledger on local disk (README "Sent once"): the last ledger record of
 * each request of partition p, read back synchronously (about 2 µs), with a time index for
 * the idempotency window and the size bound. A materialisation of partition p of `send-ledger`,
 * which stays the source of truth; the checkpoint says up to where.
 *
 * The time index holds a row per minute and write (the keys written then), not a row per
 * entry: a second put per entry was a third of a restore's writes. Entries leave it a minute
 * at a time, which is the precision of the window.
 */
export interface LedgerIdentity {
  clusterId: string;
  topic: string;
  partition: number;
  partitions: number;
}

/** What the directory records: the identity, and the layout the store was written in. */
interface StoredIdentity extends LedgerIdentity {
  layout: number;
}

export interface LedgerCheckpoint extends Checkpoint {
  ledger: number;
}

interface Handles {
  env: RootDatabase;
  /** A request's last record, its JSON bytes as written to the changelog. */
  entries: Database<Buffer, string>;
  /** `<minute's start>\0<write>` → the keys written with a time in that minute, one per line: oldest first. */
  byMinute: Database<string, string>;
  meta: Database<unknown, string>;
}

function openHandles(env: RootDatabase): Handles {
  return {
    env,
    entries: env.openDB<Buffer, string>({ name: 'entries', encoding: 'binary' }),
    byMinute: env.openDB<string, string>({ name: 'by-minute', encoding: 'string' }),
    meta: env.openDB<unknown, string>({ name: 'meta', encoding: 'msgpack' }),
  };
}

const SEP = '\u0000';
const MINUTE = 60_000;
/** The store's layout: a directory of another (an older time index) is wiped and restored again. */
const LAYOUT = 2;
const EMPTY: LedgerCheckpoint = { ledger: 0 };
/** Records kept in memory before they are written together (about 500 bytes each). */
const FLUSH_AT = 2000;

export class LedgerStore extends LocalStore<Handles, LedgerCheckpoint, StoredIdentity> {
  /** Records kept and not yet written (`flush`): reads see them first. */
  private readonly unflushed = new Map<string, LedgerEntry>();
  /** Records being written. */
  private readonly writing = new Map<string, LedgerEntry>();
  /** Records other than `calling` kept since the last flush. */
  private waiting = 0;
  /** Chunks of a restore applied and not yet durable. */
  private pendingWrites = 0;
  /** The last `advanceTo`, settled (`forgetKept` waits for it). */
  private advancing: Promise<void> | undefined;
  /** The values each of those chunks wrote (a late release is checked against them: not yet readable from disk). */
  private readonly applying: ChunkValues[] = [];
  /** Where the records of a batch lie (`batchBounds`), reused from batch to batch. */
  private readonly bounds: number[] = [];
  /** Why a chunk's writes failed (`written` rejects with it). */
  private writeError: Error | undefined;

  /** Names this store's time index rows, unique across its openings. */
  private readonly rowTag = randomUUID().slice(0, 8);
  private rows = 0;

  private constructor(dir: string, identity: LedgerIdentity) {
    super(dir, { ...identity, layout: LAYOUT }, openHandles);
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
    if (standing(entry.state === 'released' ? this.get(key) : undefined, entry) !== entry) return;
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
        const index = new MinuteIndex();
        for (const [key, entry] of batch) this.put(key, entry, index);
        this.putIndex(index);
      },
      () => {
        for (const [key, entry] of batch) if (this.writing.get(key) === entry) this.writing.delete(key);
      },
    );
  }

  /**
   * Changelog records (a restore, in offset order) up to `position`: later records of a key
   * replace earlier ones, a tombstone or a record this release does not understand deletes, a
   * record older than `expireBeforeMs` is not kept. A batch is the records it carries, in its
   * place (one of them not understood is kept, and reads as nothing, until its minute expires).
   *
   * Written on lmdb's write thread, in the order issued (the checkpoint after its records, so
   * never ahead of them), while this thread decodes what Kafka sends next: in one synchronous
   * transaction, the writes were half a restore's time. `written()` says when they are durable
   * and readable; a caller keeps at most a few chunks waiting (`writesPending`).
   */
  applyChangelog(entries: ChangelogEntry[], position: number | undefined, expireBeforeMs: number): void {
    this.assertOpen();
    const next = position === undefined ? undefined : { ...this.pendingCheckpoint(EMPTY), ledger: position };
    // Only the last record of each key in the chunk is written, as the bytes Kafka gave (no text
    // made and encoded again). A batch is the records it carries, in its place.
    const last = new ChunkValues();
    const keep = (key: string, source: Buffer | null, start: number, end: number, at: number) => {
      // A late release stays out (releaseReplaces); rare, so decoding both costs nothing much.
      if (source !== null && isReleased(source, start)) {
        const release = decodeLedgerEntry(source.subarray(start, end));
        const current = last.has(key) ? last.get(key) : this.appliedValue(key);
        if (release?.state === 'released' && !releaseReplaces(decodeLedgerEntry(current), release)) return;
      }
      last.set(key, source, start, end, at);
    };
    const bounds = this.bounds;
    for (const { key, value } of entries) {
      if (value === null || !isBatch(value)) keep(key, value, 0, value?.length ?? 0, NO_TIME);
      else {
        // Keys whose last value came in a batch are indexed by the batch's time, not read per
        // value (a value not understood is kept, reads as nothing, and goes when its minute expires).
        const at = batchBounds(value, bounds);
        if (at !== undefined)
          for (let i = 0; i < bounds.length; i += 3)
            keep(value.toString('utf8', bounds[i], bounds[i + 1]), value, bounds[i + 1]! + 1, bounds[i + 2]!, at);
      }
    }
    this.applying.push(last);
    const { entries: db } = this.h;
    const index = new MinuteIndex();
    let write: Promise<unknown> | undefined;
    last.forEach((key, bytes, batchAt) => {
      const at = batchAt === NO_TIME ? ledgerEntryTime(bytes) : batchAt;
      if (bytes === null || at === undefined || at < expireBeforeMs) {
        // Issued even when not on disk: a put of an earlier chunk may still be on its way. Its
        // key leaves the time index with the row's minute.
        write = db.remove(key);
      } else {
        write = db.put(key, bytes);
        index.add(at, key);
      }
    });
    write = this.putIndex(index) ?? write;
    if (next) write = this.meta.put('checkpoint', next);
    const applied = () => void this.applying.splice(this.applying.indexOf(last), 1);
    if (write) {
      this.pendingWrites++;
      const settled = write.then(
        () => {
          this.pendingWrites--;
          applied();
        },
        (error: unknown) => {
          this.pendingWrites--;
          applied();
          this.writeError ??= error instanceof Error ? error : new Error(String(error));
        },
      );
      void this.trackWrites(settled);
    } else applied();
    if (next) this.advanceCheckpoint(next);
  }

  /**
   * Forgets what `record` kept in memory and not yet on disk, for a restore of the partition that
   * reads it back from the changelog (every record kept is in Kafka, above the checkpoint): once
   * another member wrote after it, the changelog's order, not this process's memory, says what
   * stands.
   */
  async forgetKept(): Promise<void> {
    // An advance in progress writes the open `calling` records it finds in memory, then a
    // checkpoint past them: they must still be there when it looks.
    await this.advancing;
    this.unflushed.clear();
    this.writing.clear();
    this.waiting = 0;
  }

  /** A key's value as the chunks applied so far leave it: those still being written first, then the disk. */
  private appliedValue(key: string): Buffer | null | undefined {
    for (let i = this.applying.length - 1; i >= 0; i--)
      if (this.applying[i]!.has(key)) return this.applying[i]!.get(key);
    return this.h.entries.get(key);
  }

  /** Chunks applied whose writes are not yet durable. */
  get writesPending(): number {
    return this.pendingWrites;
  }

  /** Every chunk applied so far is durable and readable; rejects when lmdb failed to write one. */
  async written(): Promise<void> {
    await this.flushed();
    if (this.writeError) throw this.writeError;
  }

  /**
   * Everything below `position` of the changelog is in the store (this member being its only
   * writer): the `calling` records still open are written with the new checkpoint.
   */
  advanceTo(position: number): Promise<void> {
    const advancing = this.advance(position);
    this.advancing = advancing.catch(() => undefined);
    return advancing;
  }

  private async advance(position: number): Promise<void> {
    await this.flush();
    await this.flushed();
    const next = { ...this.pendingCheckpoint(EMPTY), ledger: position };
    if (next.ledger <= (this.checkpoint()?.ledger ?? 0)) return;
    // On lmdb's write thread: a synchronous commit held the event loop while the disk synced
    // (0.7 s of a 20,000-request run at 128 calls in flight, in a CPU profile).
    await this.writeAsync(
      () => {
        const index = new MinuteIndex();
        for (const [key, entry] of this.unflushed) if (entry.state === 'calling') this.put(key, entry, index);
        this.putIndex(index);
        void this.meta.put('checkpoint', next);
      },
      () => undefined,
    );
    this.advanceCheckpoint(next);
  }

  /**
   * Drops records older than `beforeMs`, then the oldest while more than `maxEntries` are kept,
   * a minute of the time index at a time (a record leaves once the whole minute of its time is
   * past), from rows naming at most about `limit` keys in one call; answers how many went. A key
   * written again since a row named it stays when its newer time is in a later minute.
   */
  expire(beforeMs: number, maxEntries: number, limit: number): number {
    this.assertOpen();
    const { entries, byMinute } = this.live;
    const over = Math.max(0, this.entries(entries) - maxEntries);
    const rows: { row: string; minute: number; keys: string[] }[] = [];
    let named = 0;
    for (const { key: row, value } of byMinute.getRange({})) {
      const minute = Number(row.slice(0, row.indexOf(SEP)));
      if (minute + MINUTE > beforeMs && named >= over) break;
      const keys = value === '' ? [] : value.split('\n');
      rows.push({ row, minute, keys });
      named += keys.length;
      if (named >= limit) break;
    }
    if (rows.length === 0) return 0;
    let removed = 0;
    this.env.transactionSync(() => {
      for (const { row, minute, keys } of rows) {
        for (const key of keys) {
          const value = entries.get(key);
          const at = ledgerEntryTime(value);
          // A value not understood (kept from a batch) reads as nothing: it goes with its row.
          if (value === undefined || (at !== undefined && at >= minute + MINUTE)) continue;
          if (this.unflushed.has(key) || this.writing.has(key)) continue;
          entries.removeSync(key);
          removed++;
        }
        byMinute.removeSync(row);
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

  /** The entry, and its key in the time index of its minute; an earlier row naming the key is left to the sweep. */
  private put(key: string, entry: LedgerEntry, index: MinuteIndex): void {
    void this.h.entries.put(key, Buffer.from(encodeLedgerEntry(entry)));
    index.add(entry.at, key);
  }

  /** A row per minute of the keys in `index`; answers the last write, if any. */
  private putIndex(index: MinuteIndex): Promise<boolean> | undefined {
    let write: Promise<boolean> | undefined;
    for (const [minute, keys] of index.keys)
      write = this.h.byMinute.put(`${sortableTime(minute)}${SEP}${this.rowTag}.${++this.rows}`, keys.join('\n'));
    return write;
  }
}

/** A value's time is read from its bytes (it came alone, not in a batch). */
const NO_TIME = -1;

/**
 * The value a chunk of a restore leaves for each key, as a place in the bytes Kafka gave: a view
 * is made only of the values written (most of a restore's `calling` records are replaced by
 * their outcome in the same chunk), and no object per record.
 */
class ChunkValues {
  private readonly slots = new Map<string, number>();
  private readonly sources: (Buffer | null)[] = [];
  /** Per slot: the value's start and end in its source, and its batch's time (or NO_TIME). */
  private readonly places: number[] = [];

  set(key: string, source: Buffer | null, start: number, end: number, at: number): void {
    const slot = this.slots.get(key);
    if (slot === undefined) {
      this.slots.set(key, this.sources.length);
      this.sources.push(source);
      this.places.push(start, end, at);
    } else {
      this.sources[slot] = source;
      this.places[slot * 3] = start;
      this.places[slot * 3 + 1] = end;
      this.places[slot * 3 + 2] = at;
    }
  }

  has(key: string): boolean {
    return this.slots.has(key);
  }

  /** The key's value: its bytes, null for a tombstone, undefined when the chunk has none. */
  get(key: string): Buffer | null | undefined {
    const slot = this.slots.get(key);
    return slot === undefined ? undefined : this.value(slot);
  }

  forEach(visit: (key: string, value: Buffer | null, at: number) => void): void {
    this.slots.forEach((slot, key) => visit(key, this.value(slot), this.places[slot * 3 + 2]!));
  }

  private value(slot: number): Buffer | null {
    const source = this.sources[slot]!;
    if (source === null) return null;
    const start = this.places[slot * 3]!;
    const end = this.places[slot * 3 + 1]!;
    return start === 0 && end === source.length ? source : source.subarray(start, end);
  }
}

/** The keys of a write, by the minute of their time. */
class MinuteIndex {
  readonly keys = new Map<number, string[]>();

  add(at: number, key: string): void {
    const minute = at - (at % MINUTE);
    const keys = this.keys.get(minute);
    if (keys) keys.push(key);
    else this.keys.set(minute, [key]);
  }
}

/** The directory of a partition's ledger: `<stateDir>/<groupId>/partition-<p>`. */
export function ledgerStoreDir(stateDir: string, groupId: string, partition: number): string {
  return localStoreDir(stateDir, groupId, `partition-${partition}`);
}
