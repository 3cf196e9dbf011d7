import type { Registry } from 'prom-client';
import type { Config } from '../config/schema.js';
import { MsgbridgeError } from '../errors.js';
import { createKafka } from '../kafka/client.js';
import type { BatchControl, ConsumedRecord, GroupConsumer } from '../kafka/group-consumer.js';
import { createKafkajsGroupConsumer } from '../kafka/kafkajs-group-consumer.js';
import { createKafkajsProducer } from '../kafka/kafkajs-producer.js';
import type { RecordProducer } from '../kafka/port.js';
import { ensureTopics } from '../kafka/topics.js';
import { startHealthServer, type HealthServer } from '../observability/health-server.js';
import { silentLogger, type Logger } from '../observability/logger.js';
import { createMetricsRegistry } from '../observability/metrics.js';
import { KeyedRunner, type RunnerStats } from './keyed-runner.js';
import { createSenderMetrics } from './metrics.js';
import { decodeCompleted, encodeCompleted } from './offset-metadata.js';
import { createProcessor, sleep } from './processor.js';
import { createProviderClient, type ProviderClient } from './provider-client.js';
import { RateLimiter } from './rate-limiter.js';
import { prepareJob, type Job } from './requests.js';
import { BatchingPublisher } from './result-publisher.js';

/** Heartbeat errors after which kafkajs 2.2.4 rejoins the group (runner.js: isRebalancing, UNKNOWN_MEMBER_ID). */
const REJOIN_ERRORS = new Set(['REBALANCE_IN_PROGRESS', 'NOT_COORDINATOR_FOR_GROUP', 'ILLEGAL_GENERATION', 'UNKNOWN_MEMBER_ID']);

/**
 * The sender role's composition root: a consumer-group member on `send-requests` that sends
 * each request to the provider and publishes its result on `send-results` (or the request on
 * `send-requests-dlq`). Used by `msgbridge sender`, `msgbridge dev` and the tests.
 *
 * Guarantees:
 * - Order: requests with the same key (the record key; the recipient for unkeyed records)
 *   are sent one after another, in partition order; different keys run concurrently, at most
 *   `sender.concurrency` at a time.
 * - At least once: an offset is committed only once every request below it has its result
 *   (or DLQ record) acknowledged by Kafka, so nothing is lost on a crash or a rebalance.
 * - Duplicates: within a process, a (business, requestId) is sent at most once (a bounded LRU
 *   of completed ids; a repeat gets the stored result published again). Across a crash or a
 *   hand-over, what runs again is at most what lies between the committed offset and the
 *   newest request taken: never more than `sender.maxBufferedRequests`. The commit metadata
 *   records which of those finished, so the next owner skips them; in practice what is sent
 *   twice is what was in an HTTP call, or finished after the last commit (every
 *   `commitIntervalMs`), when the process died. A drain (SIGTERM) commits everything it
 *   finished: the next owner sends nothing twice.
 * - Bounded memory: at most `maxBufferedRequests` requests between the commit point and the
 *   newest request taken (finished or not); when full, the consumer stops taking records and
 *   only heartbeats, so the fetch position stays where the buffer ends.
 */
export interface StartSenderOptions {
  config: Config;
  /** Bootstrap servers (default: config.kafka.brokers). */
  brokers?: string[];
  logger?: Logger;
  /** Metrics registry (default: a new one for the role "sender"). */
  registry?: Registry;
  /** Health/metrics server: default config.sender.healthHost/healthPort; false = none. */
  health?: false | { host?: string; port?: number };
  /** How often progress is committed (default 200 ms). */
  commitIntervalMs?: number;
  /** Called when the Kafka client gave up for good (the process should drain and exit non-zero). */
  onFatal?: (error: Error) => void;
}

export interface Sender {
  /** Resolves once the member joined the group for the first time. */
  readonly ready: Promise<void>;
  isReady(): boolean;
  readonly metrics: Registry;
  /** Base URL of the health server, when one runs. */
  readonly healthUrl: string | undefined;
  stats(): RunnerStats & { completedRequestIds: number };
  /**
   * Stops taking requests, lets the provider calls in progress finish and their results be
   * published (within `sender.drainGraceMs`), commits, leaves the group and disconnects.
   * Resolves true when everything in progress finished in time. Idempotent.
   */
  drain(): Promise<boolean>;
  /** Same as drain(). */
  close(): Promise<boolean>;
}

