import './kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed
import {
  Partitioners,
  type Admin,
  type Batch,
  type Consumer,
  type Message,
  type Producer,
  type TopicMessages,
} from 'kafkajs';
import { consumedRecord, createConsumer, kafkajsClient, type KafkaSource } from './client.js';
import { describeKafkaError } from './failure.js';
import { MsgbridgeError } from '../platform/errors.js';
import type { ConsumedRecord } from './group-consumer.js';
import { silentLogger, type Logger } from '../platform/logger.js';
import { checkCoPartitioned, coPartitionedAssigner } from './co-partition-assigner.js';

/**
 * Exactly-once consume–transform–produce on kafkajs, generic (it knows nothing of message
 * states): a task is partition p of every input, with its own transactional producer
 * `<prefix>-<p>` (EOS-v1 fencing); a batch is one transaction (offsets, outputs, commit), and
 * the caller's memory changes only after the commit; positions are the engine's own; any
 * failure rebuilds the task from Kafka. The argument is in src/tracker/README.md, "Exactly once".
 */

export interface OutputRecord {
  topic: string;
  /**
   * The partition. Set it to the task for an output co-partitioned with the inputs (its
   * changelog is then restored from that one partition); left out, the key's Java-compatible
   * murmur2 hash decides (kafkajs's default partitioner, the same as every producer of the relay).
   */
  partition?: number;
  key: Buffer | string | null;
  value: Buffer | string | null;
  headers?: Record<string, string | Buffer>;
}

export interface ProcessResult {
  outputs: OutputRecord[];
  /**
   * Applies the state change of this batch to the caller's memory (and local store). Called
   * once, after the transaction committed, never otherwise; process() itself must not change
   * that memory. `written`: per output topic and partition, the offset after the last record
   * this transaction wrote there (a store records it as the changelog position it reflects).
   */
  commit?(written: WrittenPositions): void;
}

/** Output topic → partition → the offset following the last record written there. */
export type WrittenPositions = Map<string, Map<number, number>>;

export type TaskDropReason = 'revoked' | 'fenced' | 'failed' | 'stopping';

/** What happened to one transaction (for metrics; `sent`: outputs written, commit not yet asked). */
export interface TransactionEvent {
  task: number;
  topic: string;
  phase: 'sent' | 'committed' | 'aborted';
  records: number;
  outputs: number;
  /** Since the transaction began. */
  durationMs: number;
}

export interface TransactionalEngineOptions {
  kafka: KafkaSource;
  groupId: string;
  /** Co-partitioned topics (same partition count, same key → same partition). */
  inputTopics: string[];
  /** transactional.id of task p is `<prefix>-<p>`: the same on every member and after restarts. */
  transactionalIdPrefix: string;
  /** One batch of one input partition of a task (at most maxBatchRecords records). */
  process(task: number, records: ConsumedRecord[]): Promise<ProcessResult> | ProcessResult;
  /**
   * Called when this member starts a task, after the fence and before any batch: build the
   * task's state anew (readChangelogPartition...), replacing whatever an earlier attempt left.
   * The signal aborts when the task is dropped meanwhile or the start takes longer than
   * taskStartTimeoutMs.
   */
  onTaskAssigned?(task: number, context: { signal: AbortSignal }): Promise<void> | void;
  /** The task's state is no longer this member's (or no longer trusted): drop it. */
  onTaskRevoked?(task: number, reason: TaskDropReason): Promise<void> | void;
  logger?: Logger;
  /** Where a group without committed offsets starts (default: the beginning). */
  fromBeginning?: boolean;
  /** Records per transaction (default 500). */
  maxBatchRecords?: number;
  /**
   * The coordinator aborts a transaction open longer than this (default 30 s). It must stay
   * below the broker's transaction.max.timeout.ms (900 s by default); it also bounds how long
   * a stalled producer can hold read_committed readers back.
   */
  transactionTimeoutMs?: number;
  /** Fence + committed offsets + onTaskAssigned must finish within this (default 5 min). */
  taskStartTimeoutMs?: number;
  sessionTimeoutMs?: number;
  heartbeatIntervalMs?: number;
  rebalanceTimeoutMs?: number;
  /** Longest a fetch waits for data (default 500 ms). */
  maxWaitTimeMs?: number;
  maxBytesPerPartition?: number;
  /** Batches of different partitions handled at once (default 4); one task's batches never overlap. */
  partitionsConsumedConcurrently?: number;
  /** Backoff before a failed task starts again: doubles from `initial` up to `max` (default 200 ms … 10 s). */
  retryBackoffMs?: { initial: number; max: number };
  /** Published to the other members through the group protocol (where this member answers queries). */
  queryUrl?: string;
  /** The consumer gave up for good (kafkajs will not restart it); the engine is dead. */
  onFatal?(error: Error): void;
  /** Called synchronously at each step of each transaction; must not throw. */
  onTransaction?(event: TransactionEvent): void;
}

