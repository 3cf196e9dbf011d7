import { createHash } from 'node:crypto';
import type { Database, RootDatabase } from 'lmdb';
import { sleep } from '../platform/sleep.js';
import { LocalStore, localStoreDir, type ChangelogEntry, type Checkpoint } from '../platform/local-store.js';
import { KeyPlaces } from './key-places.js';
import {
  BROKEN,
  PlacesJournal,
  readBase,
  removeBase,
  replayJournal,
  writeBase,
  type JournalMark,
  type SavedBase,
} from './places-files.js';
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
 * each request of partition p, read back synchronously (about 2 µs). A materialisation of
 * partition p of `send-ledger`, which stays the source of truth; the checkpoint says up to where.
 *
 * An entry's key is its place: its minute, then a number given in turn within that minute
 * (`placeIn`). A restore appends, the way the changelog comes, in time order: LMDB fills its
 * pages at the end of the tree, with no search, split or copy of a page in the middle. Keyed by
 * request alone, a restore of 1,000,000 requests with random ids rewrote a page per entry and ran
 * at 24,000 entries/s; keyed by minute then request, pages all over the minute were copied again
 * in every transaction (README "The store's layout"). The value starts with the request's key,
 * and which place a request is at is kept in memory (`KeyPlaces`); the window and the size bound
 * take the oldest minutes first, by key order.
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

export interface LedgerStoreOptions {
  /** Records the journal may hold beyond the index's size before a new base (default 1,000,000). */
  journalSlack?: number;
}

export interface LedgerCheckpoint extends Checkpoint {
  ledger: number;
}

interface Handles {
  env: RootDatabase;
  /** place → the request's key, a line end, then its last record, the JSON bytes as written to the changelog (`framed`). */
  entries: Database<Buffer, number>;
  meta: Database<unknown, string>;
}

function openHandles(env: RootDatabase): Handles {
  return {
    env,
    entries: env.openDB<Buffer, number>(ENTRIES),
    meta: env.openDB<unknown, string>({ name: 'meta', encoding: 'msgpack' }),
  };
}

/**
 * Request keys longer than this (UTF-8 bytes) are kept under a digest: LMDB refuses keys over
 * 1,978 bytes, and a request id of control characters (each escaped to 6 bytes) reaches 2,311.
 */
const LONGEST_KEY = 1900;
const MINUTE = 60_000;
/**
 * The store's layout: a directory of another is wiped and restored again. 1–2: keyed by request,
 * with a time index; 3: by minute then request, its index saved only by a close; 4: the same,
 * with its index's base and journal (a release of layout 3 would write without the journal, and
 * a later open could take a journal that misses what it wrote); 5: by place.
 */
const LAYOUT = 5;
/** The meta key of the journal's mark (`JournalMark`), written in every transaction of the store. */
const JOURNAL_MARK = 'placesJournal';
/** A journal longer than this many records beyond the index's size is folded into a new base. */
const JOURNAL_SLACK = 1_000_000;
/** How long a close waits for an advance in progress (`close`). */
const CLOSE_WAITS_FOR_ADVANCE_MS = 5_000;
/** The oldest minute kept moves this far between two sweeps of the index (`sweep`). */
const SWEEP_MINUTES = 15;
/**
 * Places in a minute: a place is `minute * PLACES_PER_MINUTE` plus its number, below 2^53 for
 * every minute (a double holds it exactly). A minute full (35,000 writes a second into one
 * partition's ledger for a whole minute) lends its next minute's places: such an entry is kept a
 * minute longer, never shorter.
 */
const PLACES_PER_MINUTE = 2 ** 21;
/** The last minute a place can name: 32 bits (the year 10136). */
const LAST_MINUTE = 0xffffffff;
/** A time's minute, as minutes since 1970 (a time before 1970 is minute 0, one past the last minute the last). */
const minuteOf = (at: number): number => Math.min(LAST_MINUTE, Math.max(0, Math.floor(at / MINUTE)));
const minuteOfPlace = (place: number): number => Math.floor(place / PLACES_PER_MINUTE);

/**
 * An entry's lmdb key: its place as 8 bytes, the minute then the number, big-endian (keys sort
 * by place), written straight into lmdb's buffer: no string or buffer made per key.
 */
