import { randomUUID } from 'node:crypto';

import { sendResultSchema, type SendResult } from '../contracts/send.js';
import { RecencyMap } from '../platform/recency-map.js';
import { ResultWaitError } from '../platform/wait-error.js';
import { createConsumer, createKafka, type KafkaConnectionConfig, type KafkaPort, type KafkaSource } from './client.js';
import { offsetsAtTime, topicEnds } from './dlq-reader.js';

/**
 * Follows `send-results` for producers that wait for their requests' results by request id
 * (`msgbridge/client/kafka`). Results are keyed by message id, not request id, so every
 * partition is read, from the first result written at or after `since` (the broker's time
 * index): a producer that notes the time before producing cannot miss its result, whenever it
 * starts waiting. Committed records only; a private one-member group that commits nothing.
 * Results nobody waits for yet are kept, bounded (`maxUnclaimed`), for a wait that comes later.
 */

export interface ResultFollowerOptions {
  kafka: KafkaSource;
  topic: string;
  /** Results written from this time on (ms since the epoch) are seen. */
  since: number;
  /** Results kept for waits not asked yet, the latest per request id (default 10,000). */
  maxUnclaimed?: number;
  /** The follower joins a private group `<prefix>-<uuid>` (ACLs: Read on this prefix); default `msgbridge-results`. */
  groupIdPrefix?: string;
  /** Longest wait for the group to be joined (default 30 s). */
  startTimeoutMs?: number;
}

export interface WaitForResultOptions {
  /** Only a result of this business (request ids are unique per business). */
  businessId?: string;
  /** Default 60,000 ms. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

interface Waiter {
  businessId: string | undefined;
  resolve(result: SendResult): void;
  reject(error: Error): void;
}

export class ResultFollower {
  private readonly unclaimed = new RecencyMap<string, SendResult>();
  private readonly waiters = new Map<string, Set<Waiter>>();
  private stopped = false;
  private failure: ResultWaitError | undefined;

  private constructor(
    private readonly consumer: ReturnType<typeof createConsumer>,
    private readonly maxUnclaimed: number,
  ) {}

  static async start(options: ResultFollowerOptions): Promise<ResultFollower> {
    const { kafka, topic } = options;
    const maxUnclaimed = options.maxUnclaimed ?? 10_000;
    if (!Number.isInteger(maxUnclaimed) || maxUnclaimed < 1 || maxUnclaimed > 1_000_000)
      throw new RangeError(`maxUnclaimed: expected 1 to 1,000,000, got ${maxUnclaimed}`);
    const ends = await topicEnds(kafka, topic);
    const from = await offsetsAtTime(kafka, topic, options.since, ends);
    const consumer = createConsumer(kafka, {
      groupId: `${options.groupIdPrefix ?? 'msgbridge-results'}-${randomUUID()}`,
      maxWaitTimeInMs: 200,
    });
    const follower = new ResultFollower(consumer, maxUnclaimed);
    const startTimeoutMs = options.startTimeoutMs ?? 30_000;
    let timer: NodeJS.Timeout | undefined;
    const joined = new Promise<void>((resolve, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new ResultWaitError(
              'timeout',
              `following ${topic}: no consumer group joined within ${startTimeoutMs} ms (is Kafka reachable?)`,
            ),
          ),
        startTimeoutMs,
      );
      // Every join (the first, and any rejoin after a broker failure) resumes where the follow is.
      consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
        for (const partition of payload.memberAssignment[topic] ?? [])
          consumer.seek({ topic, partition, offset: String(from.get(partition) ?? 0) });
        resolve();
      });
    });
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      if (!payload.restart)
        follower.stop(
          new ResultWaitError('failed', `following ${topic} stopped: ${payload.error.message}`, {
            cause: payload.error,
          }),
        );
    });
    try {
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await consumer.run({
        autoCommit: false,
        eachBatch: async ({ batch }) => {
          for (const m of batch.messages) if (m.value) follower.received(m.value);
          if (batch.messages.length > 0) from.set(batch.partition, Number(batch.lastOffset()) + 1);
        },
      });
      await joined;
      return follower;
    } catch (err) {
      await consumer.disconnect().catch(() => undefined);
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  /** The result of `requestId` written since the follower's `since`: at once when already read, else when it comes. */
  wait(requestId: string, options: WaitForResultOptions = {}): Promise<SendResult> {
    if (this.stopped)
      return Promise.reject(this.failure ?? new ResultWaitError('failed', 'the result follower is closed'));
    const kept = this.unclaimed.peek(requestId);
    if (kept && (options.businessId === undefined || kept.businessId === options.businessId)) {
      this.unclaimed.delete(requestId);
      return Promise.resolve(kept);
    }
    const timeoutMs = options.timeoutMs ?? 60_000;
    return new Promise<SendResult>((resolve, reject) => {
      const waiters = this.waiters.get(requestId) ?? new Set<Waiter>();
      const done = () => {
        clearTimeout(timer);
        options.signal?.removeEventListener('abort', aborted);
        waiters.delete(waiter);
        if (waiters.size === 0) this.waiters.delete(requestId);
      };
      const waiter: Waiter = {
        businessId: options.businessId,
        resolve: (result) => (done(), resolve(result)),
        reject: (error) => (done(), reject(error)),
      };
      const aborted = () =>
        waiter.reject(new ResultWaitError('aborted', `waiting for request ${requestId} was aborted`));
      if (options.signal?.aborted) return aborted();
      const timer = setTimeout(
        () =>
          waiter.reject(new ResultWaitError('timeout', `no result for request ${requestId} within ${timeoutMs} ms`)),
        timeoutMs,
      );
      options.signal?.addEventListener('abort', aborted, { once: true });
      waiters.add(waiter);
      this.waiters.set(requestId, waiters);
    });
  }

