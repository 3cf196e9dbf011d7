import { randomUUID } from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { Cluster, Consumer, KafkaMessage } from 'kafkajs';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { sleep } from '../platform/sleep.js';
import { consumedRecord, createConsumer, type KafkaSource } from './client.js';
import type { ConsumedRecord } from './group-consumer.js';
import type { Logger } from '../platform/logger.js';

/**
 * Rebuilding state from a compacted output topic (the changelog, as Kafka Streams does): read
 * partitions from their beginning up to the end they had when the read started, committed
 * records only. See README "Exactly once" for why the end is the high watermark, not the last
 * stable offset.
 */
export interface ChangelogReadOptions {
  kafka: KafkaSource;
  topic: string;
  /** Each committed record below the end, in offset order per partition. */
  onRecord(record: ConsumedRecord): void;
  /** Records it refuses are skipped before onRecord (cheap: the key is at hand, the value is not parsed). */
  filter?(record: ConsumedRecord): boolean;
  /** After each fetched batch is delivered: a promise holds the next one until it settles (a store's backpressure). */
  afterBatch?(): Promise<void> | undefined;
  /** The whole read must finish within this (default 120 s); past it, a clear error. */
  timeoutMs?: number;
  signal?: AbortSignal;
  logger?: Logger;
  /** The reader is a private one-member group: `<prefix>-<uuid>` (ACLs: Read on this prefix). */
  groupIdPrefix?: string;
  maxBytesPerPartition?: number;
  /** Where to start per partition (a store's checkpoint); default: the beginning of the log. */
  from?: Map<number, number>;
}

export interface ChangelogReadResult {
  /** Records delivered to onRecord. */
  delivered: number;
  /** The end read up to, per partition. */
  ends: Map<number, number>;
  durationMs: number;
}

export interface PartitionEnds {
  /** First offset still in the log. */
  low: number;
  /** The high watermark: one past the last record written, committed or not. */
  high: number;
}

/** How long `partitionEnds` asks again while a partition has no reachable leader (default). */
export const LEADER_WAIT_MS = 20_000;

export interface PartitionEndsOptions {
  /**
   * How long to ask again while leadership moves: a topic just created, or a leader just lost
   * (default LEADER_WAIT_MS, which covers the election after a broker's death: the controller
   * notices it within broker.session.timeout.ms, 9 s by default).
   */
  leaderWaitMs?: number;
  /** Stops asking again; the last error is then thrown. */
  signal?: AbortSignal;
}

/**
 * Low and high watermarks of every partition of a topic, read_uncommitted. kafkajs's
 * `admin.fetchTopicOffsets` asks with isolation level read_committed and so answers the last
 * stable offset (measured: 2 with an open transaction at offset 2 and a committed record at 4);
 * a consumer created with `readUncommitted: true` owns a cluster that asks with
 * read_uncommitted, and kafkajs hands that cluster to partition assigners (a typed, public
 * hook), so it is taken from there. The consumer itself never connects.
 *
 * kafkajs asks each partition's leader as its metadata names it, once: a leader not yet elected
 * (a topic just created) or just lost answers NOT_LEADER or does not answer. Such retriable
 * errors are asked again with fresh metadata, with backoff, for `leaderWaitMs`.
 */
export async function partitionEnds(
  kafka: KafkaSource,
  topic: string,
  options: PartitionEndsOptions = {},
): Promise<Map<number, PartitionEnds>> {
  let cluster: Cluster | undefined;
  createConsumer(kafka, {
    groupId: 'msgbridge-offsets-probe',
    readUncommitted: true,
    partitionAssigners: [
      (config) => {
        cluster = config.cluster;
        return {
          name: 'probe',
          version: 0,
          assign: async () => [],
          protocol: () => ({ name: 'probe', metadata: Buffer.alloc(0) }),
        };
      },
    ],
  });
  if (!cluster) throw new Error('kafkajs did not hand the consumer cluster to its partition assigner');
  const probe = cluster;
  try {
    await probe.connect();
    await probe.addTargetTopic(topic);
    return await whileLeadersMove(async (attempt) => {
      if (attempt > 0) await probe.refreshMetadata();
      return readEnds(probe, topic);
    }, options);
  } catch (error) {
    if (error instanceof MsgbridgeError) throw error;
    const message = errorMessage(error).split('\n')[0];
    throw new MsgbridgeError('KAFKA_UNAVAILABLE', `cannot read the offsets of topic ${topic}: ${message}`, {
      cause: error,
    });
  } finally {
    await probe.disconnect().catch(() => undefined);
  }
}