export interface EngineStats {
  transactions: number;
  failedTransactions: number;
  recordsIn: number;
  recordsOut: number;
  /** Records skipped because their offsets were already committed (refetched after a rejoin). */
  recordsSkipped: number;
  fenced: number;
  taskStarts: number;
  lastTaskStartMs: number;
}

export interface TransactionalEngine {
  /** Resolves once the member joined its group and every task it was given is started. */
  readonly ready: Promise<void>;
  /** Every task the group gave this member is started (for /readyz). */
  isReady(): boolean;
  /** Tasks this member processes now. */
  ownedTasks(): number[];
  /** Tasks the group gave this member (some may still be starting). */
  assignedTasks(): number[];
  stats(): EngineStats;
  /**
   * Runs `step` in the task's own queue, between its batches (nothing else of the task runs
   * meanwhile); undefined when this member does not run the task.
   */
  runExclusive<T>(task: number, step: () => Promise<T> | T): Promise<T | undefined>;
  /** Leaves the group after the batches in flight, then drops every task (reason 'stopping'). */
  stop(): Promise<void>;
}

type TaskState = 'starting' | 'active' | 'down';

interface TaskRuntime {
  readonly task: number;
  state: TaskState;
  /** Bumped at every start and drop: work of an older incarnation stops at its next step. */
  incarnation: number;
  producer: Producer | undefined;
  /** Next input offset to process, per input topic (the committed position). */
  next: Map<string, number>;
  /** Serialises the task's batches, starts and drops. */
  queue: Promise<void>;
  abort: AbortController;
  /** onTaskAssigned was called for the current incarnation (so onTaskRevoked is owed). */
  restored: boolean;
  failures: number;
  retryTimer: NodeJS.Timeout | undefined;
}

class Superseded extends Error {
  override readonly name = 'Superseded';
}

/** Errors that mean: a newer producer with this transactional id exists (another owner, or our own restart). */
const FENCING_TYPES = new Set(['INVALID_PRODUCER_EPOCH', 'PRODUCER_FENCED']);

export function isFencingError(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 6; depth++) {
    const { type, message } = e as { type?: string; message?: string };
    if (type && FENCING_TYPES.has(type)) return true;
    // kafkajs 2.2.4 predates PRODUCER_FENCED (90); the broker answers it to newer request versions only.
    if (type === 'KAFKAJS_UNKNOWN_ERROR_CODE' && /\b90\b/.test(message ?? '')) return true;
    e = (e as { cause?: unknown }).cause ?? (e as { originalError?: unknown }).originalError;
  }
  return false;
}

const CONCURRENT = 'CONCURRENT_TRANSACTIONS';

const isConcurrentTransactions = (error: unknown) => (error as { type?: string })?.type === CONCURRENT;

function validate(options: TransactionalEngineOptions): void {
  const bad = (field: string, why: string) =>
    new MsgbridgeError('CONFIG_INVALID', `transactional engine: ${field} ${why}`);
  if (!options.groupId) throw bad('groupId', 'is required');
  if (!options.transactionalIdPrefix) throw bad('transactionalIdPrefix', 'is required');
  if (options.inputTopics.length === 0) throw bad('inputTopics', 'needs at least one topic');
  if (new Set(options.inputTopics).size !== options.inputTopics.length) throw bad('inputTopics', 'lists a topic twice');
  const timeout = options.transactionTimeoutMs ?? 30_000;
  if (!(timeout >= 1000 && timeout <= 900_000))
    throw bad(
      'transactionTimeoutMs',
      `must be 1000..900000 (the broker's default transaction.max.timeout.ms), got ${timeout}`,
    );
  const batch = options.maxBatchRecords ?? 500;
  if (!(Number.isInteger(batch) && batch >= 1))
    throw bad('maxBatchRecords', `must be a positive integer, got ${batch}`);
}

