import { setMaxListeners } from 'node:events';
import { Deque } from '../platform/deque.js';

/**
 * Runs work items ordered per key and concurrently across keys, and tracks, per partition,
 * the point up to which every item is finished (the offset that is safe to commit).
 *
 * - Items of one key (within one partition) run one after another, in submission order.
 * - Different keys run concurrently, at most `concurrency` at a time.
 * - The commit point of a partition is the offset of its lowest unfinished item (or the next
 *   offset after the last submitted item when all are finished), so a crash replays only
 *   unfinished work. Finished items above that point are reported too (`completedAbove`), so
 *   that a later owner of the partition can skip them.
 * - `maxBuffered` bounds the unfinished items; `maxUncommitted` (default: the same) bounds the
 *   items from the last *committed* offset (as confirmed with `markCommitted`) to the newest,
 *   finished ones included: what a crash can make run again, and what `completedAbove` has to
 *   describe. `hasCapacity()` / `whenCapacity()` let the caller stop fetching instead of
 *   growing a queue.
 * - The window is shared fairly between partitions (`maxUncommitted` / partitions each while
 *   others wait for room; why: README, "Throughput").
 *
 * Pure logic: no Kafka, no HTTP. Offsets are JavaScript numbers (exact up to 2^53).
 */

export interface WorkContext {
  readonly partition: string;
  readonly offset: number;
  /** Aborted when the partition is revoked or the runner halts: start no new attempt. */
  readonly stop: AbortSignal;
  /** Aborted at the hard deadline of a drain: give up, even on publishing a result. */
  readonly abort: AbortSignal;
  /**
   * The item no longer needs its key held (its provider call is over; what is left is publishing
   * what came of it): the next item of the key may start. The item still counts as unfinished,
   * and its offset is not committed, until its work resolves.
   */
  readonly releaseKey: () => void;
}

/** `done`: the item is finished (its offset may be committed). `abandoned`: it is not. */
export type WorkOutcome = 'done' | 'abandoned';

export type SubmitOutcome = 'queued' | 'duplicate' | 'skipped' | 'not-assigned';

export interface KeyedRunnerOptions<T> {
  concurrency: number;
  maxBuffered: number;
  /**
   * Bound on the items at or above the commit points, finished ones included (default:
   * maxBuffered). After a crash at most this many are read again.
   */
  maxUncommitted?: number;
  work: (payload: T, context: WorkContext) => Promise<WorkOutcome>;
  /**
   * An item whose work threw or was abandoned while its partition was still owned is retried after this delay (default
   * 1000 ms).
   */
  retryAbandonedAfterMs?: number;
  onWorkError?: (error: unknown, partition: string, offset: number) => void;
  /**
   * Called while an intake waits for room and a commit made now would release at least
   * `commitWorthwhileAt` items (default: a tenth of maxUncommitted): the window frees up only as
   * commits are confirmed, and one commit per finished item would cost a round trip each to a
   * sender working through a backlog at its rate limit.
   */
  onCommitWorthwhile?: () => void;
  commitWorthwhileAt?: number;
}

export interface CommitPoint {
  partition: string;
  /** Identifies one ownership of the partition; `markCommitted` ignores other epochs. */
  epoch: number;
  /** The next offset to read: every item below it is finished. */
  offset: number;
  /** Offsets above `offset` whose items are finished. */
  completedAbove: number[];
  /** Version of the partition's progress this point describes. */
  version: number;
}

export interface RunnerStats {
  /** Unfinished items: queued + running. */
  buffered: number;
  running: number;
  queued: number;
  /** Items from the committed offsets to the newest (finished ones included). */
  uncommitted: number;
  /** Offsets read but not yet committed, summed over the owned partitions. */
  commitLag: number;
  partitions: number;
  keys: number;
}

type EntryState = 'queued' | 'running' | 'done' | 'abandoned';

interface Entry<T> {
  readonly track: Track;
  readonly offset: number;
  readonly payload: T | undefined;
  state: EntryState;
  /** Its key was released while it ran (`WorkContext.releaseKey`): it left its key queue. */
  keyReleased?: boolean;
}

interface KeyQueue<T> {
  readonly id: string;
  readonly entries: Deque<Entry<T>>;
  running: boolean;
  inReady: boolean;
  retryTimer: ReturnType<typeof setTimeout> | undefined;
}

