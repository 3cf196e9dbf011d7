import type { RecordToWrite } from '../kafka/port.js';
import type { ChangelogRestorer } from '../kafka/changelog-restore.js';
import type { Logger } from '../platform/logger.js';
import { sleep } from '../platform/sleep.js';
import {
  BATCH_KEY_START,
  batchKey,
  decodeBatch,
  decodeLedgerEntry,
  encodeBatch,
  encodeLedgerEntry,
  isBatch,
  isBatchable,
  standing,
  type BatchedRecord,
  type LedgerEntry,
} from './ledger-records.js';
import { LedgerStore, ledgerStoreDir } from './ledger-store.js';
import { errorMessage } from '../platform/errors.js';

/**
 * The sender's durable memory of its requests (README "Sent once"): per owned partition p of
 * send-requests, a local store of partition p of `send-ledger`, restored when the partition is
 * assigned (delta from the store's checkpoint on a restart, in bulk on a new member), kept as
 * this member writes, swept by the idempotency window and the size bound. Writing goes through
 * the processor's durable publish; this class builds the records and keeps them once Kafka has
 * them.
 */
export interface RequestLedgerOptions {
  changelogs: ChangelogRestorer;
  /** This process, as its records name it (`calling` records, batch keys). */
  owner: string;
  topic: string;
  /** Partitions of send-requests (and of the ledger, co-partitioned). */
  partitions: number;
  stateDir: string;
  groupId: string;
  windowMs: number;
  /** Entries kept by this member over all partitions; each partition keeps its share. */
  maxEntries: number;
  logger: Logger;
  /**
   * How long to wait for the writes of an earlier ownership of a partition in this process to finish before restoring
   * it.
   */
  settleMs?: number;
  now?: () => number;
}

/**
 * Changelog records applied per LMDB transaction during a restore. A batch record carries a
 * turn's records (about 30 in the throughput bench): 250 records are a few thousand entries,
 * a few milliseconds of this thread, applied while lmdb writes the chunks before.
 */
const CHUNK = 250;
/** Chunks of a restore applied and not yet durable before reading Kafka waits for lmdb. */
const WRITES_AHEAD = 4;
const READ_TIMEOUT_MS = 30 * 60_000;
const READ_BYTES_PER_PARTITION = 2 * 1024 * 1024;
/** Entries dropped per sweep and partition: bounded work between batches. */
const SWEEP_LIMIT = 20_000;
/** Refreshes of a partition for records another member may still write: at most one this often. */
const REFRESH_EVERY_MS = 1000;
/** Records in one batch, and the bytes of their keys and results: a batch stays far below a record's limit. */
const BATCH_MAX_RECORDS = 500;
const BATCH_MAX_BYTES = 256 * 1024;
/** What a record's line adds to its key, result and owner: more than its state, offset and time take. */
const RECORD_FRAMING_BYTES = 128;

/** A record waiting for its batch (`writeBatched`). */
interface PendingRecord extends BatchedRecord {
  publish: (record: RecordToWrite) => Promise<boolean>;
  written: (ok: boolean) => void;
}

interface OpenPartition {
  store: LedgerStore;
  /** Requests of this partition working with the store (they record into it when they end). */
  holds: number;
  /** Assigned to this member (false once revoked: closed when the last hold goes). */
  owned: boolean;
  /** Ledger writes issued and not yet kept in the store. */
  writing: Set<Promise<unknown>>;
  /** Keys another member may still record an outcome for, being waited for. */
  waitedFor: Set<string>;
  refreshing: Promise<void> | undefined;
  lastRefresh: number;
  released: (() => void)[];
  /** Where the changelog partition ended when last looked at (`observeEnds`), and when (performance.now()). */
  observed?: { end: number; at: number };
  /** An end a commit accepted after it was observed proves this member's alone below it (`confirmOwnership`). */
  provenEnd?: number;
}

export interface LedgerStats {
  partitions: number;
  entries: number;
  bytes: number;
}