/** Connects the admin client and reads the task count (the common partition count of the inputs). */
async function openInputs(kafka: KafkaSource, inputTopics: string[]): Promise<{ admin: Admin; taskCount: number }> {
  const admin: Admin = kafkajsClient(kafka).admin();
  await admin.connect();
  try {
    const { topics } = await admin.fetchTopicMetadata({ topics: inputTopics });
    const taskCount = checkCoPartitioned(
      new Map(inputTopics.map((name) => [name, topics.find((t) => t.name === name)?.partitions.length ?? 0])),
    );
    return { admin, taskCount };
  } catch (error) {
    await admin.disconnect().catch(() => undefined);
    if (error instanceof MsgbridgeError) throw error;
    throw new MsgbridgeError(
      'KAFKA_UNAVAILABLE',
      `cannot read the input topics ${inputTopics.join(', ')}: ${describeKafkaError(error)}`,
      { cause: error },
    );
  }
}

const newTaskRuntime = (task: number): TaskRuntime => ({
  task,
  state: 'down',
  incarnation: 0,
  producer: undefined,
  next: new Map(),
  queue: Promise.resolve(),
  abort: new AbortController(),
  restored: false,
  failures: 0,
  retryTimer: undefined,
});

const enqueue = (rt: TaskRuntime, step: () => Promise<void>): Promise<void> => {
  const run = rt.queue.then(step, step);
  rt.queue = run.catch(() => undefined);
  return run;
};

interface BatchControls {
  resolveOffset: (offset: string) => void;
  heartbeat: () => Promise<void>;
  fresh: () => boolean;
}

/** The state of one running engine (its tasks, its group membership) and the steps that change it. */
class TransactionalEngineRuntime {
  readonly tasks = new Map<number, TaskRuntime>();
  assigned = new Set<number>();
  private joined = false;
  private stopping = false;
  private fatal: Error | undefined;
  readonly stats: EngineStats = emptyEngineStats();
  readonly ready: Promise<void>;
  private markReady: () => void = () => {};
  private failReady: (error: Error) => void = () => {};
  private readySettled = false;
  private readonly consumer: Consumer;
  private readonly groupId: string;
  private readonly inputTopics: string[];
  private readonly maxBatch: number;
  private readonly transactionTimeout: number;
  private readonly taskStartTimeoutMs: number;
  private readonly sessionTimeout: number;
  private readonly backoff: { initial: number; max: number };

  constructor(
    private readonly options: TransactionalEngineOptions,
    private readonly logger: Logger,
    private readonly admin: Admin,
    private readonly taskCount: number,
  ) {
    this.groupId = options.groupId;
    this.inputTopics = options.inputTopics;
    this.maxBatch = options.maxBatchRecords ?? 500;
    this.transactionTimeout = options.transactionTimeoutMs ?? 30_000;
    this.taskStartTimeoutMs = options.taskStartTimeoutMs ?? 300_000;
    this.sessionTimeout = options.sessionTimeoutMs ?? 30_000;
    this.backoff = options.retryBackoffMs ?? { initial: 200, max: 10_000 };
    this.ready = new Promise<void>((resolve, reject) => {
      this.markReady = () => ((this.readySettled = true), resolve());
      this.failReady = (error) => ((this.readySettled = true), reject(error));
    });
    this.ready.catch(() => undefined);
    this.consumer = createConsumer(options.kafka, {
      groupId: this.groupId,
      partitionAssigners: [
        coPartitionedAssigner({
          ownedTasks: () => [...this.tasks.values()].filter((rt) => rt.state !== 'down').map((rt) => rt.task),
          ...(options.queryUrl ? { queryUrl: options.queryUrl } : {}),
        }),
      ],
      sessionTimeout: this.sessionTimeout,
      rebalanceTimeout: options.rebalanceTimeoutMs ?? 60_000,
      heartbeatInterval: options.heartbeatIntervalMs ?? 3_000,
      maxWaitTimeInMs: options.maxWaitTimeMs ?? 500,
      maxBytesPerPartition: options.maxBytesPerPartition ?? 1024 * 1024,
    });
    this.consumer.on(this.consumer.events.GROUP_JOIN, ({ payload }) => this.onAssignment(payload.memberAssignment));
    this.consumer.on(this.consumer.events.CRASH, ({ payload }) => this.onCrash(payload));
  }

