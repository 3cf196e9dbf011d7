import type { Registry } from 'prom-client';
import type { Config } from '../config/schema.js';
import { MsgbridgeError } from '../platform/errors.js';
import { createKafka, type KafkaClient } from '../kafka/client.js';
import { connectingToKafka } from '../kafka/failure.js';
import type { ConsumedRecord, GroupConsumer } from '../kafka/group-consumer.js';
import { createKafkajsGroupConsumer } from '../kafka/kafkajs-group-consumer.js';
import { createKafkajsProducer } from '../kafka/kafkajs-producer.js';
import { requireBrokers } from '../kafka/brokers.js';
import { prepareRoleTopics } from '../kafka/topics.js';
import { startHealthServer, type HealthServer } from '../runtime/health-server.js';
import { silentLogger, type Logger } from '../platform/logger.js';
import { createMetricsRegistry } from '../runtime/metrics.js';
import { watchConfiguredBusinesses } from '../runtime/businesses-reload.js';
import { once, type Role } from '../runtime/role.js';
import { CircuitBreaker } from './circuit-breaker.js';
import { followConversations, type ConversationFollower } from './conversation-follower.js';
import { ConversationTable, type ConversationTableStats } from './conversation-table.js';
import { KeyedRunner, type RunnerStats } from './keyed-runner.js';
import { createSenderMetrics } from './metrics.js';
import { PartitionConsumer } from './partition-consumer.js';
import { createProcessor } from './processor.js';
import { createProviderClient, type ProviderClient } from './provider-client.js';
import { RateLimiter } from './rate-limiter.js';
import { prepareJob, type Job } from './requests.js';
import { OutcomePublisher } from './outcome-publisher.js';
import { Semaphore } from './semaphore.js';