export class RequestLedger {
  private readonly open = new Map<number, OpenPartition>();
  private readonly opening = new Map<number, Promise<void>>();
  /** Stores of partitions that moved away, still closing: opening the directory again waits (one LMDB environment per path in a process). */
  private readonly closing = new Map<number, Promise<void>>();
  /** `calling` and `done` records of each partition waiting to go out together (`writeBatched`). */
  private readonly pending = new Map<number, PendingRecord[]>();
  private batches = 0;
  private readonly now: () => number;
  /** What each record's line adds to its key and result in a batch (`splitBatches`). */
  private readonly framing: number;
  private closed = false;

  constructor(private readonly options: RequestLedgerOptions) {
    this.now = options.now ?? Date.now;
    this.framing = RECORD_FRAMING_BYTES + Buffer.byteLength(options.owner);
  }

  get owner(): string {
    return this.options.owner;
  }

  private get perPartitionMax(): number {
    return Math.max(1, Math.ceil(this.options.maxEntries / this.options.partitions));
  }

  /**
   * Makes partition p's ledger ready: waits (bounded) for the writes of an earlier ownership in
   * this process, opens the store and brings it up to the end of the changelog partition.
   * Resolves with the restore's mode and records; rejects when Kafka cannot be read.
   */
  assign(partition: number, signal?: AbortSignal): Promise<void> {
    const running = this.opening.get(partition);
    if (running) return running;
    const opening = this.restore(partition, signal).finally(() => this.opening.delete(partition));
    this.opening.set(partition, opening);
    return opening;
  }

  private async restore(partition: number, signal?: AbortSignal): Promise<void> {
    const { options } = this;
    const started = performance.now();
    let current = this.open.get(partition);
    if (current && current.holds > 0) {
      // Requests of the partition's previous ownership are still recording: their records must
      // be in Kafka before the read below decides where the changelog ends.
      await Promise.race([
        new Promise<void>((resolve) => current!.released.push(resolve)),
        sleep(options.settleMs ?? 30_000, signal),
      ]);
    }
    current = this.open.get(partition);
    if (current) {
      await Promise.allSettled([...current.writing]);
      // Read back with what other members wrote meanwhile (README "A late release").
      await current.store.forgetKept();
    } else await this.closing.get(partition);
    const clusterId = await options.changelogs.clusterId();
    let store =
      current?.store ??
      LedgerStore.open(ledgerStoreDir(options.stateDir, options.groupId, partition), {
        clusterId,
        topic: options.topic,
        partition,
        partitions: options.partitions,
      });
    try {
      let from = store.checkpoint()?.ledger;
      const inconsistency =
        from === undefined
          ? undefined
          : await options.changelogs.inconsistency([{ topic: options.topic, partition, position: from }]);
      if (inconsistency) {
        options.logger.warn(
          { partition, dir: store.dir, checkpoint: from, reason: inconsistency },
          'the local request ledger does not match its changelog; rebuilding it',
        );
        store = LedgerStore.rebuild(store);
        from = undefined;
      }
      const expireBeforeMs = this.now() - options.windowMs;
      const read = await options.changelogs.inTurn(() =>
        options.changelogs.read({
          topic: options.topic,
          partition,
          ...(from !== undefined ? { from } : {}),
          chunkSize: CHUNK,
          ...(signal ? { signal } : {}),
          timeoutMs: READ_TIMEOUT_MS,
          maxBytesPerPartition: READ_BYTES_PER_PARTITION,
          apply: (own, _others, reached) => store.applyChangelog(own, reached, expireBeforeMs),
          // Kafka is read ahead of lmdb's writes by a few chunks at most.
          afterBatch: () => (store.writesPending > WRITES_AHEAD ? store.written() : undefined),
        }),
      );
      await store.written();
      // The pages the restore touched leave this process's resident set; a store still in use
      // (the partition came back while its requests ran) is not remapped under them.
      if (!current) await store.remap();
      store.expire(expireBeforeMs, this.perPartitionMax, Number.MAX_SAFE_INTEGER);
      const entry: OpenPartition = current ?? {
        store,
        holds: 0,
        owned: true,
        writing: new Set(),
        waitedFor: new Set(),
        refreshing: undefined,
        lastRefresh: 0,
        released: [],
      };
      entry.store = store;
      entry.owned = true;
      this.open.set(partition, entry);
      const ms = performance.now() - started;
      options.logger.info(
        {
          partition,
          mode: from === undefined ? 'bulk' : 'delta',
          from: from ?? null,
          records: read.records,
          recordsPerSecond: ms > 0 ? Math.round((read.records * 1000) / ms) : null,
          entries: store.stats().entries,
          // How the open found the store's index of minutes: a base (closed), its journal (a kill -9), the keys.
          index: store.index,
          ms: Math.round(ms),
        },
        from === undefined ? 'request ledger restored in bulk' : 'request ledger caught up from its checkpoint',
      );
    } catch (error) {
      if (!current) await store.close().catch(() => undefined);
      throw error;
    }
  }