  /** Ends the follow; waits in progress fail (`reason` 'failed'). */
  async close(): Promise<void> {
    this.stop(new ResultWaitError('failed', 'the result follower was closed'));
    await this.consumer.disconnect().catch(() => undefined);
  }

  private received(value: Buffer): void {
    let body: unknown;
    try {
      body = JSON.parse(value.toString('utf8'));
    } catch {
      return;
    }
    const parsed = sendResultSchema.safeParse(body);
    if (!parsed.success) return;
    const result = parsed.data;
    let claimed = false;
    for (const waiter of [...(this.waiters.get(result.requestId) ?? [])]) {
      if (waiter.businessId !== undefined && waiter.businessId !== result.businessId) continue;
      claimed = true;
      waiter.resolve(result);
    }
    if (claimed) return;
    if (!this.unclaimed.has(result.requestId) && this.unclaimed.size >= this.maxUnclaimed)
      this.unclaimed.delete(this.unclaimed.oldest()!);
    this.unclaimed.set(result.requestId, result);
  }

  private stop(error: ResultWaitError): void {
    if (this.stopped) return;
    this.stopped = true;
    this.failure = error;
    for (const waiters of [...this.waiters.values()]) for (const waiter of [...waiters]) waiter.reject(error);
  }
}

/** How a producer's service reaches Kafka (the relay's `kafka.*` settings of the same names). */
export interface KafkaConnection {
  /** Bootstrap servers, `host:port`. */
  brokers: string[];
  /** Default `msgbridge-client`. */
  clientId?: string;
  /** true: TLS with the system's CAs; or PEM texts. */
  ssl?: boolean | { ca?: string; cert?: string; key?: string; rejectUnauthorized?: boolean };
  sasl?: { mechanism: 'plain' | 'scram-sha-256' | 'scram-sha-512'; username: string; password: string } | null;
  /** Default 3,000 ms. */
  connectionTimeoutMs?: number;
  /** Default 30,000 ms. */
  requestTimeoutMs?: number;
}

export interface FollowSendResultsOptions
  extends KafkaConnection, Pick<ResultFollowerOptions, 'maxUnclaimed' | 'groupIdPrefix' | 'startTimeoutMs'> {
  /** Default `send-results` (`kafka.topics.sendResults`). */
  topic?: string;
  /** Results written from this time on (ms since the epoch) are seen; default: now. Note the time before producing. */
  since?: number;
}

const BROKER = /^[^\s:,]+:\d{1,5}$/;

function kafkaOf(connection: KafkaConnection): KafkaPort {
  if (!Array.isArray(connection.brokers) || connection.brokers.length === 0)
    throw new TypeError('brokers: expected at least one "host:port"');
  const bad = connection.brokers.find((b) => typeof b !== 'string' || !BROKER.test(b));
  if (bad !== undefined) throw new TypeError(`brokers: expected "host:port", got ${JSON.stringify(bad)}`);
  const config: KafkaConnectionConfig = {
    brokers: connection.brokers,
    clientId: connection.clientId ?? 'msgbridge-client',
    connectionTimeoutMs: connection.connectionTimeoutMs ?? 3000,
    requestTimeoutMs: connection.requestTimeoutMs ?? 30_000,
    ssl: connection.ssl ?? false,
    sasl: connection.sasl ?? null,
  };
  return createKafka(config);
}

/** A follower of `send-results` for many waits (one consumer for all of them); close it when done. */
export function followSendResults(options: FollowSendResultsOptions): Promise<ResultFollower> {
  return ResultFollower.start({
    kafka: kafkaOf(options),
    topic: options.topic ?? 'send-results',
    since: options.since ?? Date.now(),
    ...(options.maxUnclaimed !== undefined ? { maxUnclaimed: options.maxUnclaimed } : {}),
    ...(options.groupIdPrefix !== undefined ? { groupIdPrefix: options.groupIdPrefix } : {}),
    ...(options.startTimeoutMs !== undefined ? { startTimeoutMs: options.startTimeoutMs } : {}),
  });
}

/**
 * One request's result from `send-results`, with a follower of its own (a consumer group join:
 * a second or more). `since` (default: a minute ago) must be before the request was produced.
 * For many requests, keep one `followSendResults` instead.
 */
export async function waitForResult(
  requestId: string,
  options: FollowSendResultsOptions & WaitForResultOptions,
): Promise<SendResult> {
  const follower = await followSendResults({ ...options, since: options.since ?? Date.now() - 60_000 });
  try {
    return await follower.wait(requestId, options);
  } finally {
    await follower.close();
  }
}