/**
 * The sender role's composition root: a consumer-group member on `send-requests` that sends
 * each request to the provider and publishes its one terminal result on `send-results` (and
 * invalid requests on `send-requests-dlq`). Used by `msgbridge sender`, `msgbridge dev` and
 * the tests. Its guarantees are written once, in README.md beside this file.
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

export interface Sender extends Role {
  /** Resolves once the member joined the group for the first time. */
  readonly ready: Promise<void>;
  /** Base URL of the health server, when one runs. */
  readonly address: string | undefined;
  /** The runner's counts (`running` includes requests waiting for their circuit or a token), provider calls in flight, remembered request ids, the conversation table (when the guard is on). */
  stats(): RunnerStats & { providerCalls: number; completedRequestIds: number; conversationTable?: ConversationTableStats };
  /**
   * Stops taking requests, lets the provider calls in progress finish and their results be
   * published (within `sender.drainGraceMs`), commits, leaves the group and disconnects.
   * Resolves true when everything in progress finished in time. Idempotent.
   */
  drain(): Promise<boolean>;
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
  requireBrokers(brokers);
  const s = config.sender;
  const topics = config.kafka.topics;
  const registry = options.registry ?? createMetricsRegistry('sender');

  const kafka = createKafka(config.kafka, { logger, brokers });
  const dlqMaxBytes = await connectingToKafka(brokers, () => prepareTopics(kafka, config, logger));

  const publisher = new OutcomePublisher({
    createProducer: () => createKafkajsProducer(kafka, { timeoutMs: config.kafka.requestTimeoutMs }),
    stallMs: config.kafka.requestTimeoutMs,
    onReplace: (error) => logger.debug({ err: (error as Error)?.message ?? String(error) }, 'a produce of results failed: the producer is replaced, never reused'),
    onHealthChange: (ok, error) => {
      if (ok) logger.info('results reach Kafka again');
      else logger.error({ err: (error as Error)?.message ?? String(error) }, 'results cannot be published to Kafka: retrying with a new producer; /readyz is 503 meanwhile');
    },
  });
  await connectingToKafka(brokers, () => publisher.start());
  const client: ProviderClient = createProviderClient({
    baseUrl: config.provider.url,
    connections: config.provider.connections,
    callTimeoutMs: s.callTimeoutMs,
  });
  const limiter = new RateLimiter({ ratePerSecond: s.ratePerSecond });
  const circuits = new CircuitBreaker({
    failureThreshold: s.circuitFailureThreshold,
    probeInitialMs: s.backoffInitialMs,
    probeMaxMs: s.circuitProbeMaxMs,
    onChange: (business, state, failures) => {
      metrics.circuitChange(business, state);
      if (state === 'open')
        logger.warn({ businessId: business, consecutiveFailures: failures }, 'provider circuit open: the provider keeps failing for this business; its requests wait and one probe at a time is sent');
      else logger.info({ businessId: business }, 'provider circuit closed: the provider answers again; sending resumes');
    },
  });

  // The conversation window guard (README "Conversation window"): the table is read in full
  // before any send request is consumed (below), then followed.
  const table = s.conversationWindow === 'reject' ? new ConversationTable({ maxEntries: s.conversationTableMaxEntries }) : undefined;

  // The gauges read the runner's stats at scrape time (the runner is created below).
  const metrics = createSenderMetrics(registry, {
    stats: () => runner.stats(),
    openCircuits: () => circuits.openKeys(),
    slowedRates: () => limiter.slowedDown(),
    configuredRate: s.ratePerSecond,
    businesses: [...apiKeys.keys()],
    publishing: () => publisher.publishable,
    ...(table ? { conversationTable: () => table.stats() } : {}),
  });
  const businesses = followBusinessesFile(config, registry, logger, apiKeys);
  const callSlots = new Semaphore(s.concurrency);
  const processor = createProcessor({
    client,
    publish: (topic, record) => publisher.publish(topic, record),
    limiter,
    circuits,
    callSlots,
    apiKeys,
    topics: { results: topics.sendResults, dlq: topics.sendRequestsDlq },
    policy: { budgetMs: s.retryBudgetMs, backoffInitialMs: s.backoffInitialMs, backoffMaxMs: s.backoffMaxMs },
    retryMaybeSent: s.retryMaybeSent,
    dlqMaxBytes,
    completedMax: s.completedRequestIdsMax,
    metrics,
    logger,
    ...(table ? { conversations: { mode: s.conversationWindow, graceMs: s.conversationWindowGraceMs, lookup: (business: string, customer: string) => table.lookup(business, customer) } } : {}),
  });
  // Every buffered key may be waiting (for its circuit, a token): provider calls in flight are
  // bounded by the call slots above, so that one business's outage holds none of another's.
  const runner = new KeyedRunner<Job>({
    concurrency: s.maxBufferedRequests,
    maxBuffered: s.maxBufferedRequests,
    work: (job, context) => processor.work(job, context),
    onWorkError: (err, partition, offset) => logger.error({ err, partition, offset }, 'processing a request failed unexpectedly; retrying it'),
  });

  const consumer: GroupConsumer = createKafkajsGroupConsumer(kafka, {
    groupId: s.groupId,
    topic: topics.sendRequests,
    sessionTimeoutMs: s.sessionTimeoutMs,
    heartbeatIntervalMs: s.heartbeatIntervalMs,
    // Every owned partition's batch in progress at once: they share the runner's window fairly.
    partitionsConsumedConcurrently: 64,
    logger,
  });
  const member = new PartitionConsumer<Job>({
    consumer,
    runner,
    prepare: (record) => {
      const job = prepareJob(record, apiKeys, { receivedAt: Date.now(), producedAt: Number(record.timestamp), maxRequestAgeMs: s.maxRequestAgeMs });
      return { job, key: orderKey(record, job) };
    },
    commitIntervalMs: options.commitIntervalMs ?? 200,
    logger,
    onCommit: (result) => metrics.commit(result),
    onAssignment: () => metrics.rebalance(),
    ...(options.onFatal ? { onFatal: options.onFatal } : {}),
  });

  const guard = table && startConversationGuard({ kafka, config, table, businesses: businesses.live, logger, onSkipped: () => metrics.conversationRecordSkipped(), onFatal: options.onFatal });
  const follower = guard?.follower;

  // Whatever started so far is stopped again when the start fails half-way.
  const abortStart = async (err: unknown): Promise<never> => {
    businesses.stop();
    await guard?.stop();
    await member.abort();
    await publisher.close().catch(() => undefined);
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
      notReadyReason: () =>
        (table && follower && !table.isComplete ? `conversation table not ready: ${follower.status()}` : undefined) ??
        member.notReadyReason() ??
        (publisher.publishable ? undefined : 'results cannot be published to Kafka (the last produce failed)'),
    }).catch(abortStart);
    logger.info({ url: health.url }, 'health and metrics endpoints listening');
  }

  // The start-up wait: no send request is taken before the table is complete, so that a
  // customer never seen really means no open window.
  if (follower) {
    const loaded = await follower.loaded.catch(async (err: unknown) => {
      await health?.close();
      return abortStart(err);
    });
    logger.info({ conversations: topics.conversations, ...loaded }, 'conversation table complete (every open window known, followed from here): consuming send requests');
  }

  await member.start().catch(async (err: unknown) => {
    await health?.close();
    return abortStart(err);
  });

  // The member bounds its own drain by sender.drainGraceMs; closing after it is bounded by the clients' timeouts.
  const drain = once(async () => {
    const started = Date.now();
    const finished = await member.drain(s.drainGraceMs);
    businesses.stop();
    await guard?.stop();
    await publisher.close().catch((err: unknown) => logger.warn({ err }, 'disconnecting the producer failed'));
    await client.close().catch(() => undefined);
    await health?.close();
    logger.info({ finished, durationMs: Date.now() - started }, 'sender stopped');
    return finished;
  });

  return {
    ready: member.ready,
    isReady: () => member.isMember() && publisher.publishable && (table === undefined || table.isComplete),
    metrics: registry,
    address: health?.url,
    stats: () => ({ ...runner.stats(), providerCalls: callSlots.inUse, completedRequestIds: processor.completedCount, ...(table ? { conversationTable: table.stats() } : {}) }),
    drain,
  };
}