async function readEnds(cluster: Cluster, topic: string): Promise<Map<number, PartitionEnds>> {
  const partitions = cluster.findTopicPartitionMetadata(topic).map((p) => ({ partition: p.partitionId }));
  if (partitions.length === 0)
    throw new MsgbridgeError('KAFKA_UNAVAILABLE', `topic ${topic} has no partitions (does it exist?)`);
  const [high] = await cluster.fetchTopicsOffset([{ topic, partitions, fromBeginning: false }]);
  const [low] = await cluster.fetchTopicsOffset([{ topic, partitions, fromBeginning: true }]);
  const ends = new Map<number, PartitionEnds>();
  for (const { partition, offset } of high?.partitions ?? []) ends.set(partition, { low: 0, high: Number(offset) });
  for (const { partition, offset } of low?.partitions ?? []) {
    const entry = ends.get(partition);
    if (entry) entry.low = Number(offset);
  }
  return ends;
}

/**
 * Answers `ask`, asked again while it fails with an error kafkajs marks retriable (leadership
 * moving, a broker unreachable), with backoff from 100 ms to 1 s, for `leaderWaitMs` (default
 * LEADER_WAIT_MS) or until `signal` aborts; then its last error. `attempt` counts from 0.
 */
export async function whileLeadersMove<T>(
  ask: (attempt: number) => Promise<T>,
  options: PartitionEndsOptions = {},
): Promise<T> {
  const giveUpAt = Date.now() + (options.leaderWaitMs ?? LEADER_WAIT_MS);
  for (let attempt = 0; ; attempt++) {
    try {
      return await ask(attempt);
    } catch (error) {
      const again = isRetriable(error) && !options.signal?.aborted && Date.now() < giveUpAt;
      if (!again) throw error;
      await sleep(Math.min(1000, 100 * 2 ** attempt, Math.max(0, giveUpAt - Date.now())), options.signal);
    }
  }
}

function isRetriable(error: unknown): boolean {
  return !(error instanceof MsgbridgeError) && (error as { retriable?: unknown } | null)?.retriable === true;
}

/**
 * How far a read to the end got: the partitions still below the end they had when the read
 * began, and the position of each (the reader below and changelog-follower.ts share it).
 */
export class EndOfLog {
  /** Partition → the end still to reach. */
  readonly pending = new Map<number, number>();
  private readonly position = new Map<number, number>();

  constructor(private readonly ends: Map<number, PartitionEnds>) {}

  /** Reads `partition` from `from` up to its end (nothing to do when the end is not above `from`). */
  expect(partition: number, from: number): void {
    const end = this.ends.get(partition);
    if (end && end.high > from) this.pending.set(partition, end.high);
  }

  get done(): boolean {
    return this.pending.size === 0;
  }

  /** The next offset of `partition` is `next`; true when this brought it to its end. */
  reached(partition: number, next: number): boolean {
    const end = this.pending.get(partition);
    if (end === undefined) return false;
    this.position.set(partition, next);
    if (next < end) return false;
    this.pending.delete(partition);
    return true;
  }

  /** `partition 0 at 12 of 40, ...`: the partitions not yet at their end. */
  describe(): string {
    return [...this.pending]
      .map(([p, end]) => `partition ${p} at ${this.position.get(p) ?? this.ends.get(p)?.low ?? 0} of ${end}`)
      .join(', ');
  }
}

/**
 * Calls `next(partition, offset)` after every batch of `topic` the consumer handled, also for
 * those kafkajs filtered to nothing (transaction markers, aborted records), which never reach
 * eachBatch: END_BATCH_PROCESS is the one place the position is known exactly.
 */
export function onBatchEnd(consumer: Consumer, topic: string, next: (partition: number, offset: number) => void): void {
  consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
    if (payload.topic === topic) next(payload.partition, Number(payload.lastOffset) + 1);
  });
}

/** Partition `partition` of a co-partitioned changelog: the state of one task. */
export function readChangelogPartition(
  options: ChangelogReadOptions & { partition: number },
): Promise<ChangelogReadResult> {
  return readChangelog({ ...options, partitions: [options.partition] });
}

/**
 * Some partitions (default: all) of a changelog, for state whose key is not co-partitioned with
 * its input (`filter` keeps a task's own keys). Terminates even when a partition ends with
 * transaction markers or aborted records: the position is counted from every record batch the
 * fetch returns, markers and aborted ones included. Waits while another producer's open
 * transaction keeps the last stable offset below the end, up to `timeoutMs`.
 */