  isReady(): boolean {
    return (
      this.joined &&
      !this.stopping &&
      !this.fatal &&
      [...this.assigned].every((t) => this.tasks.get(t)?.state === 'active')
    );
  }

  private checkReady(): void {
    if (!this.readySettled && this.isReady()) this.markReady();
  }

  async runExclusive<T>(task: number, step: () => Promise<T> | T): Promise<T | undefined> {
    const rt = this.tasks.get(task);
    if (!rt || rt.state !== 'active') return undefined;
    const incarnation = rt.incarnation;
    let result: T | undefined;
    await enqueue(rt, async () => {
      if (rt.incarnation === incarnation && rt.state === 'active') result = await step();
    });
    return result;
  }

  ownedTasks(): number[] {
    return [...this.tasks.values()]
      .filter((rt) => rt.state === 'active')
      .map((rt) => rt.task)
      .sort((a, b) => a - b);
  }

  private partitionsOf(task: number) {
    return this.inputTopics.map((topic) => ({ topic, partitions: [task] }));
  }

  private pause(task: number): void {
    try {
      this.consumer.pause(this.partitionsOf(task));
    } catch (error) {
      this.logger.warn({ task, error: describeKafkaError(error) }, 'pausing a task failed');
    }
  }

  private newProducer(task: number): Producer {
    return kafkajsClient(this.options.kafka).producer({
      transactionalId: `${this.options.transactionalIdPrefix}-${task}`,
      idempotent: true,
      maxInFlightRequests: 1,
      transactionTimeout: this.transactionTimeout,
      allowAutoTopicCreation: false,
      createPartitioner: Partitioners.DefaultPartitioner,
      // A send that still fails aborts its whole transaction, so bounded retries cost no
      // exactness. Short first backoff: right after a commit the coordinator answers
      // CONCURRENT_TRANSACTIONS until its markers are written (a few ms); kafkajs's 300 ms
      // default made every transaction ~240 ms (measured).
      retry: { retries: 8, initialRetryTime: 10, maxRetryTime: 2_000 },
    });
  }