/**
 * The live businesses file (src/config/businesses-file.ts): a valid new list replaces the API
 * keys and the businesses whose windows are kept in place, in one synchronous step, so a
 * request sees the old set or the new one. A business without an API key refuses the list.
 */
function followBusinessesFile(config: Config, registry: Registry, logger: Logger, apiKeys: Map<string, string>): { live: Set<string>; stop(): void } {
  const live = new Set(apiKeys.keys());
  const watch = watchConfiguredBusinesses({
    config,
    registry,
    logger,
    apply: (businesses) => {
      const next = senderApiKeys({ ...config, businesses });
      apiKeys.clear();
      live.clear();
      for (const [id, key] of next) {
        apiKeys.set(id, key);
        live.add(id);
      }
    },
  });
  return { live, stop: () => watch?.stop() };
}

/** The conversation window guard's table, read and then followed (README "Conversation window"), and swept. */
function startConversationGuard(options: {
  kafka: KafkaClient;
  config: Config;
  table: ConversationTable;
  businesses: ReadonlySet<string>;
  logger: Logger;
  onSkipped(): void;
  onFatal: ((error: Error) => void) | undefined;
}): { follower: ConversationFollower; stop(): Promise<void> } {
  const { config, table, logger } = options;
  const s = config.sender;
  logger.info(
    { topic: config.kafka.topics.conversations, timeoutMs: s.conversationTableReadTimeoutMs },
    'conversation window guard on (reject): reading the conversations topic to its end before consuming send requests',
  );
  const follower = followConversations({
    kafka: options.kafka,
    topic: config.kafka.topics.conversations,
    table,
    businesses: options.businesses,
    groupIdPrefix: `${s.groupId}-conversations`,
    timeoutMs: s.conversationTableReadTimeoutMs,
    logger,
    onSkipped: options.onSkipped,
    ...(options.onFatal ? { onFatal: options.onFatal } : {}),
  });
  // Closed windows leave the table as they close (lookups drop the ones they meet too).
  const sweeper = setInterval(() => table.sweep(), 60_000);
  sweeper.unref();
  return {
    follower,
    async stop() {
      clearInterval(sweeper);
      await follower.stop();
    },
  };
}

/** Records of the same key run in order: the record key, else the recipient. */
function orderKey(record: ConsumedRecord, job: Job): string {
  if (record.key !== null) return `k:${record.key.toString('latin1')}`;
  if (job.kind === 'send') return `r:${job.recipient}`;
  return `o:${record.offset}`;
}

/**
 * Creates the sender's topics when configured to, and reads how large a DLQ record may be (the
 * DLQ topic's max.message.bytes less 16 KiB of framing; the default when the cluster does not
 * say, e.g. DescribeConfigs denied).
 */
async function prepareTopics(kafka: KafkaClient, config: Config, logger: Logger): Promise<number> {
  const topics = config.kafka.topics;
  const admin = kafka.admin();
  await admin.connect();
  try {
    const written = await prepareRoleTopics(
      admin,
      {
        createTopics: config.kafka.createTopics,
        create: [topics.sendRequests, topics.sendResults, topics.sendRequestsDlq].map((topic) => ({
          topic,
          partitions: config.kafka.partitions,
          replicationFactor: config.kafka.replicationFactor,
          minInsyncReplicas: config.kafka.minInsyncReplicas,
          ...(topic === topics.sendRequestsDlq ? { configEntries: [{ name: 'retention.ms', value: String(config.kafka.dlqRetentionMs) }] } : {}),
        })),
        written: [topics.sendResults, topics.sendRequestsDlq],
      },
      logger,
    );
    // The DLQ topic's limit less room for the batch framing; Kafka's default when it cannot be read.
    const limit = written.maxMessageBytes.get(topics.sendRequestsDlq);
    return limit !== undefined && limit > 32 * 1024 ? limit - 16 * 1024 : 1_000_000;
  } finally {
    await admin.disconnect();
  }
}