const placeKeys = {
  writeKey(place: number, target: Uint8Array, start: number): number {
    // Not a place: lmdb's own bound for "from the first key" (a reverse scan with no end stops
    // before it). Empty, it sorts before every place; as 8 zero bytes, place 0 was never seen.
    if (typeof place !== 'number') return start;
    const minute = minuteOfPlace(place);
    const n = place - minute * PLACES_PER_MINUTE;
    target[start] = minute >>> 24;
    target[start + 1] = (minute >>> 16) & 0xff;
    target[start + 2] = (minute >>> 8) & 0xff;
    target[start + 3] = minute & 0xff;
    target[start + 4] = n >>> 24;
    target[start + 5] = (n >>> 16) & 0xff;
    target[start + 6] = (n >>> 8) & 0xff;
    target[start + 7] = n & 0xff;
    return start + 8;
  },
  readKey(source: Uint8Array, start: number, end: number): number {
    if (end - start !== 8) return -1;
    return word(source, start) * PLACES_PER_MINUTE + word(source, start + 4);
  },
};
/** The big-endian 32-bit number at `at`. */
const word = (source: Uint8Array, at: number): number =>
  ((source[at]! << 24) | (source[at + 1]! << 16) | (source[at + 2]! << 8) | source[at + 3]!) >>> 0;

/** lmdb's types name `keyEncoder` for the root only; `openDB` reads it for each database. */
const ENTRIES = { name: 'entries', encoding: 'binary' as const, keyEncoder: placeKeys };

/**
 * An entry's value: its request's stored key (UTF-8, never a line end), a line end, then the
 * record's bytes. The key is what a lookup checks, and what expiry and an open read back. A
 * batch holds each record's key and value in that very shape: a restore writes a view of its
 * bytes, with nothing copied (`applyChangelog`).
 */