interface Track {
  readonly partition: string;
  readonly epoch: number;
  readonly stop: AbortController;
  /** Entries from the committed offset to the newest, in offset order. */
  readonly pending: Deque<Entry<unknown>>;
  /** How many entries at the front of `pending` are done: what a commit now would release. */
  releasable: number;
  readonly keyQueues: Set<KeyQueue<unknown>>;
  /** Offset after the highest submitted one; undefined until the first submission. */
  nextOffset: number | undefined;
  committedOffset: number | undefined;
  committedVersion: number;
  version: number;
  /** Offsets finished by a previous owner (from the committed metadata): skipped on arrival. */
  completed: Set<number> | undefined;
  revoked: boolean;
}

export class KeyedRunner<T> {
  private readonly options: Required<Omit<KeyedRunnerOptions<T>, 'onWorkError' | 'onCommitWorthwhile'>> &
    Pick<KeyedRunnerOptions<T>, 'onWorkError' | 'onCommitWorthwhile'>;
  private readonly tracks = new Map<string, Track>();
  private readonly keys = new Map<string, KeyQueue<T>>();
  private readonly ready = new Deque<KeyQueue<T>>();
  private readonly hard = new AbortController();
  private epochs = 0;
  private bufferedCount = 0;
  private runningCount = 0;
  private uncommittedCount = 0;
  private halted = false;
  private capacityWaiters: { partition: string | undefined; resolve: () => void }[] = [];
  private idleWaiters: (() => void)[] = [];

  constructor(options: KeyedRunnerOptions<T>) {
    if (!(options.concurrency >= 1)) throw new RangeError('concurrency must be at least 1');
    if (!(options.maxBuffered >= 1)) throw new RangeError('maxBuffered must be at least 1');
    this.options = {
      maxUncommitted: options.maxUncommitted ?? options.maxBuffered,
      retryAbandonedAfterMs: options.retryAbandonedAfterMs ?? 1000,
      commitWorthwhileAt:
        options.commitWorthwhileAt ?? Math.max(1, Math.floor((options.maxUncommitted ?? options.maxBuffered) / 10)),
      ...options,
    } as typeof this.options;
    setMaxListeners(0, this.hard.signal);
    if (this.options.maxUncommitted < options.maxBuffered)
      throw new RangeError('maxUncommitted must be at least maxBuffered');
  }

  /** Starts tracking a partition (idempotent while it stays assigned). Returns its epoch. */
  assign(partition: string): number {
    const existing = this.tracks.get(partition);
    if (existing) return existing.epoch;
    const stop = new AbortController();
    // Every running item of the partition listens to it (retry sleeps, rate-limit waits).
    setMaxListeners(0, stop.signal);
    const track: Track = {
      partition,
      epoch: ++this.epochs,
      stop,
      pending: new Deque(),
      releasable: 0,
      keyQueues: new Set(),
      nextOffset: undefined,
      committedOffset: undefined,
      committedVersion: 0,
      version: 0,
      completed: undefined,
      revoked: false,
    };
    if (this.halted) track.stop.abort();
    this.tracks.set(partition, track);
    return track.epoch;
  }

  /**
   * Offsets a previous owner finished above the committed offset `base` (from the commit
   * metadata). Only applies before the first submission of that ownership.
   */
  setCompleted(partition: string, epoch: number, offsets: Iterable<number>): void {
    const track = this.tracks.get(partition);
    if (!track || track.epoch !== epoch || track.nextOffset !== undefined) return;
    const set = new Set(offsets);
    track.completed = set.size > 0 ? set : undefined;
  }

  /**
   * Stops tracking a partition: its queued items are dropped (never started), its running
   * items are told to stop (`context.stop`) and finish on their own, and nothing of it is
   * reported for commit any more.
   */
  revoke(partition: string): void {
    const track = this.tracks.get(partition);
    if (!track) return;
    this.tracks.delete(partition);
    track.revoked = true;
    track.stop.abort();
    this.uncommittedCount -= track.pending.length;
    for (const kq of track.keyQueues as Set<KeyQueue<T>>) {
      const before = kq.entries.length;
      kq.entries.retain((e) => e.track !== track || e.state === 'running');
      this.bufferedCount -= before - kq.entries.length;
      if (kq.running) continue;
      if (kq.retryTimer) clearTimeout(kq.retryTimer);
      kq.retryTimer = undefined;
      const head = kq.entries.peek();
      if (!head) this.dropKeyQueue(kq);
      else if (head.state === 'queued') this.makeReady(kq);
    }
    track.keyQueues.clear();
    this.pump();
    this.notify();
  }

