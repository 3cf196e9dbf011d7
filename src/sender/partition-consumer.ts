import {
  CommitMetadataTooLargeError,
  RejoinNeededError,
  type BatchControl,
  type ConsumedRecord,
  type GroupConsumer,
} from '../kafka/group-consumer.js';
import type { Logger } from '../platform/logger.js';
import type { KeyedRunner } from './keyed-runner.js';
import { decodeCompleted, encodeCompleted } from './offset-metadata.js';
import { sleep } from '../platform/sleep.js';
import { WorkInterval } from '../platform/work-interval.js';
import { errorMessage } from '../platform/errors.js';

/**
 * The bytes a fetch asks of each partition: about what the window takes, shared by eight
 * partitions (512 bytes a request; 125 KiB at the default window of 2,000), from 64 KiB to
 * kafkajs's 1 MiB. kafkajs decodes a whole fetch and holds it until every record is in the
 * window: at 1 MiB a partition, a backlog on 12 partitions kept 20,000 decoded requests alive
 * for a window of 2,000 (README "Bounded"). The fetch's total stays 10 MiB: kafkajs asks for the
 * partitions in the same order every time, so a total below their sum would starve the last ones.
 */
export function fetchBytesPerPartition(maxBufferedRequests: number): number {
  return Math.min(1024 * 1024, Math.max(64 * 1024, Math.ceil((maxBufferedRequests * 512) / 8)));
}

/**
 * The sender's consumer-group member protocol (README "Guarantees"): assignments and
 * revocations fed to the keyed runner, batches taken while the runner's window has room (the
 * member heartbeats while it waits), the commit loop (lowest unfinished offset plus the
 * finished ones above it, in the commit metadata), and the drain. It knows the group only
 * through the GroupConsumer port.
 */
export type MemberState = 'starting' | 'running' | 'draining' | 'stopped' | 'failed';

export interface PartitionConsumerOptions<J> {
  consumer: GroupConsumer;
  runner: KeyedRunner<J>;
  /** From a record to the runner's payload and its order key. */
  prepare: (record: ConsumedRecord) => { job: J; key: string };
  commitIntervalMs: number;
  /** Longest wait for the previous owner's commit metadata on assignment. */
  metadataTimeoutMs?: number;
  logger: Logger;
  /** After each commit; `sentAt` (performance.now()) is when it was sent. */
  onCommit?: (result: 'ok' | 'error', sentAt: number) => void;
  /** In a drain, after the work in progress and before the last commit. */
  beforeFinalCommit?: () => Promise<void>;
  onAssignment?: () => void;
  /**
   * Partitions newly owned: resolves once they may be worked (their request ledger restored);
   * their batches wait for it. `released` ones are no longer owned.
   */
  preparePartitions?: (partitions: number[]) => Promise<void>;
  releasePartitions?: (partitions: number[]) => void;
  /**
   * The member is about to rejoin its group (a rebalance): what it does now happens before any
   * other member can own its partitions (the calls in flight end and are recorded); then it
   * commits its progress. `afterAssignment` follows the next assignment.
   */
  beforeRejoin?: () => Promise<void>;
  afterAssignment?: () => void;
  /** The client gave up for good. */
  onFatal?: (error: Error) => void;
}

export class PartitionConsumer<J> {
  private memberState: MemberState = 'starting';
  private joined = false;
  private memberId: string | undefined;
  /** Set when a heartbeat reports a rebalance, cleared by the next assignment (see onBatch). */
  private rejoining = false;
  /** Per newly assigned partition: the load of what its previous owner finished. */
  private readonly gates = new Map<string, Promise<void>>();
  private metadataEnabled = true;
  private committing: Promise<void> | undefined;
  /** The periodic commit (see keepCommitting). */
  private readonly commitTimer: WorkInterval;
  private markReady!: () => void;
  /** Resolves once the member joined the group for the first time (or stops trying). */
  readonly ready = new Promise<void>((resolve) => (this.markReady = resolve));

  constructor(private readonly options: PartitionConsumerOptions<J>) {
    this.commitTimer = new WorkInterval(options.commitIntervalMs, () => this.commitTick());
  }

  get state(): MemberState {
    return this.memberState;
  }

  /** A member of the group, running. */
  isMember(): boolean {
    return this.memberState === 'running' && this.joined;
  }

  /** Why the member is not working, or undefined when it is. */
  notReadyReason(): string | undefined {
    if (this.memberState === 'draining' || this.memberState === 'stopped') return 'draining';
    if (this.memberState === 'failed') return 'the Kafka consumer stopped';
    if (!this.joined) return 'not yet a member of the consumer group';
    return undefined;
  }

  async start(): Promise<void> {
    this.keepCommitting();
    try {
      await this.options.consumer.start({
        onAssignment: (partitions, member) => this.onAssignment(partitions, member),
        onBatch: (partition, records, control) => this.onBatch(partition, records, control),
        // Commit what is finished before rejoining: after the rejoin, this generation's commits
        // are refused, and whatever was not committed runs again at the partition's next owner.
        onRebalancing: () => void this.commitProgress(),
        beforeRejoin: async () => {
          await this.options.beforeRejoin?.();
          await this.commitProgress();
        },
        onCrash: (error, restarting) => this.onCrash(error, restarting),
      });
    } catch (error) {
      this.commitTimer.stop();
      throw error;
    }
  }