function framed(key: string, record: Buffer, start: number, end: number): Buffer {
  const keyBytes = Buffer.byteLength(key);
  const value = Buffer.allocUnsafe(keyBytes + 1 + end - start);
  value.write(key, 0);
  value[keyBytes] = NEWLINE;
  record.copy(value, keyBytes + 1, start, end);
  return value;
}
/** The same for a record as text (one string made into bytes). */
const framedText = (key: string, record: string): Buffer => Buffer.from(`${key}\n${record}`);
const NEWLINE = 0x0a;
/** The request key an entry's value starts with (`framed`); '' for a value without a line end. */
const keyOfFramed = (value: Buffer): string => value.toString('utf8', 0, Math.max(0, value.indexOf(NEWLINE)));
/** The record an entry's value holds, after its key. */
const recordOfFramed = (value: Buffer): Buffer => value.subarray(value.indexOf(NEWLINE) + 1);
/** The key a request is kept under: its own, or a digest of it when it is long, holds a line end, or is not well-formed UTF-16. */
export function storedKey(key: string): string {
  // UTF-8 takes at most 3 bytes per UTF-16 unit: only a long key is measured.
  if (
    (key.length * 3 <= LONGEST_KEY || Buffer.byteLength(key) <= LONGEST_KEY) &&
    !key.includes('\n') &&
    // A lone surrogate does not survive UTF-8: read back, it would not be the key.
    key.isWellFormed()
  )
    return key;
  return `#sha256:${createHash('sha256').update(key).digest('hex')}`;
}

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
  /** The place of every entry on disk or on its way there. */
  private places = new KeyPlaces();
  /**
   * Per minute, the next number free in it (`placeIn`): above every place of the minute on disk
   * or on its way there. Read from the disk at a minute's first write, forgotten (`sweep`) for
   * the minutes before the oldest kept when no write is on its way.
   */
  private readonly nextInMinute = new Map<number, number>();
  /** The place a flush or an advance is writing a key at, until lmdb has written it, and the write's turn. */
  private readonly issued = new Map<string, { place: number; turn: number }>();
  /** Orders writes of every kind as issued: a flush's moves and a restore's chunks (`storedPlace`). */
  private turns = 0;
  /** A write failed: the index may not match the disk, and a close does not save it. */
  private indexSuspect = false;
  /** The slots added since the last base, on disk beside the store (places-files.ts). */
  private journal: PlacesJournal | undefined;
  /** The last base's generation. */
  private generation = 0;
  /** Every slot before this minute was dropped (`expire`). */
  private sweptBelow = 0;
  /** How the last open found the index, and how long it took. */
  private opened: IndexOpen = { from: 'empty', ms: 0 };
  /** `close` began: only it writes the last base (an advance still running must not). */
  private closing = false;
  /** When the last base was written or tried. */
  private lastBaseAt = 0;

  private constructor(
    dir: string,
    identity: LedgerIdentity,
    private readonly options: LedgerStoreOptions,
  ) {
    super(dir, { ...identity, layout: LAYOUT }, openHandles);
  }

  /** Opens (or creates) the ledger of a partition; a directory of another identity is wiped first. */
  static open(dir: string, identity: LedgerIdentity, options: LedgerStoreOptions = {}): LedgerStore {
    const store = new LedgerStore(dir, identity, options);
    store.claim();
    store.indexPlaces();
    return store;
  }

  /** Wipes the store (its checkpoint does not match the changelog) and opens it empty. */
  static rebuild(store: LedgerStore): LedgerStore {
    store.wipe();
    return LedgerStore.open(store.dir, store.identity, store.options);
  }

  get(requestKey: string): LedgerEntry | undefined {
    const key = storedKey(requestKey);
    return this.unflushed.get(key) ?? this.writing.get(key) ?? decodeLedgerEntry(this.onDisk(key)?.value);
  }

  /**
   * Keeps a record this member wrote (once Kafka has it), readable at once. It reaches the disk
   * with others: one write of everything kept since the last (`flush`), when `FLUSH_AT` are
   * waiting and with every checkpoint. A write per record cost lmdb a commit each (a third of the
   * sender's CPU per result at 128 calls in flight). Nothing is lost meanwhile: the changelog
   * holds it, and the checkpoint never passes what is not on disk. A `calling` record stays in
   * memory until its outcome replaces it, and is written by a flush while still open.
   */
  record(requestKey: string, entry: LedgerEntry): void {
    this.assertOpen();
    const key = storedKey(requestKey);
    if (standing(entry.state === 'released' ? this.get(key) : undefined, entry) !== entry) return;
    this.unflushed.set(key, entry);
    if (entry.state !== 'calling' && ++this.waiting >= FLUSH_AT) void this.flush();
  }

  /** Writes what `record` kept since the last flush, in one asynchronous transaction. */
  flush(): Promise<void> {
    if (this.unflushed.size === 0) return this.flushed();
    const batch = [...this.unflushed];
    this.waiting = 0;
    const moves = this.issue(batch);
    for (const [key, entry] of batch) if (entry.state !== 'calling') this.unflushed.delete(key);
    // Still readable until written: a read between here and the commit finds it in `writing`.
    for (const [key, entry] of batch) if (entry.state !== 'calling') this.writing.set(key, entry);
    return this.writeMoves(
      moves,
      () => this.perform(moves),
      () => {
        for (const [key, entry] of batch) if (this.writing.get(key) === entry) this.writing.delete(key);
      },
    );
  }

  /**
   * `moves` written (`write` issues them, and answers the last write's promise), after the
   * journal's mark; a failed write gives the index back what it had. Single operations, not a
   * transaction callback: lmdb-js runs queued callbacks after the single operations queued with
   * them, so a flush issued before a restore chunk would land after it (an older value over a
   * newer one, and an entry at a place the index no longer names). Issued in one turn, they
   * are committed together.
   */
  private writeMoves(moves: Move[], write: () => Promise<unknown> | undefined, settled: () => void): Promise<void> {
    const failed = (error: unknown): never => {
      this.indexSuspect = true;
      // Back to before the moves: their earlier entries are still on disk, their new ones are not.
      for (let i = moves.length - 1; i >= 0; i--) {
        const { key, fingerprint, previous, place, turn } = moves[i]!;
        if (this.issued.get(key)?.turn === turn) this.issued.delete(key);
        this.moveSlot(fingerprint, place, previous);
      }
      throw error;
    };
    let written: Promise<void>;
    try {
      const marked = this.h.meta.put(JOURNAL_MARK, this.journalMark());
      written = this.trackWrites(write() ?? marked, () => {
        this.landed(moves);
        settled();
      });
    } catch (error) {
      // Never a throw into `record`: a rejected flush, as a failed commit.
      return Promise.resolve().then(() => failed(error));
    }
    return written.catch(failed);
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
    const last = new ChunkValues(++this.turns);
    const keep = (
      key: string,
      source: Buffer | null,
      start: number,
      end: number,
      at: number,
      keyStart = NOT_IN_PLACE,
    ) => {
      // A late release stays out (releaseReplaces); rare, so decoding both costs nothing much.
      if (source !== null && isReleased(source, start)) {
        const release = decodeLedgerEntry(source.subarray(start, end));
        const current = last.has(key) ? last.get(key) : this.appliedValue(key);
        if (release?.state === 'released' && !releaseReplaces(decodeLedgerEntry(current), release)) return;
      }
      last.set(key, source, start, end, at, keyStart);
    };
    const bounds = this.bounds;
    for (const { key, value } of entries) {
      if (value === null || !isBatch(value)) keep(storedKey(key), value, 0, value?.length ?? 0, NO_TIME);
      else {
        // Keys whose last value came in a batch are kept under the batch's time, not read per
        // value (a value not understood is kept, reads as nothing, and goes when its minute expires).
        const at = batchBounds(value, bounds);
        if (at !== undefined)
          for (let i = 0; i < bounds.length; i += 3) {
            const raw = value.toString('utf8', bounds[i], bounds[i + 1]);
            const key = storedKey(raw);
            // The key's line, then the value's: the entry as stored, unless the key is kept as a digest.
            keep(key, value, bounds[i + 1]! + 1, bounds[i + 2]!, at, key === raw ? bounds[i]! : NOT_IN_PLACE);
          }
      }
    }
    const { entries: db, meta } = this.h;
    // Issued after the journal's mark (below), so that no transaction holds them without it.
    const removals: number[] = [];
    const puts: number[] = [];
    const values: Buffer[] = [];
    last.forEach((key, source, start, end, batchAt, keyStart, slot) => {
      const at = batchAt === NO_TIME ? ledgerEntryTime(source?.subarray(start, end) ?? null) : batchAt;
      const minute = source === null || at === undefined || at < expireBeforeMs ? undefined : minuteOf(at);
      const fingerprint = KeyPlaces.fingerprint(key);
      // Before this chunk joins `applying`: the place the chunks before it and the disk leave.
      const previous = this.storedPlace(key, fingerprint);
      const place = minute === undefined ? undefined : this.placeFor(previous, minute);
      last.settle(slot, place);
      this.moveSlot(fingerprint, previous, place);
      if (previous !== undefined && previous !== place) removals.push(previous);
      if (place !== undefined) {
        puts.push(place);
        values.push(keyStart === NOT_IN_PLACE ? framed(key, source!, start, end) : source!.subarray(keyStart, end));
      }
    });
    let write: Promise<unknown> | undefined;
    if (removals.length > 0 || puts.length > 0 || next) {
      void meta.put(JOURNAL_MARK, this.journalMark());
      for (const stored of removals) write = db.remove(stored);
      for (let i = 0; i < puts.length; i++) write = db.put(puts[i]!, values[i]!);
    }
    this.applying.push(last);
    if (next) write = meta.put('checkpoint', next);
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
    // A flush on its way moved its keys in the index already: until it lands, `writing` is
    // where their values are read.
    await this.flushed();
    this.unflushed.clear();
    this.writing.clear();
    this.waiting = 0;
  }

  /** A key's value as the chunks applied so far leave it: those still being written first, then the disk. */
  private appliedValue(key: string): Buffer | null | undefined {
    for (let i = this.applying.length - 1; i >= 0; i--)
      if (this.applying[i]!.has(key)) return this.applying[i]!.get(key);
    return this.onDisk(key)?.value;
  }

  /**
   * The place the entry of `key` is at once the writes issued so far land (undefined: it has
   * none): a flush's or an advance's, then a restore's chunks not yet written, then the disk.
   */
  private storedPlace(key: string, fingerprint: number): number | undefined {
    // Every write changes the index when issued: none under the fingerprint, no entry anywhere
    // (the usual answer in a bulk restore).
    if (!this.places.has(fingerprint)) return undefined;
    // The latest of the writes not yet landed, in the order they were issued.
    const issued = this.issued.get(key);
    for (let i = this.applying.length - 1; i >= 0; i--) {
      const chunk = this.applying[i]!;
      if (issued !== undefined && issued.turn > chunk.turn) break;
      const place = chunk.storedPlace(key);
      if (place !== undefined) return place === REMOVED ? undefined : place;
    }
    if (issued !== undefined) return issued.place;
    return this.onDisk(key, fingerprint)?.place;
  }

  /**
   * Where a key's entry goes in `minute`: where it is, when that is in the same minute (written
   * over); else the minute's next place.
   */
  private placeFor(previous: number | undefined, minute: number): number {
    return previous !== undefined && minuteOfPlace(previous) === minute ? previous : this.placeIn(minute);
  }

  /** The next place of `minute` (of the next minute with places left, when it has none). */
  private placeIn(minute: number): number {
    for (let m = minute; m <= LAST_MINUTE; m++) {
      const next = this.nextInMinute.get(m) ?? this.nextOnDisk(m);
      if (next === PLACES_PER_MINUTE) continue;
      this.nextInMinute.set(m, next + 1);
      return m * PLACES_PER_MINUTE + next;
    }
    throw new Error('the ledger store has no place left after its minute');
  }

  /**
   * The number after the last place of `minute` on disk. Asked at the minute's first write since
   * it was last forgotten: every write of this process since then took its place from
   * `nextInMinute`, so the disk holds every place of the minute taken before.
   */
  private nextOnDisk(minute: number): number {
    const last = minute * PLACES_PER_MINUTE + PLACES_PER_MINUTE - 1;
    for (const place of this.live.entries.getKeys({ start: last, reverse: true, limit: 1 }))
      if (minuteOfPlace(place) === minute) return place - minute * PLACES_PER_MINUTE + 1;
    return 0;
  }

  /** The entry of `key` on disk, its place and its record: each place its fingerprint names is read until one holds the key. */
  private onDisk(key: string, fingerprint = KeyPlaces.fingerprint(key)): { place: number; value: Buffer } | undefined {
    const { entries } = this.live;
    for (const place of this.places.placesOf(fingerprint)) {
      const value = entries.get(place);
      if (value !== undefined && keyOfFramed(value) === key) return { place, value: recordOfFramed(value) };
    }
    return undefined;
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
    // A closing store takes no new checkpoint: the changelog holds what it would have covered.
    if (this.closing) return Promise.resolve();
    const advancing = this.advance(position);
    this.advancing = advancing.catch(() => undefined);
    return advancing;
  }

  private async advance(position: number): Promise<void> {
    await this.flush();
    await this.flushed();
    const next = { ...this.pendingCheckpoint(EMPTY), ledger: position };
    if (next.ledger <= (this.checkpoint()?.ledger ?? 0)) return;
    const moves = this.issue([...this.unflushed].filter(([, entry]) => entry.state === 'calling'));
    // On lmdb's write thread: a synchronous commit held the event loop while the disk synced
    // (0.7 s of a 20,000-request run at 128 calls in flight, in a CPU profile).
    await this.writeMoves(
      moves,
      () => {
        this.perform(moves);
        return this.meta.put('checkpoint', next);
      },
      () => undefined,
    );
    this.advanceCheckpoint(next);
    // Taken only with no write in flight: see `newBase`.
    if (this.baseDue() && this.quiet() && !this.closing) this.newBase();
  }

  /**
   * A new base is due: the journal, read back at an open after a kill -9, holds more records than
   * the index's size and a slack; or it failed (a full disk), and is started again at most once a
   * minute.
   */
  private baseDue(): boolean {
    const journal = this.journal;
    if (!journal || journal.broken) return Date.now() - this.lastBaseAt >= MINUTE;
    return journal.records > this.places.size + (this.options.journalSlack ?? JOURNAL_SLACK);
  }

  /**
   * Drops records older than `beforeMs`, then the oldest while more than `maxEntries` are kept,
   * a minute at a time (a record leaves once the whole minute of its time is past), at most
   * about `limit` in one call; answers how many went. Keys sort by minute: the oldest come first.
   */
  expire(beforeMs: number, maxEntries: number, limit: number): number {
    this.assertOpen();
    const { entries } = this.live;
    const over = Math.max(0, this.entries(entries) - maxEntries);
    const pastBefore = minuteOf(beforeMs);
    const going: { place: number; key: string; minute: number }[] = [];
    for (const { key: place, value } of entries.getRange({})) {
      const minute = minuteOfPlace(place);
      if (minute >= pastBefore && going.length >= over && minute !== going.at(-1)?.minute) break;
      if (going.length >= limit) break;
      const key = keyOfFramed(value);
      // Being written at another place, or removed: that write settles it.
      if (this.issued.has(key) || this.applying.some((chunk) => chunk.has(key))) continue;
      going.push({ place, key, minute });
    }
    if (going.length > 0) {
      const mark = this.journalMark();
      this.env.transactionSync(() => {
        this.meta.putSync(JOURNAL_MARK, mark);
        for (const { place } of going) entries.removeSync(place);
      });
      // Once committed: a failed commit leaves both the disk and the index as they were.
      for (const { key, place } of going) this.places.remove(KeyPlaces.fingerprint(key), place);
    }
    this.sweep();
    return going.length;
  }

  /**
   * After a kill -9, the journal may have brought back slots of entries removed since its base:
   * the index then holds more slots than the disk entries. While it does, and no write is on its
   * way, the slots before the oldest minute kept are dropped, at most every `SWEEP_MINUTES` of
   * the window (a sweep rewrites the table: about 20 ms a million).
   */
  private sweep(): void {
    if (!this.quiet()) return;
    const { entries } = this.live;
    let oldest: number | undefined;
    for (const place of entries.getKeys({ limit: 1 })) oldest = minuteOfPlace(place);
    // No place before the oldest minute kept is on disk or on its way there: their numbers are
    // read again from the disk (none) if a write ever comes for those minutes.
    for (const minute of this.nextInMinute.keys())
      if (oldest === undefined || minute < oldest) this.nextInMinute.delete(minute);
    if (this.places.size <= this.entries(entries)) return;
    if (oldest === undefined) {
      this.places.dropBefore(Infinity);
      return;
    }
    if (oldest < this.sweptBelow + SWEEP_MINUTES) return;
    this.places.dropBefore(oldest * PLACES_PER_MINUTE);
    this.sweptBelow = oldest;
  }

  /**
   * Writes what is kept, then the index of places as a new base for the next open (reading the
   * entries instead takes seconds a million), then closes (the directory stays for a later start).
   */
  override async close(): Promise<void> {
    this.closing = true;
    if (!this.isClosed()) {
      // An advance still running writes after the last flush: the base is taken after it. Bounded:
      // a close that waited on it without end held the partition's next open (a hand-over stalled
      // twice in CI); past the bound, the advance's later writes only send the next open to the keys.
      const waited = new AbortController();
      await Promise.race([this.advancing, sleep(CLOSE_WAITS_FOR_ADVANCE_MS, waited.signal)]);
      waited.abort();
      await this.flush().catch(() => undefined);
      await this.flushed();
      this.newBase(false);
    }
    this.journal?.close();
    await super.close();
  }

  protected override wipe(): void {
    this.journal?.close();
    this.journal = undefined;
    super.wipe();
  }

  /** Entries on disk, the directory's bytes, and the index's slots (more than the entries after a kill -9, until `sweep`). */
  stats(): { entries: number; bytes: number; indexSlots: number } {
    return { entries: this.entries(this.live.entries), bytes: this.bytes(), indexSlots: this.places.size };
  }

  /** How the last open found the index of places, and how long that took. */
  get index(): IndexOpen {
    return this.opened;
  }

  /**
   * The place of every entry on disk, at open (places-files.ts):
   * - the base alone, when no transaction came after it (a close wrote it);
   * - the base and its journal, when every transaction since was marked with that journal and
   *   the journal holds all it was marked with (a kill -9);
   * - otherwise the entries, read whole (a power loss that cut the journal), and a new base is
   *   written at once.
   */
  private indexPlaces(): void {
    const started = performance.now();
    const { entries } = this.live;
    const count = this.entries(entries);
    const base = readBase(this.dir);
    const mark = this.meta.get(JOURNAL_MARK) as JournalMark | undefined;
    let from: IndexOpen['from'];
    if (base && base.lastTxnId === this.lastTxnId()) {
      this.places = base.table;
      this.generation = base.generation;
      from = 'base';
    } else if (
      base &&
      mark?.generation === base.generation &&
      mark.length <= this.replayed(base) &&
      // Fewer slots than entries: something wrote without the journal (a release without one, run
      // on this directory after a kill -9).
      this.places.size >= count
    ) {
      this.generation = base.generation;
      from = 'journal';
    } else {
      this.places = new KeyPlaces(count);
      for (const { key: place, value } of entries.getRange({}))
        this.places.add(KeyPlaces.fingerprint(keyOfFramed(value)), place);
      // Above every generation named on disk: no old mark can match the new journal.
      this.generation = Math.max(base?.generation ?? 0, mark?.generation ?? 0);
      from = count === 0 ? 'empty' : 'keys';
    }
    // Nothing was written after the base: its journal starts again, empty. Else a new base now,
    // so that a kill -9 before the next close finds one.
    if (from === 'base') this.journal = this.startJournal(this.generation);
    // A base that could not be replaced may not be taken again: lmdb's transaction ids can come
    // back to its own after a power loss.
    else if (!this.newBase()) removeBase(this.dir);
    this.opened = { from, ms: Math.round(performance.now() - started) };
  }

  /** The base's table with its journal added (`places` becomes it); the journal's length, or -1. */
  private replayed(base: SavedBase): number {
    const length = replayJournal(this.dir, base.generation, base.table);
    if (length === undefined) return -1;
    this.places = base.table;
    return length;
  }

  /**
   * The index as it is, as the base of the next generation, and its empty journal. Only with no
   * write in flight (at open, at close, or when `quiet`): a write issued before it and landed
   * after would carry the older generation's mark, and the next open would read the keys.
   * A failure only makes the next open slower: the old base and journal stay in force. Only an
   * index that matches the disk: after a failed write it may not.
   */
  private newBase(journal = true): boolean {
    if (this.isClosed() || this.writeError || this.indexSuspect) return false;
    this.lastBaseAt = Date.now();
    const generation = this.generation + 1;
    try {
      writeBase(this.dir, generation, this.lastTxnId(), this.places);
    } catch {
      return false;
    }
    this.generation = generation;
    this.journal?.close();
    this.journal = journal ? this.startJournal(generation) : undefined;
    return true;
  }

  private startJournal(generation: number): PlacesJournal | undefined {
    try {
      return PlacesJournal.start(this.dir, generation);
    } catch {
      return undefined;
    }
  }

  /**
   * The index follows an entry from place `from` to place `to` (undefined: none). A slot added
   * goes to the journal too, before the write that stores its entry.
   */
  private moveSlot(fingerprint: number, from: number | undefined, to: number | undefined): void {
    if (from === to) return;
    if (from !== undefined) this.places.remove(fingerprint, from);
    if (to === undefined) return;
    this.places.add(fingerprint, to);
    this.journal?.add(fingerprint, to);
  }

  /** The journal's mark, its records written out: the transaction about to be issued records it. */
  private journalMark(): JournalMark {
    return this.journal?.commit() ?? BROKEN;
  }

  /** No write of any kind on its way. */
  private quiet(): boolean {
    return this.issued.size === 0 && this.applying.length === 0 && this.idle();
  }

  private lastTxnId(): number {
    return (this.env.getStats() as { lastTxnId: number }).lastTxnId;
  }

  /**
   * Records to write, as moves of their keys to places in their minutes: the index changes at once, the
   * disk when `perform` runs in the write's transaction, and until then `issued` says where
   * each key is going.
   */
  private issue(records: [string, LedgerEntry][]): Move[] {
    const moves: Move[] = [];
    for (const [key, entry] of records) {
      const fingerprint = KeyPlaces.fingerprint(key);
      const previous = this.storedPlace(key, fingerprint);
      const place = this.placeFor(previous, minuteOf(entry.at));
      this.moveSlot(fingerprint, previous, place);
      const turn = ++this.turns;
      this.issued.set(key, { place, turn });
      moves.push({
        key,
        fingerprint,
        previous,
        place,
        turn,
        value: framedText(key, encodeLedgerEntry(entry)),
      });
    }
    return moves;
  }

  /** The writes of `issue`'s moves, issued now; the last one's promise (none without moves). */
  private perform(moves: Move[]): Promise<unknown> | undefined {
    const { entries } = this.h;
    let last: Promise<unknown> | undefined;
    for (const { previous, place, value } of moves) {
      if (previous !== undefined && previous !== place) void entries.remove(previous);
      last = entries.put(place, value);
    }
    return last;
  }

  /** The moves are on disk: `issued` forgets those no later move replaced. */
  private landed(moves: Move[]): void {
    for (const { key, turn } of moves) if (this.issued.get(key)?.turn === turn) this.issued.delete(key);
  }
}