  /** Joins the group and starts consuming; on failure leaves everything closed. */
  async join(): Promise<void> {
    const { consumer, options } = this;
    try {
      await consumer.connect();
      await consumer.subscribe({ topics: this.inputTopics, fromBeginning: options.fromBeginning ?? true });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: options.partitionsConsumedConcurrently ?? 4,
        eachBatch: async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
          const rt = this.tasks.get(batch.partition);
          // Not started (paused, to be positioned by its start), or a batch fetched before a
          // seek: it is fetched again from the right place.
          if (!rt || rt.state !== 'active' || isStale() || !isRunning()) return;
          const incarnation = rt.incarnation;
          await enqueue(rt, () =>
            this.handleBatch(rt, incarnation, batch, {
              resolveOffset,
              heartbeat,
              fresh: () => isRunning() && !isStale(),
            }),
          );
        },
      });
    } catch (error) {
      await consumer.disconnect().catch(() => undefined);
      await this.admin.disconnect().catch(() => undefined);
      throw new MsgbridgeError(
        'KAFKA_UNAVAILABLE',
        `cannot join consumer group ${this.groupId}: ${describeKafkaError(error)}`,
        { cause: error },
      );
    }
  }

  private onCrash(payload: { error: Error; restart: boolean }): void {
    if (payload.restart) {
      this.logger.warn({ error: describeKafkaError(payload.error) }, 'the consumer crashed; kafkajs restarts it');
      return;
    }
    this.fatal = payload.error;
    this.logger.error({ error: describeKafkaError(payload.error) }, 'the consumer stopped for good');
    if (!this.readySettled) this.failReady(payload.error);
    this.options.onFatal?.(payload.error);
  }

  // --- task lifecycle: start (fence, restore), drop, failure and backoff ---

  /** Ends the current incarnation: producer closed, caller's state dropped (if it was built). */
  private teardown(rt: TaskRuntime, reason: TaskDropReason): Promise<void> {
    rt.incarnation++;
    rt.state = 'down';
    clearTimeout(rt.retryTimer);
    rt.retryTimer = undefined;
    rt.abort.abort();
    rt.abort = new AbortController();
    const producer = rt.producer;
    rt.producer = undefined;
    const owed = rt.restored;
    rt.restored = false;
    return enqueue(rt, async () => {
      if (producer) await producer.disconnect().catch(() => undefined);
      if (owed && this.options.onTaskRevoked) {
        try {
          await this.options.onTaskRevoked(rt.task, reason);
        } catch (error) {
          this.logger.warn({ task: rt.task, error: describeKafkaError(error) }, 'onTaskRevoked failed');
        }
      }
    });
  }

  private scheduleStart(rt: TaskRuntime, delayMs: number): void {
    clearTimeout(rt.retryTimer);
    rt.retryTimer = setTimeout(() => {
      rt.retryTimer = undefined;
      if (!this.stopping && this.assigned.has(rt.task) && this.tasks.get(rt.task) === rt && rt.state === 'down')
        this.startTask(rt);
    }, delayMs);
    rt.retryTimer.unref?.();
  }

  private failTask(rt: TaskRuntime, error: unknown): void {
    if (rt.state === 'down') return;
    const fenced = isFencingError(error);
    this.pause(rt.task);
    if (fenced) {
      this.stats.fenced++;
      // Also what a transaction that outlived transactionTimeoutMs gets (the coordinator aborted it).
      this.logger.info(
        { task: rt.task },
        'task fenced: another member owns it now (or its transaction timed out); dropping it',
      );
    } else {
      rt.failures++;
      this.logger.warn(
        { task: rt.task, error: describeKafkaError(error), attempt: rt.failures },
        'task failed; starting it again from its committed offsets',
      );
    }
    void this.teardown(rt, fenced ? 'fenced' : 'failed');
    if (this.stopping) return;
    // Fenced: the rebalance that moves the task is under way and will drop it; should this
    // member still own it after a session's time, it takes it back.
    const { backoff } = this;
    const delay = fenced
      ? this.sessionTimeout
      : Math.min(backoff.max, backoff.initial * 2 ** Math.min(rt.failures - 1, 16));
    if (this.assigned.has(rt.task)) this.scheduleStart(rt, delay);
  }

  private async committedPositions(task: number): Promise<Map<string, number>> {
    const positions = new Map<string, number>();
    const committed = await this.admin.fetchOffsets({ groupId: this.groupId, topics: this.inputTopics });
    for (const topic of this.inputTopics) {
      const entry = committed.find((c) => c.topic === topic)?.partitions.find((p) => p.partition === task);
      const offset = Number(entry?.offset ?? -1);
      if (offset >= 0) {
        positions.set(topic, offset);
        continue;
      }
      const ends = (await this.admin.fetchTopicOffsets(topic)).find((p) => p.partition === task);
      positions.set(topic, Number((this.options.fromBeginning ?? true) ? (ends?.low ?? 0) : (ends?.high ?? 0)));
    }
    return positions;
  }

  /** Throws Superseded once the task was dropped or restarted after `incarnation` began. */
  private ensureCurrent(rt: TaskRuntime, incarnation: number): void {
    if (rt.incarnation !== incarnation || this.stopping) throw new Superseded('superseded');
  }

  private startTask(rt: TaskRuntime): void {
    clearTimeout(rt.retryTimer);
    rt.retryTimer = undefined;
    const incarnation = ++rt.incarnation;
    rt.state = 'starting';
    const signal = rt.abort.signal;
    void enqueue(rt, () => this.runTaskStart(rt, incarnation, signal));
  }

  /** The queued start step: the start under its timeout, then its bookkeeping or failure. */
  private async runTaskStart(rt: TaskRuntime, incarnation: number, signal: AbortSignal): Promise<void> {
    this.ensureCurrent(rt, incarnation);
    const started = Date.now();
    let timer: NodeJS.Timeout | undefined;
    const abortOnTimeout = rt.abort;
    try {
      const timedOut = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          abortOnTimeout.abort();
          reject(
            new MsgbridgeError(
              'KAFKA_UNAVAILABLE',
              `starting task ${rt.task} took longer than ${this.taskStartTimeoutMs} ms`,
            ),
          );
        }, this.taskStartTimeoutMs);
      });
      await Promise.race([timedOut, this.fenceAndRestore(rt, incarnation, signal)]);
      this.stats.taskStarts++;
      this.stats.lastTaskStartMs = Date.now() - started;
      this.logger.info(
        { task: rt.task, offsets: Object.fromEntries(rt.next), durationMs: Date.now() - started },
        'task started',
      );
      this.checkReady();
    } catch (error) {
      if (error instanceof Superseded || rt.incarnation !== incarnation) {
        // Dropped meanwhile: the teardown queued behind this step closes its producer.
        return;
      }
      this.failTask(rt, error);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Fences the previous owner, reads the committed positions, rebuilds the caller's state, resumes. */
  private async fenceAndRestore(rt: TaskRuntime, incarnation: number, signal: AbortSignal): Promise<void> {
    const current = () => this.ensureCurrent(rt, incarnation);
    const producer = this.newProducer(rt.task);
    rt.producer = producer;
    await producer.connect();
    current();
    // InitProducerId: fences the previous owner and completes (aborts or finishes committing)
    // what it left open, so the committed offsets read next are final.
    const fence = await producer.transaction();
    await fence.abort();
    current();
    const positions = await this.committedPositions(rt.task);
    current();
    rt.restored = true;
    await this.options.onTaskAssigned?.(rt.task, { signal });
    current();
    for (const [topic, offset] of positions) this.consumer.seek({ topic, partition: rt.task, offset: String(offset) });
    rt.next = positions;
    rt.state = 'active';
    rt.failures = 0;
    this.consumer.resume(this.partitionsOf(rt.task));
  }

  /**
   * The runtime stays in the map (state 'down'): should the task come back, its start queues
   * behind this teardown, so the caller never sees onTaskAssigned before the onTaskRevoked of
   * the previous ownership.
   */
  private dropTask(task: number, reason: TaskDropReason): Promise<void> {
    const rt = this.tasks.get(task);
    if (!rt) return Promise.resolve();
    if (rt.state === 'down') {
      clearTimeout(rt.retryTimer);
      rt.retryTimer = undefined;
      return rt.queue;
    }
    this.logger.info({ task, reason }, 'task dropped');
    return this.teardown(rt, reason);
  }

  // --- rebalance ---

  private onAssignment(memberAssignment: Record<string, number[]>): void {
    const { inputTopics, logger } = this;
    const perTopic = inputTopics.map((topic) => new Set(memberAssignment[topic] ?? []));
    const next = new Set([...perTopic[0]!].filter((t) => perTopic.every((s) => s.has(t))));
    const stray = perTopic.flatMap((s, i) => [...s].filter((t) => !next.has(t)).map((t) => `${inputTopics[i]}[${t}]`));
    if (stray.length > 0) {
      // Only this engine's assigner runs in the group, so this means a foreign member.
      logger.error({ stray }, 'the group assigned partitions that are not whole tasks; leaving them unprocessed');
      for (const s of perTopic.flatMap((set, i) =>
        [...set].filter((t) => !next.has(t)).map((t) => ({ topic: inputTopics[i]!, partitions: [t] })),
      ))
        this.consumer.pause([s]);
    }
    this.assigned = next;
    this.joined = true;
    for (const task of this.tasks.keys()) if (!next.has(task)) void this.dropTask(task, 'revoked');
    for (const task of next) {
      const rt = this.tasks.get(task);
      if (rt?.state === 'active') continue;
      // Paused before the first fetch of the new generation (this runs synchronously after the
      // sync): nothing of the task is fetched until it is started and positioned.
      this.pause(task);
      if (rt?.state === 'starting') continue;
      if (rt) {
        this.startTask(rt);
        continue;
      }
      const created = newTaskRuntime(task);
      this.tasks.set(task, created);
      this.startTask(created);
    }
    logger.info({ tasks: [...next].sort((a, b) => a - b), taskCount: this.taskCount }, 'tasks assigned');
    this.checkReady();
  }

  // --- batches: one transaction per chunk ---

  /** One chunk of one input partition: a transaction of its outputs and its offsets. */
  private async transact(rt: TaskRuntime, topic: string, records: ConsumedRecord[]): Promise<void> {
    const { options } = this;
    const producer = rt.producer;
    if (!producer) throw new Error('no producer');
    const result = await options.process(rt.task, records);
    const nextOffset = Number(records[records.length - 1]!.offset) + 1;
    const began = Date.now();
    const report = (phase: TransactionEvent['phase']) =>
      options.onTransaction?.({
        task: rt.task,
        topic,
        phase,
        records: records.length,
        outputs: result.outputs.length,
        durationMs: Date.now() - began,
      });
    const written: WrittenPositions = new Map();
    const tx = await producer.transaction();
    try {
      // Offsets first: right after the previous commit the coordinator may still be writing
      // its markers (CONCURRENT_TRANSACTIONS for a few ms); kafkajs retries neither
      // AddOffsetsToTxn nor, quickly, AddPartitionsToTxn, so the wait happens here, once.
      for (let attempt = 0, delay = 2; ; attempt++, delay = Math.min(delay * 2, 100)) {
        try {
          await tx.sendOffsets({
            consumerGroupId: this.groupId,
            topics: [{ topic, partitions: [{ partition: rt.task, offset: String(nextOffset) }] }],
          });
          break;
        } catch (error) {
          if (!isConcurrentTransactions(error) || attempt >= 30) throw error;
          await new Promise((r) => setTimeout(r, delay));
        }
      }
      // In requests of bounded size: one record batch per partition must stay below the
      // broker's message.max.bytes (1 MB by default), and a big input batch can make more.
      for (const chunk of chunkOutputs(result.outputs, MAX_REQUEST_BYTES)) {
        const counts = new Map<string, number>();
        for (const o of chunk)
          if (o.partition !== undefined)
            counts.set(`${o.topic}\u0000${o.partition}`, (counts.get(`${o.topic}\u0000${o.partition}`) ?? 0) + 1);
        const acks = await tx.sendBatch({ topicMessages: toTopicMessages(chunk), acks: -1 });
        for (const a of acks) {
          const count = counts.get(`${a.topicName}\u0000${a.partition}`);
          const base = Number(a.baseOffset);
          if (count === undefined || !(base >= 0)) continue;
          let byPartition = written.get(a.topicName);
          if (!byPartition) written.set(a.topicName, (byPartition = new Map()));
          byPartition.set(a.partition, Math.max(byPartition.get(a.partition) ?? 0, base + count));
        }
      }
      report('sent');
      await tx.commit();
    } catch (error) {
      if (tx.isActive()) await tx.abort().catch(() => undefined);
      report('aborted');
      throw error;
    }
    report('committed');
    rt.next.set(topic, nextOffset);
    this.stats.transactions++;
    this.stats.recordsIn += records.length;
    this.stats.recordsOut += result.outputs.length;
    result.commit?.(written);
  }

  private async handleBatch(
    rt: TaskRuntime,
    incarnation: number,
    batch: Batch,
    { resolveOffset, heartbeat, fresh }: BatchControls,
  ): Promise<void> {
    const topic = batch.topic;
    const live = () => rt.incarnation === incarnation && rt.state === 'active' && fresh() && !this.stopping;
    if (!live()) return;
    const from = rt.next.get(topic) ?? 0;
    const records: ConsumedRecord[] = [];
    for (const m of batch.messages) {
      if (Number(m.offset) < from) {
        this.stats.recordsSkipped++;
        continue;
      }
      records.push(consumedRecord(topic, batch.partition, m));
    }
    // A transaction can take a while (a broker that died leads some of its partitions: the
    // produce waits for the new leader): the member heartbeats meanwhile, or its session would
    // end and the group rebalance for one broker. A rebalance it hears of ends the batch once
    // the transaction is done (kafkajs then rejoins); what is committed stays committed.
    let rejoin: unknown;
    const beat = async () => {
      if (rejoin === undefined) await heartbeat().catch((error: unknown) => (rejoin = error));
    };
    for (let i = 0; i < records.length; i += this.maxBatch) {
      if (!live()) return;
      const chunk = records.slice(i, i + this.maxBatch);
      try {
        await whileBeating(this.transact(rt, topic, chunk), beat);
      } catch (error) {
        this.stats.failedTransactions++;
        if (rt.incarnation === incarnation) this.failTask(rt, error);
        return;
      }
      resolveOffset(chunk[chunk.length - 1]!.offset);
      if (rejoin !== undefined) throw rejoin;
      // kafkajs heartbeats only between batches, and one fetched batch can hold many chunks.
      await heartbeat();
    }
    const last = batch.messages[batch.messages.length - 1];
    if (records.length === 0 && last) resolveOffset(last.offset);
  }

  // --- stop ---

  async stop(): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    for (const rt of this.tasks.values()) clearTimeout(rt.retryTimer);
    // Waits for the batches in flight (their transactions end), then leaves the group.
    await this.consumer
      .disconnect()
      .catch((error: unknown) => this.logger.warn({ error: describeKafkaError(error) }, 'leaving the group failed'));
    await Promise.all([...this.tasks.keys()].map((task) => this.dropTask(task, 'stopping')));
    await this.admin.disconnect().catch(() => undefined);
    if (!this.readySettled)
      this.failReady(new MsgbridgeError('SHUTTING_DOWN', 'the engine stopped before it was ready'));
    this.logger.info({ stats: this.stats }, 'transactional engine stopped');
  }
}