  /**
   * The periodic commit runs while there is something to commit or work that will make some:
   * an idle member stops it (5 wake-ups a second fewer), and the next batch starts it again.
   * Progress comes only from submitted records, and a failed commit leaves its points pending,
   * so the tick that stops the timer cannot strand anything.
   */
  private keepCommitting(): void {
    if (this.memberState !== 'draining' && this.memberState !== 'stopped') this.commitTimer.start();
  }

  /** One periodic commit; false (the timer stops) when there is nothing to commit and nothing in progress. */
  private commitTick(): boolean {
    const { runner } = this.options;
    if (this.committing === undefined && runner.stats().buffered === 0 && runner.commitPoints().length === 0)
      return false;
    void this.commitOnce();
    return true;
  }

  /**
   * Stops taking records, lets the work in progress finish within 70% of `graceMs` (then
   * abandons it: it runs again at the next owner), commits, leaves the group. True when
   * everything in progress finished in time.
   */
  async drain(graceMs: number): Promise<boolean> {
    const started = Date.now();
    const { runner, consumer, logger } = this.options;
    this.memberState = 'draining';
    this.markReady();
    consumer.pauseAll();
    runner.halt();
    const before = runner.stats();
    logger.info(
      { running: before.running, queued: before.queued },
      'draining: finishing the provider calls in progress',
    );
    let finished = await Promise.race([
      runner.whenIdle().then(() => true),
      sleep(Math.floor(graceMs * 0.7)).then(() => false),
    ]);
    if (!finished) {
      logger.warn(
        { running: runner.stats().running },
        'drain grace running out: abandoning what is still in progress (it runs again elsewhere)',
      );
      runner.abort();
      await Promise.race([runner.whenIdle(), sleep(Math.floor(graceMs * 0.1))]);
      finished = false;
    }
    this.commitTimer.stop();
    await this.committing;
    await this.options.beforeFinalCommit?.().catch(() => undefined);
    await this.commitOnce();
    try {
      await Promise.race([consumer.stop(), sleep(Math.max(1000, graceMs - (Date.now() - started)))]);
    } catch (err) {
      logger.warn({ err }, 'leaving the consumer group failed');
    }
    this.memberState = 'stopped';
    return finished;
  }

  /** Stops without draining (a start that failed half-way). */
  async abort(): Promise<void> {
    this.memberState = 'stopped';
    this.commitTimer.stop();
    this.options.runner.abort();
    await this.options.consumer.stop().catch(() => undefined);
  }

  /** The periodic commit: one at a time, each in a fresh macrotask. */
  commitOnce(): Promise<void> {
    this.committing ??= (async () => {
      // kafkajs switches to a new generation and emits GROUP_JOIN within one turn of the event
      // loop, so at the start of a macrotask the assignment the runner knows and the
      // generation a commit carries agree.
      await new Promise((resolve) => setImmediate(resolve));
      await this.commitProgress();
    })().finally(() => {
      this.committing = undefined;
    });
    return this.committing;
  }

  private onAssignment(partitions: number[], member: string): void {
    const { runner, logger } = this.options;
    if (this.memberId !== undefined && member !== this.memberId) {
      // A new membership: whatever this process held may have been owned by others since.
      this.revokeAll();
    }
    this.memberId = member;
    this.rejoining = false;
    const owned = new Set(partitions.map(String));
    const revoked = runner.assigned().filter((p) => !owned.has(p));
    for (const p of revoked) {
      runner.revoke(p);
      this.gates.delete(p);
    }
    if (revoked.length > 0) this.options.releasePartitions?.(revoked.map(Number));
    const fresh = partitions.filter((p) => runner.epochOf(String(p)) === undefined);
    for (const p of fresh) runner.assign(String(p));
    if (fresh.length > 0) {
      const gate = Promise.all([this.loadCompleted(fresh), this.options.preparePartitions?.(fresh)]).then(
        () => undefined,
      );
      for (const p of fresh) this.gates.set(String(p), gate);
    }
    this.options.onAssignment?.();
    this.options.afterAssignment?.();
    logger.info({ partitions, revoked, added: fresh }, 'assignment');
    this.joined = true;
    if (this.memberState === 'starting') this.memberState = 'running';
    this.markReady();
  }

  private onCrash(error: Error, restarting: boolean): void {
    const { logger } = this.options;
    this.joined = false;
    this.rejoining = false;
    this.revokeAll();
    this.options.afterAssignment?.();
    if (restarting) {
      logger.warn({ err: error.message }, 'the Kafka consumer crashed; it restarts and rejoins');
      return;
    }
    logger.fatal({ err: error.message }, 'the Kafka consumer stopped for good');
    if (this.memberState === 'running' || this.memberState === 'starting') this.memberState = 'failed';
    this.options.onFatal?.(error);
  }