/** How an open found the index of places (`LedgerStore.index`). */
export interface IndexOpen {
  from: 'base' | 'journal' | 'keys' | 'empty';
  ms: number;
}

/** A record to write: its key moves from the place it is at (if any) to a place in its record's minute. */
interface Move {
  key: string;
  fingerprint: number;
  previous: number | undefined;
  place: number;
  /** When it was issued, among all the store's writes. */
  turn: number;
  /** As stored: the key, a line end, the record (`framed`). */
  value: Buffer;
}

/** A value's time is read from its bytes (it came alone, not in a batch). */
const NO_TIME = -1;
/** A value whose key's line is not just before it in its source (it came alone, or its key is kept as a digest). */
const NOT_IN_PLACE = -1;
/** A chunk's value for a key removes its entry (a tombstone, not understood alone, or past the window). */
const REMOVED = -1;

/**
 * The value a chunk of a restore leaves for each key, as a place in the bytes Kafka gave: a view
 * is made only of the values written (most of a restore's `calling` records are replaced by
 * their outcome in the same chunk), and no object per record.
 */
class ChunkValues {
  /** @param turn when it was issued, among all the store's writes */
  constructor(readonly turn: number) {}

  private readonly slots = new Map<string, number>();
  private readonly sources: (Buffer | null)[] = [];
  /** Per slot: the value's start and end in its source, its batch's time (or NO_TIME), and its key's start (or NOT_IN_PLACE). */
  private readonly spans: number[] = [];
  /** Per slot, once written: the place of its entry, or REMOVED. */
  private readonly places: number[] = [];