  assigned(): string[] {
    return [...this.tracks.keys()];
  }

  epochOf(partition: string): number | undefined {
    return this.tracks.get(partition)?.epoch;
  }

  /**
   * Adds an item. Offsets of one partition must arrive in increasing order; an offset below
   * one already submitted (a redelivery after a rejoin) is ignored as a duplicate.
   */
  submit(partition: string, offset: number, key: string, payload: T): SubmitOutcome {
    const track = this.tracks.get(partition);
    if (!track) return 'not-assigned';
    if (track.nextOffset !== undefined && offset < track.nextOffset) return 'duplicate';
    if (track.committedOffset === undefined) track.committedOffset = offset;
    track.nextOffset = offset + 1;

    if (track.completed?.delete(offset)) {
      if (track.completed.size === 0) track.completed = undefined;
      track.pending.push({ track, offset, payload: undefined, state: 'done' });
      this.uncommittedCount += 1;
      track.version += 1;
      this.advanceReleasable(track);
      return 'skipped';
    }

    const entry: Entry<T> = { track, offset, payload, state: 'queued' };
    track.pending.push(entry as Entry<unknown>);
    this.uncommittedCount += 1;
    this.bufferedCount += 1;

    const id = `${partition}\u0000${key}`;
    let kq = this.keys.get(id);
    if (!kq) {
      kq = { id, entries: new Deque(), running: false, inReady: false, retryTimer: undefined };
      this.keys.set(id, kq);
    }
    kq.entries.push(entry);
    track.keyQueues.add(kq as KeyQueue<unknown>);
    if (!kq.running && kq.entries.length === 1) this.makeReady(kq);
    this.pump();
    return 'queued';
  }

  /**
   * Room for one more item within both bounds; for `partition`, also within its fair share of
   * the window while another partition waits for room.
   */
  hasCapacity(partition?: string): boolean {
    if (this.bufferedCount >= this.options.maxBuffered || this.uncommittedCount >= this.options.maxUncommitted)
      return false;
    if (partition === undefined || this.capacityWaiters.length === 0) return true;
    const share = this.fairShare();
    return this.mayTake(partition, share, this.anyWaitingUnderShare(share));
  }

  /** Resolves once `hasCapacity(partition)` holds (at once when it already does). */
  whenCapacity(partition?: string): Promise<void> {
    if (this.hasCapacity(partition)) return Promise.resolve();
    const waiting = new Promise<void>((resolve) => this.capacityWaiters.push({ partition, resolve }));
    this.wantCommitIfWorthwhile();
    return waiting;
  }

  /** Items a commit made now would release from the window: the finished items at the bottom of each partition. */
  releasable(): number {
    let count = 0;
    for (const track of this.tracks.values()) count += track.releasable;
    return count;
  }

  /** Resolves once nothing is running (after `halt()`, nothing starts again). */
  whenIdle(): Promise<void> {
    if (this.runningCount === 0 && (this.halted || this.bufferedCount === 0)) return Promise.resolve();
    return new Promise((resolve) => this.idleWaiters.push(resolve));
  }

  /** Starts nothing new; running items see `context.stop` aborted. Queued items stay unfinished. */
  halt(): void {
    if (this.halted) return;
    this.halted = true;
    for (const track of this.tracks.values()) track.stop.abort();
    for (const kq of this.keys.values()) {
      if (kq.retryTimer) clearTimeout(kq.retryTimer);
      kq.retryTimer = undefined;
    }
    this.notify();
  }

  /** The hard deadline: running items see `context.abort` aborted. */
  abort(): void {
    this.halt();
    this.hard.abort();
  }

  /**
   * Commit points of the owned partitions that progressed since they were last marked
   * committed (all of them with `all`).
   */
  commitPoints(options: { all?: boolean } = {}): CommitPoint[] {
    const points: CommitPoint[] = [];
    for (const track of this.tracks.values()) {
      if (track.nextOffset === undefined) continue;
      if (!options.all && track.version === track.committedVersion) continue;
      let offset: number | undefined;
      const completedAbove: number[] = [];
      for (const entry of track.pending) {
        if (offset === undefined) {
          if (entry.state !== 'done') offset = entry.offset;
        } else if (entry.state === 'done') {
          completedAbove.push(entry.offset);
        }
      }
      offset ??= track.nextOffset;
      points.push({ partition: track.partition, epoch: track.epoch, offset, completedAbove, version: track.version });
    }
    return points;
  }