  private revokeAll(): void {
    const { runner } = this.options;
    const held = runner.assigned();
    for (const p of held) runner.revoke(p);
    this.gates.clear();
    if (held.length > 0) this.options.releasePartitions?.(held.map(Number));
  }

  /** What the previous owners finished above the committed offsets: skipped when they arrive. */
  private async loadCompleted(partitions: number[]): Promise<void> {
    const { runner, consumer, logger } = this.options;
    const epochs = new Map(partitions.map((p) => [p, runner.epochOf(String(p))]));
    try {
      const committed = await Promise.race([
        consumer.fetchCommitted(partitions),
        sleep(this.options.metadataTimeoutMs ?? 10_000).then(() => {
          throw new Error('timed out');
        }),
      ]);
      for (const c of committed) {
        const epoch = epochs.get(c.partition);
        if (epoch === undefined || c.offset < 0) continue;
        const completed = decodeCompleted(c.metadata, c.offset);
        if (completed.length > 0) {
          runner.setCompleted(String(c.partition), epoch, completed);
          logger.info(
            { partition: c.partition, committed: c.offset, skipping: completed.length },
            'skipping requests the previous owner finished above the committed offset',
          );
        }
      }
    } catch (err) {
      logger.warn(
        { err: errorMessage(err), partitions },
        'could not read the commit metadata: requests finished above the committed offsets may be sent again',
      );
    }
  }

  private active(control: BatchControl): boolean {
    return this.memberState === 'running' && !this.rejoining && control.isActive();
  }

  /**
   * kafkajs heartbeats only between batches: a handler that spends a while on a batch
   * heartbeats itself, or the rebalance waits for it. A heartbeat that reports a rebalance
   * ends the batch (the client then rejoins); the remaining batches of the same fetch return
   * at once instead of each heartbeating into the same error in turn.
   */
  private async heartbeat(control: BatchControl): Promise<void> {
    try {
      await control.heartbeat();
    } catch (err) {
      if (err instanceof RejoinNeededError) this.rejoining = true;
      throw err;
    }
  }

  /** Waits for a promise while keeping the membership alive; false when the batch should end. */
  private async waitKeepingAlive(promise: Promise<unknown>, control: BatchControl): Promise<boolean> {
    let settled = false;
    void promise.then(
      () => (settled = true),
      () => (settled = true),
    );
    while (!settled) {
      await Promise.race([promise.catch(() => undefined), sleep(500)]);
      if (!this.active(control)) return false;
      if (!settled) await this.heartbeat(control);
    }
    return true;
  }

  private async onBatch(partition: number, records: ConsumedRecord[], control: BatchControl): Promise<void> {
    const { runner } = this.options;
    const p = String(partition);
    if (!this.active(control)) return;
    // A rebalance noticed by the client's own heartbeat after the previous batch surfaces here.
    await this.heartbeat(control);
    let lastBeat = Date.now();
    const gate = this.gates.get(p);
    if (gate) {
      if (!(await this.waitKeepingAlive(gate, control))) return;
      if (this.gates.get(p) === gate) this.gates.delete(p);
    }
    for (const record of records) {
      if (Date.now() - lastBeat >= 500) {
        await this.heartbeat(control);
        lastBeat = Date.now();
      }
      if (!this.active(control) || runner.epochOf(p) === undefined) return;
      // Other partitions' batches run concurrently: the check and the submit must not be
      // separated by an await, or together they would overfill the window.
      // The window frees up as commits are confirmed: the runner asks for an early commit
      // (onCommitWorthwhile) once one would release enough of it; else the periodic one does.
      while (!runner.hasCapacity(p)) {
        if (!(await this.waitKeepingAlive(runner.whenCapacity(p), control))) return;
        if (runner.epochOf(p) === undefined) return;
      }
      const { job, key } = this.options.prepare(record);
      if (runner.submit(p, Number(record.offset), key, job) === 'not-assigned') return;
      this.keepCommitting();
      control.resolveOffset(record.offset);
    }
  }

  /** Commits the progress of the owned partitions once; failures wait for the next round. */
  private async commitProgress(): Promise<void> {
    const { runner, consumer, logger } = this.options;
    const points = runner.commitPoints();
    if (points.length === 0) return;
    const sentAt = performance.now();
    try {
      await consumer.commit(
        points.map((point) => ({
          partition: Number(point.partition),
          offset: point.offset,
          metadata: this.metadataEnabled ? encodeCompleted(point.offset, point.completedAbove) : null,
        })),
      );
      for (const point of points) runner.markCommitted(point);
      this.options.onCommit?.('ok', sentAt);
    } catch (err) {
      this.options.onCommit?.('error', sentAt);
      if (err instanceof CommitMetadataTooLargeError) {
        this.metadataEnabled = false;
        logger.warn('the broker refuses the commit metadata (offset.metadata.max.bytes): committing without it');
      } else {
        logger.debug({ err: errorMessage(err) }, 'commit failed; the next one retries with fresh state');
      }
    }
  }
}