export async function readChangelog(
  options: ChangelogReadOptions & { partitions?: number[] },
): Promise<ChangelogReadResult> {
  const { kafka, topic, logger } = options;
  const started = Date.now();
  const timeoutMs = options.timeoutMs ?? 120_000;
  const ends = await partitionEnds(kafka, topic);
  const wanted = options.partitions ?? [...ends.keys()];
  const target = new Map<number, number>();
  const tracker = new EndOfLog(ends);
  const { pending } = tracker;
  const start = new Map<number, number>();
  for (const partition of wanted) {
    const end = ends.get(partition);
    if (!end)
      throw new MsgbridgeError(
        'INVALID_ARGUMENT',
        `topic ${topic} has no partition ${partition} (it has ${ends.size})`,
      );
    target.set(partition, end.high);
    const from = Math.max(end.low, options.from?.get(partition) ?? end.low);
    start.set(partition, from);
    tracker.expect(partition, from);
  }
  let delivered = 0;
  const result = () => ({ delivered, ends: target, durationMs: Date.now() - started });
  if (tracker.done) return result();

  const consumer = createConsumer(kafka, {
    groupId: `${options.groupIdPrefix ?? 'msgbridge-restore'}-${randomUUID()}`,
    maxWaitTimeInMs: 200,
    maxBytesPerPartition: options.maxBytesPerPartition ?? 4 * 1024 * 1024,
  });
  let finish: (error?: Error) => void = () => {};
  const finished = new Promise<void>((resolve, reject) => (finish = (error) => (error ? reject(error) : resolve())));
  // A failed read hands over no more batches. Handling the rejection here also keeps one that
  // comes while nothing awaits it yet (an abort or a timeout during the consumer's join) from
  // being reported as unhandled, which ends the process.
  let failed = false;
  finished.catch(() => (failed = true));
  // The batch being handed over (eachBatch below); it never rejects: a failure ends the read.
  let delivering: Promise<void> = Promise.resolve();
  // A caller's callback that failed: the read fails with its error (also once the end was reached).
  let deliveryError: Error | undefined;
  onBatchEnd(consumer, topic, (partition, next) => {
    if (!tracker.reached(partition, next)) return;
    consumer.pause([{ topic, partitions: [partition] }]);
    if (tracker.done) finish();
  });
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    const others = (payload.memberAssignment[topic] ?? []).filter((p) => !pending.has(p));
    if (others.length > 0) consumer.pause([{ topic, partitions: others }]);
    // A new private group has no committed offsets: each partition starts at the log start,
    // or where the caller's store left off.
    for (const p of payload.memberAssignment[topic] ?? []) {
      const from = start.get(p);
      if (pending.has(p) && from !== undefined && from > ends.get(p)!.low)
        consumer.seek({ topic, partition: p, offset: String(from) });
    }
  });
  consumer.on(consumer.events.CRASH, ({ payload }) => {
    if (!payload.restart) finish(payload.error);
  });

  let timer: NodeJS.Timeout | undefined;
  const onAbort = () => finish(new MsgbridgeError('SHUTTING_DOWN', `reading ${topic} was cancelled`));
  try {
    options.signal?.throwIfAborted();
    options.signal?.addEventListener('abort', onAbort, { once: true });
    timer = setTimeout(() => {
      const stuck = tracker.describe();
      finish(
        new MsgbridgeError(
          'KAFKA_UNAVAILABLE',
          `reading changelog ${topic} did not reach its end within ${timeoutMs} ms (${stuck}): Kafka is slow or unreachable, or another producer holds a transaction open on it`,
        ),
      );
    }, timeoutMs);
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        const end = pending.get(batch.partition);
        if (end === undefined) return;
        // Handed over on the next turn, once kafkajs has asked for the batch after it: the
        // broker serves that fetch while the caller applies this one. One batch waits at most;
        // batches reach the caller in order.
        await delivering;
        delivering = (async () => {
          await nextTurn();
          if (failed || deliveryError) return;
          deliver(batch.partition, end, batch.messages);
          await options.afterBatch?.();
        })().catch((error: unknown) => {
          // No retry of the batch.
          deliveryError = error instanceof Error ? error : new Error(String(error));
          finish(deliveryError);
        });
      },
    });
    await finished;
    // The consumer stops before kafkajs polls again (it waits out a poll with every partition
    // paused), while the last batch reaches the caller.
    const stopping = consumer.disconnect().catch(() => undefined);
    await delivering;
    await stopping;
    if (deliveryError) throw deliveryError;
    logger?.debug({ topic, partitions: wanted, delivered, durationMs: Date.now() - started }, 'changelog read');
    return result();
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', onAbort);
    await consumer.disconnect().catch(() => undefined);
  }

  function deliver(partition: number, end: number, messages: KafkaMessage[]): void {
    const from = start.get(partition) ?? 0;
    for (const m of messages) {
      // Records written after the read started are not part of the state being restored.
      if (Number(m.offset) >= end) break;
      if (Number(m.offset) < from) continue;
      const record = consumedRecord(topic, partition, m);
      if (options.filter && !options.filter(record)) continue;
      options.onRecord(record);
      delivered++;
    }
  }
}