/** business id → API key, or a configuration error naming what is missing. */
export function senderApiKeys(config: Config): Map<string, string> {
  if (config.businesses.length === 0) {
    throw new MsgbridgeError(
      'CONFIG_INVALID',
      'the sender needs at least one business with an API key: set MSGBRIDGE_BUSINESS_ID and MSGBRIDGE_API_KEY, or list businesses (id, apiKey) in the configuration file',
    );
  }
  const keys = new Map<string, string>();
  config.businesses.forEach((business, index) => {
    if (business.apiKey === null || business.apiKey === '') {
      throw new MsgbridgeError(
        'CONFIG_INVALID',
        `invalid configuration:\n  - businesses.${index}.apiKey: business "${business.id}" has no API key, which the sender needs (set it in the configuration file, or MSGBRIDGE_API_KEY with MSGBRIDGE_BUSINESS_ID=${business.id})`,
      );
    }
    keys.set(business.id, business.apiKey);
  });
  return keys;
}

export async function startSender(options: StartSenderOptions): Promise<Sender> {
  const { config } = options;
  const logger = (options.logger ?? silentLogger).child({ component: 'sender' });
  const apiKeys = senderApiKeys(config);
  if (!config.provider.url) throw new MsgbridgeError('CONFIG_INVALID', 'invalid configuration:\n  - provider.url: the sender needs the provider base URL (MSGBRIDGE_PROVIDER_URL)');
  const brokers = options.brokers ?? config.kafka.brokers;
  if (brokers.length === 0) throw new MsgbridgeError('KAFKA_UNAVAILABLE', 'the sender needs Kafka brokers (KAFKA_BROKERS)');
  const s = config.sender;
  const topics = config.kafka.topics;
  const registry = options.registry ?? createMetricsRegistry('sender');
  const commitIntervalMs = options.commitIntervalMs ?? 200;

  const kafka = createKafka(config.kafka, { logger, brokers });
  if (config.kafka.createTopics) {
    const admin = kafka.admin();
    await admin.connect();
    try {
      await ensureTopics(
        admin,
        [topics.sendRequests, topics.sendResults, topics.sendRequestsDlq].map((topic) => ({
          topic,
          partitions: config.kafka.partitions,
          replicationFactor: config.kafka.replicationFactor,
        })),
        logger,
      );
    } finally {
      await admin.disconnect();
    }
  }

  const producer: RecordProducer = createKafkajsProducer(kafka, { timeoutMs: config.kafka.requestTimeoutMs });
  await producer.connect().catch(async (err: unknown) => {
    await producer.disconnect().catch(() => undefined);
    throw err;
  });
  const publisher = new BatchingPublisher(producer);
  const client: ProviderClient = createProviderClient({
    baseUrl: config.provider.url,
    connections: config.provider.connections,
    callTimeoutMs: s.callTimeoutMs,
  });

  // The gauges read the runner's stats at scrape time (the runner is created below).
  const metrics = createSenderMetrics(registry, () => runner.stats());
  const processor = createProcessor({
    client,
    publish: (topic, record) => publisher.publish(topic, record),
    limiter: new RateLimiter({ ratePerSecond: s.ratePerSecond }),
    apiKeys,
    topics: { results: topics.sendResults, dlq: topics.sendRequestsDlq },
    policy: { maxAttempts: s.maxAttempts, backoffInitialMs: s.backoffInitialMs, backoffMaxMs: s.backoffMaxMs },
    completedMax: s.completedRequestIdsMax,
    metrics,
    logger,
  });
  const runner = new KeyedRunner<Job>({
    concurrency: s.concurrency,
    maxBuffered: s.maxBufferedRequests,
    work: (job, context) => processor.work(job, context),
    onWorkError: (err, partition, offset) => logger.error({ err, partition, offset }, 'processing a request failed unexpectedly; retrying it'),
  });

  const consumer: GroupConsumer = createKafkajsGroupConsumer(kafka, { groupId: s.groupId, topic: topics.sendRequests, logger });

  let state: 'starting' | 'running' | 'draining' | 'stopped' | 'failed' = 'starting';
  let joined = false;
  let memberId: string | undefined;
  let markReady!: () => void;
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  /** Per newly assigned partition: the load of what its previous owner finished. */
  const gates = new Map<string, Promise<void>>();
  let metadataEnabled = true;

  const loadCompleted = async (partitions: number[]): Promise<void> => {
    const epochs = new Map(partitions.map((p) => [p, runner.epochOf(String(p))]));
    try {
      const committed = await Promise.race([
        consumer.fetchCommitted(partitions),
        sleep(10_000).then(() => {
          throw new Error('timed out');
        }),
      ]);
      for (const c of committed) {
        const epoch = epochs.get(c.partition);
        if (epoch === undefined || c.offset < 0) continue;
        const completed = decodeCompleted(c.metadata, c.offset);
        if (completed.length > 0) {
          runner.setCompleted(String(c.partition), epoch, completed);
          logger.info({ partition: c.partition, committed: c.offset, skipping: completed.length }, 'skipping requests the previous owner finished above the committed offset');
        }
      }
    } catch (err) {
      logger.warn({ err, partitions }, 'could not read the commit metadata: requests finished above the committed offsets may be sent again');
    }
  };

  const onAssignment = (partitions: number[], member: string) => {
    if (memberId !== undefined && member !== memberId) {
      // A new membership: whatever this process held may have been owned by others since.
      for (const p of runner.assigned()) runner.revoke(p);
      gates.clear();
    }
    memberId = member;
    rejoining = false;
    const owned = new Set(partitions.map(String));
    const revoked = runner.assigned().filter((p) => !owned.has(p));
    for (const p of revoked) {
      runner.revoke(p);
      gates.delete(p);
    }
    const fresh = partitions.filter((p) => runner.epochOf(String(p)) === undefined);
    for (const p of fresh) runner.assign(String(p));
    if (fresh.length > 0) {
      const gate = loadCompleted(fresh);
      for (const p of fresh) gates.set(String(p), gate);
    }
    metrics.rebalance();
    logger.info({ partitions, revoked, added: fresh }, 'assignment');
    joined = true;
    if (state === 'starting') state = 'running';
    markReady();
  };

  /**
   * Set when a heartbeat reports a rebalance, cleared by the next assignment. kafkajs hands the
   * remaining batches of the same fetch to the handler before it rejoins; they return at once
   * instead of each waiting (and heartbeating into the same error) in turn.
   */
  let rejoining = false;
  const active = (control: BatchControl) => state === 'running' && !rejoining && control.isActive();

  /**
   * kafkajs heartbeats only between batches (and sends one only when the interval has passed):
   * a handler that spends a while on a batch heartbeats itself, or the rebalance waits for it.
   * A heartbeat that reports a rebalance ends the batch (kafkajs then rejoins).
   */
  const heartbeat = async (control: BatchControl): Promise<void> => {
    try {
      await control.heartbeat();
    } catch (err) {
      // Only errors after which kafkajs always rejoins (and so emits an assignment that clears
      // the flag); after any other error it just fetches again.
      if (REJOIN_ERRORS.has((err as { type?: string }).type ?? '')) rejoining = true;
      throw err;
    }
  };

  /** Waits for a promise while keeping the membership alive; false when the batch should end. */
  const waitKeepingAlive = async (promise: Promise<unknown>, control: BatchControl): Promise<boolean> => {
    let settled = false;
    void promise.then(
      () => (settled = true),
      () => (settled = true),
    );
    while (!settled) {
      await Promise.race([promise.catch(() => undefined), sleep(1000)]);
      if (!active(control)) return false;
      if (!settled) await heartbeat(control);
    }
    return true;
  };

  const orderKey = (record: ConsumedRecord, job: Job): string => {
    if (record.key !== null) return `k:${record.key.toString('latin1')}`;
    if (job.kind === 'send') return `r:${job.recipient}`;
    return `o:${record.offset}`;
  };

  const onBatch = async (partition: number, records: ConsumedRecord[], control: BatchControl): Promise<void> => {
    const p = String(partition);
    if (!active(control)) return;
    // A rebalance noticed by kafkajs's own heartbeat after the previous batch surfaces here.
    await heartbeat(control);
    let lastBeat = Date.now();
    const gate = gates.get(p);
    if (gate) {
      if (!(await waitKeepingAlive(gate, control))) return;
      if (gates.get(p) === gate) gates.delete(p);
    }
    for (const record of records) {
      if (!active(control) || runner.epochOf(p) === undefined) return;
      if (!runner.hasCapacity()) {
        // The window frees up as commits are confirmed: commit now rather than at the next tick.
        void commitOnce();
        if (!(await waitKeepingAlive(runner.whenCapacity(), control))) return;
      }
      if (Date.now() - lastBeat >= 1000) {
        await heartbeat(control);
        lastBeat = Date.now();
        if (!active(control)) return;
      }
      const now = Date.now();
      const job = prepareJob(record, apiKeys, now, Number(record.timestamp));
      if (runner.submit(p, Number(record.offset), orderKey(record, job), job) === 'not-assigned') return;
      control.resolveOffset(record.offset);
    }
  };

  /** Commits the progress of the owned partitions once; failures wait for the next round. */
  const commitProgress = async (): Promise<void> => {
    const points = runner.commitPoints();
    if (points.length === 0) return;
    try {
      await consumer.commit(
        points.map((point) => ({
          partition: Number(point.partition),
          offset: point.offset,
          metadata: metadataEnabled ? encodeCompleted(point.offset, point.completedAbove) : null,
        })),
      );
      for (const point of points) runner.markCommitted(point);
      metrics.commit('ok');
    } catch (err) {
      metrics.commit('error');
      const type = (err as { type?: string }).type;
      if (type === 'OFFSET_METADATA_TOO_LARGE') {
        metadataEnabled = false;
        logger.warn('the broker refuses the commit metadata (offset.metadata.max.bytes): committing without it');
      } else {
        logger.debug({ err: (err as Error).message, type }, 'commit failed; the next one retries with fresh state');
      }
    }
  };

  let committing: Promise<void> | undefined;
  /** The periodic commit: one at a time, each in a fresh macrotask. */
  const commitOnce = (): Promise<void> => {
    committing ??= (async () => {
      // kafkajs switches to a new generation and emits GROUP_JOIN within one turn of the event
      // loop, so at the start of a macrotask the assignment the runner knows and the
      // generation a commit carries agree.
      await new Promise((resolve) => setImmediate(resolve));
      await commitProgress();
    })().finally(() => {
      committing = undefined;
    });
    return committing;
  };
  const commitTimer = setInterval(() => void commitOnce(), commitIntervalMs);
  commitTimer.unref();

  // Whatever started so far is stopped again when the start fails half-way.
  const abortStart = async (err: unknown): Promise<never> => {
    clearInterval(commitTimer);
    runner.abort();
    await consumer.stop().catch(() => undefined);
    await producer.disconnect().catch(() => undefined);
    await client.close().catch(() => undefined);
    throw err;
  };

  let health: HealthServer | undefined;
  if (options.health !== false) {
    health = await startHealthServer({
      host: options.health?.host ?? s.healthHost,
      port: options.health?.port ?? s.healthPort,
      registry,
      logger,
      notReadyReason: () => {
        if (state === 'draining' || state === 'stopped') return 'draining';
        if (state === 'failed') return 'the Kafka consumer stopped';
        if (!joined) return 'not yet a member of the consumer group';
        return undefined;
      },
    }).catch(abortStart);
    logger.info({ url: health.url }, 'health and metrics endpoints listening');
  }

  await consumer
    .start({
      onAssignment,
      onBatch,
      // Commit what is finished before rejoining: after the rejoin, this generation's commits are
      // refused, and whatever was not committed runs again at the partition's next owner.
      onRebalancing: () => void commitProgress(),
      onCrash: (error, restarting) => {
        joined = false;
        rejoining = false;
        for (const p of runner.assigned()) runner.revoke(p);
        gates.clear();
        if (restarting) {
          logger.error({ err: error }, 'the Kafka consumer crashed; it restarts and rejoins');
          return;
        }
        logger.fatal({ err: error }, 'the Kafka consumer stopped for good');
        if (state === 'running' || state === 'starting') state = 'failed';
        options.onFatal?.(error);
      },
    })
    .catch(async (err: unknown) => {
      await health?.close();
      return abortStart(err);
    });

  let draining: Promise<boolean> | undefined;
  const drain = (): Promise<boolean> => {
    if (draining) return draining;
    draining = (async () => {
      const started = Date.now();
      state = 'draining';
      markReady();
      consumer.pauseAll();
      runner.halt();
      const grace = s.drainGraceMs;
      const before = runner.stats();
      logger.info({ running: before.running, queued: before.queued }, 'draining: finishing the provider calls in progress');
      let finished = await Promise.race([runner.whenIdle().then(() => true), sleep(Math.floor(grace * 0.7)).then(() => false)]);
      if (!finished) {
        logger.warn({ running: runner.stats().running }, 'drain grace running out: abandoning what is still in progress (it runs again elsewhere)');
        runner.abort();
        await Promise.race([runner.whenIdle(), sleep(Math.floor(grace * 0.1))]);
        finished = false;
      }
      clearInterval(commitTimer);
      await committing;
      await commitOnce();
      try {
        await Promise.race([consumer.stop(), sleep(Math.max(1000, grace - (Date.now() - started)))]);
      } catch (err) {
        logger.warn({ err }, 'leaving the consumer group failed');
      }
      await producer.disconnect().catch((err: unknown) => logger.warn({ err }, 'disconnecting the producer failed'));
      await client.close().catch(() => undefined);
      await health?.close();
      state = 'stopped';
      logger.info({ finished, durationMs: Date.now() - started }, 'sender stopped');
      return finished;
    })();
    return draining;
  };

  return {
    ready,
    isReady: () => state === 'running' && joined,
    metrics: registry,
    healthUrl: health?.url,
    stats: () => ({ ...runner.stats(), completedRequestIds: processor.completedCount }),
    drain,
    close: drain,
  };
}