  /** The partition moved away: its store closes once the requests still recording into it are done. */
  revoke(partition: number): void {
    const entry = this.open.get(partition);
    if (!entry) return;
    entry.owned = false;
    if (entry.holds === 0) void this.closePartition(partition, entry);
  }

  private async closePartition(partition: number, entry: OpenPartition): Promise<void> {
    if (this.open.get(partition) !== entry || entry.owned || entry.holds > 0) return;
    this.open.delete(partition);
    const closed = Promise.allSettled([...entry.writing])
      .then(() => entry.store.close())
      .catch(() => undefined)
      .finally(() => {
        if (this.closing.get(partition) === closed) this.closing.delete(partition);
      });
    this.closing.set(partition, closed);
    await closed;
  }

  /** A request of the partition starts working with the ledger; `release` when it ends. */
  hold(partition: number): boolean {
    const entry = this.open.get(partition);
    if (!entry) return false;
    entry.holds++;
    return true;
  }

  release(partition: number): void {
    const entry = this.open.get(partition);
    if (!entry || entry.holds === 0) return;
    entry.holds--;
    if (entry.holds > 0) return;
    for (const resolve of entry.released.splice(0)) resolve();
    if (!entry.owned) void this.closePartition(partition, entry);
  }

  isReady(partition: number): boolean {
    return this.open.has(partition) && !this.opening.has(partition);
  }

  /** What the ledger holds for a request of the partition (undefined when nothing, or the partition is not open). */
  lookup(partition: number, key: string): LedgerEntry | undefined {
    return this.open.get(partition)?.store.get(key);
  }

  /** The Kafka record of a ledger entry: to partition p of the ledger, whatever its key hashes to. */
  recordOf(partition: number, key: string, entry: LedgerEntry): RecordToWrite {
    return { key, partition, value: encodeLedgerEntry(entry), headers: {} };
  }

  /**
   * Publishes a ledger entry with `publish` (which resolves once Kafka acknowledged it, or false
   * when it gave up) and keeps it in the store; the partition's checkpoint does not pass it
   * until it is kept.
   */
  async write(
    partition: number,
    key: string,
    entry: LedgerEntry,
    publish: (record: RecordToWrite) => Promise<boolean>,
  ): Promise<boolean> {
    if (entry.state !== 'released' && isBatchable({ key, entry }))
      return this.writeBatched(partition, { key, entry }, publish);
    const open = this.open.get(partition);
    const work = publish(this.recordOf(partition, key, entry));
    open?.writing.add(work);
    try {
      if (!(await work)) return false;
    } finally {
      open?.writing.delete(work);
    }
    // The store of this ownership, or of the next one when the partition came back meanwhile.
    const store = this.open.get(partition)?.store;
    if (store && !store.isClosed()) store.record(key, entry);
    return true;
  }