  /**
   * Records that a commit point was committed (ignored when the partition changed hands
   * since): the items below it leave the window, which makes room for new ones.
   */
  markCommitted(point: Pick<CommitPoint, 'partition' | 'epoch' | 'offset' | 'version'>): void {
    const track = this.tracks.get(point.partition);
    if (!track || track.epoch !== point.epoch) return;
    if (track.committedOffset === undefined || point.offset >= track.committedOffset)
      track.committedOffset = point.offset;
    if (point.version > track.committedVersion) track.committedVersion = point.version;
    while ((track.pending.peek()?.offset ?? Infinity) < track.committedOffset) {
      track.pending.shift();
      this.uncommittedCount -= 1;
      if (track.releasable > 0) track.releasable -= 1;
    }
    this.notify();
  }

  stats(): RunnerStats {
    let commitLag = 0;
    for (const track of this.tracks.values()) {
      if (track.nextOffset !== undefined && track.committedOffset !== undefined)
        commitLag += track.nextOffset - track.committedOffset;
    }
    return {
      buffered: this.bufferedCount,
      running: this.runningCount,
      queued: this.bufferedCount - this.runningCount,
      uncommitted: this.uncommittedCount,
      commitLag,
      partitions: this.tracks.size,
      keys: this.keys.size,
    };
  }

  private makeReady(kq: KeyQueue<T>): void {
    if (kq.inReady) return;
    kq.inReady = true;
    this.ready.push(kq);
  }

  private dropKeyQueue(kq: KeyQueue<T>): void {
    if (kq.retryTimer) clearTimeout(kq.retryTimer);
    kq.retryTimer = undefined;
    if (this.keys.get(kq.id) === kq) this.keys.delete(kq.id);
  }

  private pump(): void {
    while (!this.halted && this.runningCount < this.options.concurrency) {
      const kq = this.ready.shift();
      if (!kq) return;
      kq.inReady = false;
      const head = kq.entries.peek();
      if (kq.running || !head || head.state !== 'queued') continue;
      this.start(kq, head);
    }
  }

  private start(kq: KeyQueue<T>, entry: Entry<T>): void {
    entry.state = 'running';
    kq.running = true;
    this.runningCount += 1;
    const context: WorkContext = {
      partition: entry.track.partition,
      offset: entry.offset,
      stop: entry.track.stop.signal,
      abort: this.hard.signal,
      releaseKey: () => this.releaseKey(kq, entry),
    };
    let promise: Promise<WorkOutcome>;
    try {
      promise = this.options.work(entry.payload as T, context);
    } catch (error) {
      promise = Promise.reject(error);
    }
    promise.then(
      (outcome) => this.settle(kq, entry, outcome === 'done' ? 'done' : 'abandoned'),
      (error: unknown) => {
        this.options.onWorkError?.(error, entry.track.partition, entry.offset);
        this.settle(kq, entry, 'abandoned');
      },
    );
  }

  /** The key's next item may start while this one finishes (see WorkContext.releaseKey). */
  private releaseKey(kq: KeyQueue<T>, entry: Entry<T>): void {
    if (entry.keyReleased || entry.state !== 'running' || kq.entries.peek() !== entry) return;
    entry.keyReleased = true;
    kq.entries.shift();
    kq.running = false;
    const head = kq.entries.peek();
    if (!head) this.dropKeyQueue(kq);
    else if (head.state === 'queued' && kq.retryTimer === undefined) this.makeReady(kq);
    this.pump();
  }