  set(key: string, source: Buffer | null, start: number, end: number, at: number, keyStart: number): void {
    const slot = this.slots.get(key);
    if (slot === undefined) {
      this.slots.set(key, this.sources.length);
      this.sources.push(source);
      this.spans.push(start, end, at, keyStart);
    } else {
      this.sources[slot] = source;
      this.spans[slot * 4] = start;
      this.spans[slot * 4 + 1] = end;
      this.spans[slot * 4 + 2] = at;
      this.spans[slot * 4 + 3] = keyStart;
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

  /** Each key's value: its source (null for a tombstone), where it lies in it, its batch's time, and where its key's line starts. */
  forEach(
    visit: (
      key: string,
      source: Buffer | null,
      start: number,
      end: number,
      at: number,
      keyStart: number,
      slot: number,
    ) => void,
  ): void {
    const spans = this.spans;
    this.slots.forEach((slot, key) =>
      visit(
        key,
        this.sources[slot]!,
        spans[slot * 4]!,
        spans[slot * 4 + 1]!,
        spans[slot * 4 + 2]!,
        spans[slot * 4 + 3]!,
        slot,
      ),
    );
  }

  /** The place of the key's entry (REMOVED: none), as `settle` said. */
  settle(slot: number, place: number | undefined): void {
    this.places[slot] = place ?? REMOVED;
  }

  /** Where this chunk puts the key: its place, REMOVED, or undefined when the chunk has no value for it. */
  storedPlace(key: string): number | undefined {
    const slot = this.slots.get(key);
    return slot === undefined ? undefined : this.places[slot];
  }

  private value(slot: number): Buffer | null {
    const source = this.sources[slot]!;
    if (source === null) return null;
    const start = this.spans[slot * 4]!;
    const end = this.spans[slot * 4 + 1]!;
    return start === 0 && end === source.length ? source : source.subarray(start, end);
  }
}

/** The directory of a partition's ledger: `<stateDir>/<groupId>/partition-<p>`. */
export function ledgerStoreDir(stateDir: string, groupId: string, partition: number): string {
  return localStoreDir(stateDir, groupId, `partition-${partition}`);
}