/**
 * How often a member heartbeats while a transaction is in progress (kafkajs sends one only once its interval passed).
 */
const BEAT_EVERY_MS = 500;

/** Awaits `work`, calling `beat` every BEAT_EVERY_MS until it settles. */
async function whileBeating<T>(work: Promise<T>, beat: () => Promise<void>): Promise<T> {
  let settled = false;
  const done = work.finally(() => (settled = true));
  while (!settled) {
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      done.catch(() => undefined),
      new Promise<void>((resolve) => (timer = setTimeout(resolve, BEAT_EVERY_MS))),
    ]);
    clearTimeout(timer);
    if (!settled) await beat();
  }
  return done;
}

/**
 * Checks the inputs (they exist and are co-partitioned), joins the group and starts processing.
 * Rejects with a clear error when the inputs are unusable.
 */
export async function startTransactionalEngine(options: TransactionalEngineOptions): Promise<TransactionalEngine> {
  validate(options);
  const logger = (options.logger ?? silentLogger).child({
    component: 'transactional-engine',
    groupId: options.groupId,
  });
  const { admin, taskCount } = await openInputs(options.kafka, options.inputTopics);
  const runtime = new TransactionalEngineRuntime(options, logger, admin, taskCount);
  await runtime.join();
  return {
    ready: runtime.ready,
    isReady: () => runtime.isReady(),
    ownedTasks: () => runtime.ownedTasks(),
    assignedTasks: () => [...runtime.assigned].sort((a, b) => a - b),
    stats: () => ({ ...runtime.stats }),
    runExclusive: (task, step) => runtime.runExclusive(task, step),
    stop: () => runtime.stop(),
  };
}