  /**
   * An item whose key was released ends: only the partition's progress and the counts change.
   * Abandoned while its partition is still owned, it runs again after the retry delay, on its
   * own (its key went on: what is left of it is publishing its outcome); otherwise its offset is
   * not committed and the partition's next owner runs it again.
   */
  private settleReleased(entry: Entry<T>, outcome: 'done' | 'abandoned'): void {
    this.runningCount -= 1;
    const track = entry.track;
    if (outcome === 'abandoned' && !track.revoked && !this.halted) {
      entry.state = 'queued';
      const timer = setTimeout(() => {
        if (track.revoked || this.halted) {
          entry.state = 'abandoned';
          this.bufferedCount -= 1;
          this.notify();
          return;
        }
        this.start(
          {
            id: `released\u0000${entry.offset}`,
            entries: new Deque(),
            running: false,
            inReady: false,
            retryTimer: undefined,
          },
          entry,
        );
      }, this.options.retryAbandonedAfterMs);
      timer.unref?.();
      this.notify();
      return;
    }
    this.bufferedCount -= 1;
    entry.state = outcome;
    if (outcome === 'done' && !track.revoked) {
      track.version += 1;
      this.advanceReleasable(track);
    }
    this.pump();
    this.notify();
    this.wantCommitIfWorthwhile();
  }

  private settle(kq: KeyQueue<T>, entry: Entry<T>, outcome: 'done' | 'abandoned'): void {
    if (entry.keyReleased) return this.settleReleased(entry, outcome);
    this.runningCount -= 1;
    kq.running = false;
    const track = entry.track;
    if (outcome === 'done') {
      entry.state = 'done';
      kq.entries.shift();
      this.bufferedCount -= 1;
      if (!track.revoked) {
        track.version += 1;
        this.advanceReleasable(track);
      }
    } else if (track.revoked || this.halted) {
      // Left unfinished on purpose: its offset is not committed, so whoever reads the
      // partition next runs it again.
      entry.state = 'abandoned';
      kq.entries.shift();
      this.bufferedCount -= 1;
    } else {
      // Failed while still owned: keep the key blocked (order) and try again later.
      entry.state = 'queued';
      kq.retryTimer = setTimeout(() => {
        kq.retryTimer = undefined;
        if (kq.entries.peek() === entry && !this.halted) {
          this.makeReady(kq);
          this.pump();
        }
      }, this.options.retryAbandonedAfterMs);
      kq.retryTimer.unref?.();
    }
    if (!kq.running && kq.retryTimer === undefined) {
      const head = kq.entries.peek();
      if (!head) this.dropKeyQueue(kq);
      else if (head.state === 'queued') this.makeReady(kq);
    }
    this.pump();
    this.notify();
    this.wantCommitIfWorthwhile();
  }

  private advanceReleasable(track: Track): void {
    while (track.pending.at(track.releasable)?.state === 'done') track.releasable += 1;
  }

  private wantCommitIfWorthwhile(): void {
    if (
      this.capacityWaiters.length > 0 &&
      this.options.onCommitWorthwhile &&
      this.releasable() >= this.options.commitWorthwhileAt
    )
      this.options.onCommitWorthwhile();
  }

  /**
   * Whether `partition` may take an item while others wait: under its share, or at or over it
   * when no waiting partition is under its own (a partition over its share is never among those).
   */
  private mayTake(partition: string | undefined, share: number, anyUnder: boolean): boolean {
    return partition === undefined || this.underShare(partition, share) || !anyUnder;
  }

  private anyWaitingUnderShare(share: number): boolean {
    return this.capacityWaiters.some(
      (w) => w.partition !== undefined && this.tracks.has(w.partition) && this.underShare(w.partition, share),
    );
  }

  private underShare(partition: string, share: number): boolean {
    const track = this.tracks.get(partition);
    return !track || track.pending.length < share;
  }

  /** Each partition's share of the window while others wait for room. */
  private fairShare(): number {
    return Math.max(1, Math.ceil(this.options.maxUncommitted / Math.max(1, this.tracks.size)));
  }

  private notify(): void {
    if (this.capacityWaiters.length > 0 && this.hasCapacity()) {
      // Partitions under their share first: each woken waiter checks hasCapacity(partition) again.
      const share = this.fairShare();
      const anyUnder = this.anyWaitingUnderShare(share);
      const woken: (() => void)[] = [];
      const kept: typeof this.capacityWaiters = [];
      for (const w of this.capacityWaiters) {
        if (this.mayTake(w.partition, share, anyUnder)) woken.push(w.resolve);
        else kept.push(w);
      }
      this.capacityWaiters = kept;
      for (const resolve of woken) resolve();
    }
    if (this.idleWaiters.length > 0 && this.runningCount === 0 && (this.halted || this.bufferedCount === 0)) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }
}
