import type { Cluster, Consumer, KafkaMessage } from 'kafkajs';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { sleep } from '../platform/sleep.js';
import { consumedRecord, type KafkaSource } from './client.js';
import { fetchFromLeaders, privateCluster } from './leader-fetch.js';
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
 * a private cluster built with `readUncommitted: true` (leader-fetch.ts) asks with
 * read_uncommitted.
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
  const cluster = privateCluster(kafka, { readUncommitted: true });
  try {
    await connectFor(cluster, topic);
    return await endsVia(cluster, topic, options);
  } catch (error) {
    throw unreachable(error, `cannot read the offsets of topic ${topic}`);
  } finally {
    await cluster.disconnect().catch(() => undefined);
  }
}

async function connectFor(cluster: Cluster, topic: string): Promise<void> {
  await cluster.connect();
  await cluster.addTargetTopic(topic);
}

/** The ends through a cluster already connected (`privateCluster` with read_uncommitted). */
function endsVia(cluster: Cluster, topic: string, options: PartitionEndsOptions): Promise<Map<number, PartitionEnds>> {
  return whileLeadersMove(async (attempt) => {
    if (attempt > 0) await cluster.refreshMetadata();
    return readEnds(cluster, topic);
  }, options);
}

/** A Kafka failure as one line naming what failed (a MsgbridgeError is already one). */
function unreachable(error: unknown, what: string): unknown {
  if (error instanceof MsgbridgeError) return error;
  const message = errorMessage(error).split('\n')[0];
  return new MsgbridgeError('KAFKA_UNAVAILABLE', `${what}: ${message}`, { cause: error });
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
      // Cancelled while waiting: no further attempt (its caller is already gone).
      if (!(await sleep(Math.min(1000, 100 * 2 ** attempt, Math.max(0, giveUpAt - Date.now())), options.signal)))
        throw error;
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
 * its input (`filter` keeps a task's own keys), without a consumer group (`fetchToEnds`).
 * Waits while another producer's open transaction keeps the last stable offset below the end.
 */
export async function readChangelog(
  options: ChangelogReadOptions & { partitions?: number[] },
): Promise<ChangelogReadResult> {
  const { topic, logger } = options;
  const started = Date.now();
  const timeoutMs = options.timeoutMs ?? 120_000;
  let delivered = 0;
  const target = new Map<number, number>();
  let wanted: number[] = [];
  await boundedRead(
    {
      kafka: options.kafka,
      topic,
      timeoutMs,
      ...(options.signal ? { signal: options.signal } : {}),
      stuck: (where) =>
        `reading changelog ${topic} did not reach its end within ${timeoutMs} ms (${where}): Kafka is slow or unreachable, or another producer holds a transaction open on it`,
    },
    async (read) => {
      const ends = await read.ends();
      wanted = options.partitions ?? [...ends.keys()];
      const from = new Map<number, number>();
      for (const partition of wanted) {
        const end = ends.get(partition);
        if (!end)
          throw new MsgbridgeError(
            'INVALID_ARGUMENT',
            `topic ${topic} has no partition ${partition} (it has ${ends.size})`,
          );
        target.set(partition, end.high);
        from.set(partition, Math.max(end.low, options.from?.get(partition) ?? end.low));
      }
      await read.fetchToEnds({
        from,
        to: target,
        describe: `cannot read changelog ${topic}`,
        ...(logger ? { logger } : {}),
        ...(options.maxBytesPerPartition ? { maxBytesPerPartition: options.maxBytesPerPartition } : {}),
        ...(options.afterBatch ? { afterBatch: options.afterBatch } : {}),
        onBatch: (partition, messages) => {
          for (const m of messages) {
            const record = consumedRecord(topic, partition, m);
            if (options.filter && !options.filter(record)) continue;
            options.onRecord(record);
            delivered++;
          }
          return 'continue';
        },
      });
    },
  );
  const durationMs = Date.now() - started;
  logger?.debug({ topic, partitions: wanted, delivered, durationMs }, 'changelog read');
  return { delivered, ends: target, durationMs };
}

export interface FetchToEndsOptions {
  /** Partition → the first offset to hand over. */
  from: Map<number, number>;
  /** Partition → the end (exclusive): records at or past it are not handed over. */
  to: Map<number, number>;
  /**
   * The records of one partition a fetch returned, within [from, to), in offset order; 'stop'
   * ends the read at once (no later batch is handed over).
   */
  onBatch(partition: number, messages: KafkaMessage[]): 'continue' | 'stop';
  /** After each fetch that handed records over: a promise holds the next one until it settles (a store's backpressure). */
  afterBatch?(): Promise<void> | undefined;
  /** What a Kafka failure is prefixed with: `cannot read changelog <topic>`. */
  describe: string;
  maxBytesPerPartition?: number;
  logger?: Logger;
}

/** A read under way: its cluster, its deadline and cancel, what it reached (boundedRead). */
export interface BoundedRead {
  /** The topic's low and high watermarks, read_uncommitted (asked again while leaders move). */
  ends(): Promise<Map<number, PartitionEnds>>;
  /**
   * Each partition of `from` fetched from its leader, read_committed, until it reaches its end in
   * `to` (leader-fetch.ts; src/kafka/README.md, "Reading changelogs"). Terminates even when a
   * partition ends with transaction markers or aborted records: the position moves past every
   * record batch a fetch returns. Follows leaders that move or die (asked again with fresh
   * metadata). The next fetch is sent before a batch is handed over.
   */
  fetchToEnds(options: FetchToEndsOptions): Promise<void>;
}

/**
 * Runs `read` with a private cluster (no consumer group), ended with one clear error at
 * `timeoutMs` (`stuck` names the partitions not yet at their end) or when `signal` aborts
 * (SHUTTING_DOWN), and the cluster disconnected whatever happens. Kafka's failures are one line
 * naming what failed; the callbacks' own errors pass as they are.
 */
export async function boundedRead<T>(
  options: { kafka: KafkaSource; topic: string; timeoutMs: number; signal?: AbortSignal; stuck(where: string): string },
  read: (read: BoundedRead) => Promise<T>,
): Promise<T> {
  const { topic } = options;
  const cancelled = () => new MsgbridgeError('SHUTTING_DOWN', `reading ${topic} was cancelled`);
  if (options.signal?.aborted) throw cancelled();
  const deadline = Date.now() + options.timeoutMs;
  const cluster = privateCluster(options.kafka, { readUncommitted: true });
  // Every wait below ends at the deadline or at a cancel, with this error.
  const stop = new AbortController();
  let tracker: EndOfLog | undefined;
  const timer = setTimeout(
    () =>
      stop.abort(
        new MsgbridgeError('KAFKA_UNAVAILABLE', options.stuck(tracker?.describe() || 'its ends not read yet')),
      ),
    options.timeoutMs,
  );
  const onAbort = () => stop.abort(cancelled());
  options.signal?.addEventListener('abort', onAbort, { once: true });
  let connected: Promise<void> | undefined;
  // The fetch sent ahead, until it settles: the read may end (a stop, a failure) while it is out.
  let ahead: Promise<unknown> | undefined;
  const connect = () => (connected ??= connectFor(cluster, topic));
  let answered = false;
  try {
    const answer = await read({
      ends: () =>
        until(
          stop.signal,
          (async () => {
            await connect();
            return endsVia(cluster, topic, { signal: stop.signal });
          })(),
        ).catch((error: unknown) => {
          throw unreachable(error, `cannot read the offsets of topic ${topic}`);
        }),
      fetchToEnds: async (fetch) => {
        const failed = (error: unknown) => {
          throw unreachable(error, fetch.describe);
        };
        await until(stop.signal, connect()).catch(failed);
        const ends = new Map([...fetch.to].map(([p, high]) => [p, { low: fetch.from.get(p) ?? high, high }]));
        tracker = new EndOfLog(ends);
        const positions = new Map<number, number>();
        for (const [partition, from] of fetch.from) {
          tracker.expect(partition, from);
          if (tracker.pending.has(partition)) positions.set(partition, from);
        }
        const fetchOptions = { maxWaitMs: 200, maxBytesPerPartition: fetch.maxBytesPerPartition ?? 4 * 1024 * 1024 };
        const fetchRound = () => {
          const asked = new Map(positions);
          const round = whileLeadersMove(
            async (attempt) => {
              if (attempt > 0) {
                fetch.logger?.debug({ topic, attempt }, 'fetch failed; asking again with fresh metadata');
                await cluster.refreshMetadata();
                stop.signal.throwIfAborted();
              }
              try {
                return await fetchFromLeaders(cluster, topic, asked, fetchOptions);
              } catch (error) {
                if (!(await pastDeletedRecords(error, asked))) throw error;
                return fetchFromLeaders(cluster, topic, asked, fetchOptions);
              }
            },
            { signal: stop.signal, leaderWaitMs: Math.max(0, deadline - Date.now()) },
          );
          ahead = round;
          const settled = () => {
            if (ahead === round) ahead = undefined;
          };
          void round.then(settled, settled);
          return round;
        };
        /**
         * OFFSET_OUT_OF_RANGE: the log start passed a position while the read went on (retention
         * deleted those records). As a consumer with `auto.offset.reset=earliest`, the read goes on
         * from the log start; true when a position moved. Past the end (a log truncated), it fails.
         */
        const pastDeletedRecords = async (error: unknown, asked: Map<number, number>): Promise<boolean> => {
          if ((error as { type?: unknown } | null)?.type !== 'OFFSET_OUT_OF_RANGE') return false;
          const now = await endsVia(cluster, topic, { signal: stop.signal });
          let moved = false;
          for (const [partition, at] of asked) {
            const low = now.get(partition)?.low ?? at;
            if (at >= low) continue;
            fetch.logger?.warn(
              { topic, partition, from: at, to: low },
              'records were deleted while they were being read: reading on from the log start',
            );
            asked.set(partition, low);
            moved = true;
          }
          return moved;
        };
        let fetching = positions.size > 0 ? fetchRound() : undefined;
        while (fetching) {
          const batches = await until(stop.signal, fetching).catch(failed);
          for (const batch of batches) {
            positions.set(batch.partition, batch.next);
            if (tracker.reached(batch.partition, batch.next)) positions.delete(batch.partition);
          }
          fetching = positions.size > 0 ? fetchRound() : undefined;
          // A fetch left behind by a stop or a failure below settles unobserved.
          fetching?.catch(() => undefined);
          let handed = false;
          for (const batch of batches) {
            // The batch starts at the read's position (never below its `from`); records written
            // after the read started are not part of what it reads.
            const end = fetch.to.get(batch.partition)!;
            const past = batch.messages.findIndex((m) => Number(m.offset) >= end);
            const within = past < 0 ? batch.messages : batch.messages.slice(0, past);
            if (within.length === 0) continue;
            handed = true;
            if (fetch.onBatch(batch.partition, within) === 'stop') return;
          }
          if (handed) {
            const caughtUp = fetch.afterBatch?.();
            if (caughtUp) await until(stop.signal, caughtUp);
          }
        }
      },
    });
    answered = true;
    return answer;
  } finally {
    clearTimeout(timer);
    options.signal?.removeEventListener('abort', onAbort);
    // A fetch still out asks nothing more, and its answer is dropped.
    if (!stop.signal.aborted) stop.abort(new MsgbridgeError('SHUTTING_DOWN', `the read of ${topic} ended`));
    const closing = cluster.disconnect().catch(() => undefined);
    // kafkajs's disconnect waits for the requests still out: up to the request timeout on a frozen
    // broker. A read that failed, was cancelled or stopped with a fetch out does not wait for them;
    // it closes behind its answer.
    if (answered && !ahead) await closing;
  }
}

/** `work`, or the reason `signal` aborts with, whichever comes first. */
function until<T>(signal: AbortSignal, work: Promise<T>): Promise<T> {
  if (signal.aborted) return Promise.reject(signal.reason as Error);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason as Error);
    signal.addEventListener('abort', onAbort, { once: true });
    work.then(
      (value) => (signal.removeEventListener('abort', onAbort), resolve(value)),
      (error: unknown) => (signal.removeEventListener('abort', onAbort), reject(error as Error)),
    );
  });
}