/** Output bytes per produce request inside a transaction (record batches stay well below 1 MB). */
const MAX_REQUEST_BYTES = 256 * 1024;

const size = (data: Buffer | string | null | undefined) =>
  data == null ? 0 : typeof data === 'string' ? Buffer.byteLength(data) : data.length;

/** Consecutive runs of outputs of at most `maxBytes` each (a larger single record alone). */
export function chunkOutputs(outputs: OutputRecord[], maxBytes: number): OutputRecord[][] {
  const chunks: OutputRecord[][] = [];
  let current: OutputRecord[] = [];
  let bytes = 0;
  for (const o of outputs) {
    let n = 64 + size(o.key) + size(o.value);
    for (const name in o.headers ?? {}) n += name.length + size(o.headers![name]) + 8;
    if (current.length > 0 && bytes + n > maxBytes) {
      chunks.push(current);
      current = [];
      bytes = 0;
    }
    current.push(o);
    bytes += n;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

function toTopicMessages(outputs: OutputRecord[]): TopicMessages[] {
  const byTopic = new Map<string, Message[]>();
  for (const o of outputs) {
    if (!o.topic) throw new MsgbridgeError('INVALID_ARGUMENT', 'an output record has no topic');
    if (o.partition !== undefined && !(Number.isInteger(o.partition) && o.partition >= 0)) {
      throw new MsgbridgeError(
        'INVALID_ARGUMENT',
        `an output record for ${o.topic} has an invalid partition ${o.partition}`,
      );
    }
    let messages = byTopic.get(o.topic);
    if (!messages) byTopic.set(o.topic, (messages = []));
    messages.push({ key: o.key, value: o.value, headers: o.headers, partition: o.partition });
  }
  return [...byTopic].map(([topic, messages]) => ({ topic, messages }));
}

/** Statistics of an engine that has done nothing yet (also what the gauges read before it runs). */
export function emptyEngineStats(): EngineStats {
  return {
    transactions: 0,
    failedTransactions: 0,
    recordsIn: 0,
    recordsOut: 0,
    recordsSkipped: 0,
    fenced: 0,
    taskStarts: 0,
    lastTaskStartMs: 0,
  };
}