  /**
   * A `calling` or `done` record joins the others of its partition written in the same turn of
   * the event loop (the calls a fetch or a freed slot starts together, the outcomes of the calls
   * answered together): they go out as one batch record, published with the first writer's
   * `publish` (the next one's if that writer stopped), and are kept in the store once Kafka has it.
   */
  private writeBatched(
    partition: number,
    record: BatchedRecord,
    publish: (record: RecordToWrite) => Promise<boolean>,
  ): Promise<boolean> {
    let turn = this.pending.get(partition);
    if (!turn) {
      const started: PendingRecord[] = (turn = []);
      this.pending.set(partition, started);
      // The turn's writes are in progress from now on: the partition's store stays open until
      // they are kept. One promise a turn, not one a record.
      let settle!: () => void;
      const settled = new Promise<void>((resolve) => (settle = resolve));
      const open = this.open.get(partition);
      open?.writing.add(settled);
      setImmediate(() => {
        if (this.pending.get(partition) === started) this.pending.delete(partition);
        const batches = splitBatches(started, this.framing).map((batch) => this.writeBatch(partition, batch));
        void Promise.all(batches).then(() => {
          open?.writing.delete(settled);
          settle();
        });
      });
    }
    return new Promise<boolean>((written) => turn.push({ key: record.key, entry: record.entry, publish, written }));
  }

  private async writeBatch(partition: number, records: PendingRecord[]): Promise<void> {
    const record: RecordToWrite = {
      key: batchKey(this.owner, ++this.batches),
      partition,
      value: encodeBatch(this.owner, records),
      headers: {},
    };
    let ok = false;
    for (const pending of records) if ((ok = await pending.publish(record))) break;
    const store = ok ? this.open.get(partition)?.store : undefined;
    if (store && !store.isClosed()) for (const { key, entry } of records) store.record(key, entry);
    for (const pending of records) pending.written(ok);
  }

  /**
   * Reads what the changelog partition holds now for `key` (written by another member after this
   * one restored it), at most once a second per partition whatever the number of waiting keys;
   * answers the entry then held.
   */
  async refresh(partition: number, key: string, signal?: AbortSignal): Promise<LedgerEntry | undefined> {
    const entry = this.open.get(partition);
    if (!entry) return undefined;
    entry.waitedFor.add(key);
    try {
      while (entry.refreshing) await entry.refreshing;
      const wait = entry.lastRefresh + REFRESH_EVERY_MS - this.now();
      if (wait > 0 && !(await sleep(wait, signal))) return entry.store.get(key);
      while (entry.refreshing) await entry.refreshing;
      if (this.now() - entry.lastRefresh >= REFRESH_EVERY_MS) {
        entry.refreshing = this.readWaited(partition, entry, signal).finally(() => {
          entry.lastRefresh = this.now();
          entry.refreshing = undefined;
        });
        await entry.refreshing;
      }
      return entry.store.get(key);
    } finally {
      entry.waitedFor.delete(key);
    }
  }

  /**
   * The records of the waited-for keys from the checkpoint to the end, applied without moving the
   * checkpoint: only keys this member is not writing itself, so nothing it wrote is overtaken.
   */
  private async readWaited(partition: number, entry: OpenPartition, signal?: AbortSignal): Promise<void> {
    const keys = new Set(entry.waitedFor);
    const found = new Map<string, LedgerEntry | undefined>();
    // In log order: a late release does not replace what it must not (README "A late release").
    const read = (key: string, next: LedgerEntry | undefined) => {
      const current = found.has(key) ? found.get(key) : entry.store.get(key);
      found.set(key, next && standing(current, next));
    };
    try {
      await this.options.changelogs.read({
        topic: this.options.topic,
        partition,
        from: entry.store.checkpoint()?.ledger ?? 0,
        // A batch's key names its writer, not the requests in it: every batch is read.
        filter: (r) => {
          const key = r.key!.toString();
          return keys.has(key) || key.startsWith(BATCH_KEY_START);
        },
        chunkSize: CHUNK,
        ...(signal ? { signal } : {}),
        timeoutMs: 60_000,
        maxBytesPerPartition: READ_BYTES_PER_PARTITION,
        apply: (own) => {
          for (const e of own) {
            if (e.value && isBatch(e.value)) {
              for (const record of decodeBatch(e.value) ?? []) if (keys.has(record.key)) read(record.key, record.entry);
            } else if (keys.has(e.key)) read(e.key, decodeLedgerEntry(e.value));
          }
        },
      });
    } catch (error) {
      this.options.logger.warn(
        { err: errorMessage(error), partition },
        'reading the request ledger again failed: waiting for the previous owner goes on',
      );
      return;
    }
    for (const [key, value] of found) if (value && !entry.store.isClosed()) entry.store.record(key, value);
  }

  /** Periodic upkeep: `advance`, then the ends are looked at again for the next round. */
  async tick(): Promise<void> {
    await this.advance();
    await this.observeEnds();
  }

  /**
   * Each owned partition's checkpoint moves to the end its ownership was proven up to, once this
   * member's writes below it are kept (a restart then reads only the little written since), and
   * records past the idempotency window or beyond the size bound go.
   */
  async advance(): Promise<void> {
    if (this.closed || this.open.size === 0) return;
    for (const [partition, entry] of this.open) {
      if (!entry.owned || this.opening.has(partition) || entry.waitedFor.size > 0) continue;
      const end = entry.provenEnd;
      await Promise.allSettled([...entry.writing]);
      if (end !== undefined && this.open.get(partition) === entry)
        await entry.store.advanceTo(end).catch(() => undefined);
      if (this.open.get(partition) === entry)
        entry.store.expire(this.now() - this.options.windowMs, this.perPartitionMax, SWEEP_LIMIT);
    }
  }

  /**
   * Notes where each owned partition's changelog ends now. Moving the checkpoint there at once
   * assumed this member was its only writer: a member evicted from the group without knowing it
   * (frozen, starved) went on moving its checkpoints past the records of the member that had taken
   * its partitions, and when it got one back, its delta restore skipped them and it sent requests
   * that member had sent (`maybeSent: false`). An end counts only once a commit sent after it was
   * observed is accepted (`confirmOwnership`): the group still knew this member as the owner then.
   */
  async observeEnds(): Promise<void> {
    if (this.closed || this.open.size === 0) return;
    const at = performance.now();
    let ends: Map<number, { high: number }>;
    try {
      ends = await this.options.changelogs.ends(this.options.topic);
    } catch {
      return;
    }
    for (const [partition, entry] of this.open) {
      const end = ends.get(partition)?.high;
      if (entry.owned && !this.opening.has(partition) && end !== undefined) entry.observed = { end, at };
    }
  }

  /**
   * A commit sent at `sentAt` (performance.now()) was accepted: this member owned its partitions
   * then, so nobody else wrote their ledger below what was observed before it.
   */
  confirmOwnership(sentAt: number): void {
    for (const entry of this.open.values()) {
      if (!entry.owned || !entry.observed || entry.observed.at >= sentAt) continue;
      entry.provenEnd = Math.max(entry.provenEnd ?? 0, entry.observed.end);
      entry.observed = undefined;
    }
  }

  stats(): LedgerStats {
    let entries = 0;
    let bytes = 0;
    for (const entry of this.open.values()) {
      const s = entry.store.stats();
      entries += s.entries;
      bytes += s.bytes;
    }
    return { partitions: this.open.size, entries, bytes };
  }

  /** Waits for the writes in flight and closes every store. */
  async close(): Promise<void> {
    this.closed = true;
    const entries = [...this.open.values()];
    this.open.clear();
    await Promise.allSettled(entries.flatMap((e) => [...e.writing]));
    await Promise.allSettled(entries.map((e) => e.store.close()));
    await Promise.allSettled([...this.closing.values()]);
  }
}

/** A partition's pending records in batches within the bounds. */
function splitBatches(records: PendingRecord[], framing: number): PendingRecord[][] {
  const batches: PendingRecord[][] = [];
  let batch: PendingRecord[] = [];
  let bytes = 0;
  for (const record of records) {
    // Bytes as written: UTF-8, and the rest of the record's line.
    const size =
      Buffer.byteLength(record.key) +
      (record.entry.state === 'done' ? Buffer.byteLength(record.entry.result) : 0) +
      framing;
    if (batch.length > 0 && (batch.length >= BATCH_MAX_RECORDS || bytes + size > BATCH_MAX_BYTES)) {
      batches.push(batch);
      batch = [];
      bytes = 0;
    }
    batch.push(record);
    bytes += size;
  }
  if (batch.length > 0) batches.push(batch);
  return batches;
}
