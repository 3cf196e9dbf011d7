import type { Registry } from 'prom-client';
import type { BusinessesWatch } from '../config/businesses-file.js';
import type { Config } from '../config/schema.js';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { createKafka, type KafkaPort } from '../kafka/client.js';
import type { PublisherObserver } from '../kafka/batching-publisher.js';
import { createProducerFactory } from '../kafka/producer-factory.js';
import { withAdmin } from '../kafka/admin.js';
import { connectingToKafka, describeKafkaFailure } from '../kafka/failure.js';
import type { ConsumedRecord, GroupConsumer } from '../kafka/group-consumer.js';
import { createKafkajsGroupConsumer } from '../kafka/kafkajs-group-consumer.js';
import { requireBrokers } from '../kafka/brokers.js';
import { startAdminServer, type HttpServer } from '../runtime/http-server.js';
import { silentLogger, type Logger } from '../platform/logger.js';
import { createMetricsRegistry } from '../runtime/metrics.js';
import { watchConfiguredBusinesses } from '../runtime/businesses-reload.js';
import { once, type Role } from '../runtime/role.js';
import { CircuitBreaker, type CircuitState } from './circuit-breaker.js';
import { followConversations, type ConversationFollower } from './conversation-follower.js';
import { ConversationTable, type ConversationTableStats } from './conversation-table.js';
import { KeyedRunner, type RunnerStats } from './keyed-runner.js';
import { createSenderMetrics, type SenderMetrics } from './metrics.js';
import { fetchBytesPerPartition, PartitionConsumer } from './partition-consumer.js';
import { createProcessor, type Processor } from './processor.js';
import { createProviderClient, type ProviderClient } from './provider-client.js';
import { startTracing, TRACING_FLUSH_MS, type Tracer } from '../platform/tracing.js';
import { chooseProxy, type ProxyChoice } from '../platform/proxy.js';
import { RateLimiter } from './rate-limiter.js';
import { prepareJob, type Job } from './requests.js';
import { ResultPublisher } from './result-publisher.js';
import { Semaphore } from './semaphore.js';
import { randomUUID } from 'node:crypto';
import { hostname } from 'node:os';
import { ChangelogRestorer } from '../kafka/changelog-restore.js';
import { checkLocalStoreDir } from '../platform/local-store.js';
import { sleep } from '../platform/sleep.js';
import { WorkInterval } from '../platform/work-interval.js';
import { RequestLedger } from './request-ledger.js';

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
  /** The admin server (/healthz, /readyz, /metrics): default config.sender.adminHost/adminPort; false = none. */
  admin?: false | { host?: string; port?: number };
  /** How often progress is committed (default 200 ms). */
  commitIntervalMs?: number;
  /** Called when the Kafka client gave up for good (the process should drain and exit non-zero). */
  onFatal?: (error: Error) => void;
  /** Where the OTEL_* variables are read (src/platform/README.md, "Tracing"); default process.env. */
  tracingEnv?: Record<string, string | undefined>;
  /** Where HTTPS_PROXY, HTTP_PROXY, ALL_PROXY and NO_PROXY are read (README "Egress proxy"); default process.env. */
  proxyEnv?: Record<string, string | undefined>;
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

/**
 * What the start prepared before the sender's parts are built: its configuration checked, the topics ready, results
 * publishable.
 */
interface Prepared {
  options: StartSenderOptions;
  logger: Logger;
  apiKeys: Map<string, string>;
  providerUrl: string;
  /** The egress proxy of provider calls, or none (and why). */
  proxy: ProxyChoice;
  registry: Registry;
  kafka: KafkaPort;
  publisher: ResultPublisher;
  dlqMaxBytes: number;
  /** Partitions of send-requests, which the ledger shares. */
  partitions: number;
  tracer: Tracer;
}

/**
 * A running sender (built by `Sender.start`, or `startSender`): its parts, its start-up steps,
 * the handover of each record from the partition consumer to the runner, the reload of the
 * businesses, and its drain.
 */
export class Sender implements Role {
  /** Resolves once the member joined the group for the first time. */
  readonly ready: Promise<void>;
  readonly metrics: Registry;
  private readonly options: StartSenderOptions;
  private readonly config: Config;
  private readonly settings: Config['sender'];
  private readonly logger: Logger;
  private readonly kafka: KafkaPort;
  private readonly apiKeys: Map<string, string>;
  /** The businesses whose conversation windows are kept; replaced with the API keys by a reload. */
  private readonly liveBusinesses: Set<string>;
  private readonly publisher: ResultPublisher;
  private readonly tracer: Tracer;
  private readonly client: ProviderClient;
  private readonly limiter: RateLimiter;
  private readonly circuits: CircuitBreaker;
  /** The conversation window guard's table (README "Conversation window"), when the guard is on. */
  private readonly table: ConversationTable | undefined;
  private readonly senderMetrics: SenderMetrics;
  private readonly callSlots: Semaphore;
  private readonly processor: Processor;
  /** The durable memory of the requests of the owned partitions (README "Sent once"). */
  private readonly ledger: RequestLedger;
  /** Ledger restores in progress, per partition: aborted when the partition moves away. */
  private readonly ledgerRestores = new Map<number, AbortController>();
  private readonly ledgerUpkeep: WorkInterval;
  private readonly runner: KeyedRunner<Job>;
  private readonly member: PartitionConsumer<Job>;
  private businessesWatch: BusinessesWatch | undefined;
  private guard: ConversationGuard | undefined;
  private admin: HttpServer | undefined;
  private readonly drainOnce = once(() => this.stop());

  /**
   * Checks the configuration (CONFIG_INVALID), prepares the topics and connects the publisher
   * (KAFKA_UNAVAILABLE), builds the parts, then serves: health, the conversation table
   * complete (guard on), a member of the group.
   */
  static async start(options: StartSenderOptions): Promise<Sender> {
    const { config } = options;
    const logger = (options.logger ?? silentLogger).child({ component: 'sender' });
    const apiKeys = senderApiKeys(config);
    if (!config.provider.url)
      throw new MsgbridgeError(
        'CONFIG_INVALID',
        'invalid configuration:\n  - provider.url: the sender needs the provider base URL (MSGBRIDGE_PROVIDER_URL)',
      );
    const proxy = providerProxy(config.provider.url, config.provider.proxy, options.proxyEnv ?? process.env);
    const brokers = options.brokers ?? config.kafka.brokers;
    requireBrokers(brokers);
    const registry = options.registry ?? createMetricsRegistry('sender');
    const tracer = await startTracing({ role: 'sender', env: options.tracingEnv, logger });
    try {
      return await Sender.startWith(options, { logger, apiKeys, brokers, registry, tracer, proxy });
    } catch (err) {
      await tracer.shutdown(TRACING_FLUSH_MS);
      throw err;
    }
  }

  private static async startWith(
    options: StartSenderOptions,
    {
      logger,
      apiKeys,
      brokers,
      registry,
      tracer,
      proxy,
    }: {
      logger: Logger;
      apiKeys: Map<string, string>;
      brokers: string[];
      registry: Registry;
      tracer: Tracer;
      proxy: ProxyChoice;
    },
  ): Promise<Sender> {
    const { config } = options;
    checkLocalStoreDir(config.sender.stateDir, 'sender.stateDir', 'MSGBRIDGE_SENDER_STATE_DIR', 'the sender');
    const kafka = createKafka(config.kafka, { logger, brokers });
    const { dlqMaxBytes, partitions, minInsyncReplicas } = await connectingToKafka(brokers, () =>
      prepareTopics(kafka, config, logger),
    );
    const topics = config.kafka.topics;
    const publisher = new ResultPublisher({
      createProducer: await createProducerFactory(config.kafka, { kafka, brokers, logger }),
      topics: [topics.sendResults, topics.sendLedger, topics.sendRequestsDlq],
      publishTimeoutMs: Math.min(config.kafka.requestTimeoutMs, PUBLISH_TIMEOUT_MS),
      minInsyncReplicas,
      // Each record belongs to a request in the runner's window: a request has at most three at a time.
      maxRecords: 4 * config.sender.maxBufferedRequests + 1000,
      observer: publisherLog(logger),
    });
    await connectingToKafka(brokers, () => publisher.start());

    const sender = new Sender({
      options,
      logger,
      apiKeys,
      providerUrl: config.provider.url!,
      proxy,
      registry,
      kafka,
      publisher,
      dlqMaxBytes,
      partitions,
      tracer,
    });
    sender.followBusinesses();
    sender.startGuard();
    await sender.serveAdmin();
    await sender.awaitConversationTable();
    await sender.joinGroup();
    return sender;
  }

  private constructor(prepared: Prepared) {
    const { options, logger, apiKeys, registry, publisher } = prepared;
    const config = options.config;
    const s = config.sender;
    this.options = options;
    this.config = config;
    this.settings = s;
    this.logger = logger;
    this.kafka = prepared.kafka;
    this.apiKeys = apiKeys;
    this.liveBusinesses = new Set(apiKeys.keys());
    this.metrics = registry;
    this.publisher = publisher;
    this.tracer = prepared.tracer;

    this.client = providerClientFor(prepared, logger, this.tracer);
    this.limiter = new RateLimiter({ ratePerSecond: s.ratePerSecond });
    this.circuits = new CircuitBreaker({
      failureThreshold: s.circuitFailureThreshold,
      probeInitialMs: s.backoffInitialMs,
      probeMaxMs: s.circuitProbeMaxMs,
      onChange: (business, state, failures) => this.circuitChanged(business, state, failures),
    });

    // The conversation window guard (README "Conversation window"): the table is read in full
    // before any send request is consumed (awaitConversationTable), then followed.
    const table =
      s.conversationWindow === 'reject'
        ? new ConversationTable({ maxEntries: s.conversationTableMaxEntries })
        : undefined;
    this.table = table;

    // The gauges read the runner's stats at scrape time (the runner is created below).
    this.senderMetrics = createSenderMetrics(registry, {
      stats: () => this.runner.stats(),
      openCircuits: () => this.circuits.openKeys(),
      slowedRates: () => this.limiter.slowedDown(),
      configuredRate: s.ratePerSecond,
      businesses: [...apiKeys.keys()],
      publishing: () => publisher.publishable,
      ...(table ? { conversationTable: () => table.stats() } : {}),
    });
    this.callSlots = new Semaphore(s.concurrency);
    const owner = `${hostname()}/${process.pid}/${randomUUID().slice(0, 8)}`;
    const ledger = new RequestLedger({
      owner,
      changelogs: new ChangelogRestorer(this.kafka),
      topic: config.kafka.topics.sendLedger,
      partitions: prepared.partitions,
      stateDir: s.stateDir,
      groupId: s.groupId,
      windowMs: s.idempotencyWindowMs,
      maxEntries: s.completedRequestIdsMax,
      logger,
    });
    this.ledger = ledger;
    this.ledgerUpkeep = new WorkInterval(LEDGER_UPKEEP_MS, () => {
      void ledger.tick();
      return true;
    });
    this.processor = createProcessor({
      client: this.client,
      publish: (topic, record) => publisher.publish(topic, record),
      limiter: this.limiter,
      circuits: this.circuits,
      callSlots: this.callSlots,
      unrecordedSlots: new Semaphore(s.maxUnrecordedCalls),
      apiKeys,
      topics: { results: config.kafka.topics.sendResults, dlq: config.kafka.topics.sendRequestsDlq },
      policy: { budgetMs: s.retryBudgetMs, backoffInitialMs: s.backoffInitialMs, backoffMaxMs: s.backoffMaxMs },
      retryMaybeSent: s.retryMaybeSent,
      dlqMaxBytes: prepared.dlqMaxBytes,
      ledger: {
        topic: config.kafka.topics.sendLedger,
        owner,
        // A call's deadline, then the time to publish its outcome (README "Sent once").
        graceMs: s.callTimeoutMs + LEDGER_PUBLISH_GRACE_MS,
        hold: (partition) => ledger.hold(partition),
        release: (partition) => ledger.release(partition),
        lookup: (partition, key) => ledger.lookup(partition, key),
        write: (partition, key, entry, publish) => ledger.write(partition, key, entry, publish),
        refresh: (partition, key, signal) => ledger.refresh(partition, key, signal),
      },
      metrics: this.senderMetrics,
      logger,
      tracing: { tracer: this.tracer, requestsTopic: config.kafka.topics.sendRequests, groupId: s.groupId },
      ...(table
        ? {
            conversations: {
              mode: s.conversationWindow,
              graceMs: s.conversationWindowGraceMs,
              lookup: (business: string, customer: string) => table.lookup(business, customer),
            },
          }
        : {}),
    });
    // Every buffered key may be waiting (for its circuit, a token): provider calls in flight are
    // bounded by the call slots above, so that one business's outage holds none of another's.
    this.runner = new KeyedRunner<Job>({
      concurrency: s.maxBufferedRequests,
      maxBuffered: s.maxBufferedRequests,
      work: (job, context) => this.processor.work(job, context),
      onCommitWorthwhile: () => void this.member.commitOnce(),
      onWorkError: (err, partition, offset) =>
        logger.error({ err, partition, offset }, 'processing a request failed unexpectedly; retrying it'),
    });

    const consumer: GroupConsumer = createKafkajsGroupConsumer(this.kafka, {
      groupId: s.groupId,
      topic: config.kafka.topics.sendRequests,
      sessionTimeoutMs: s.sessionTimeoutMs,
      heartbeatIntervalMs: s.heartbeatIntervalMs,
      // Every owned partition's batch in progress at once: they share the runner's window fairly.
      partitionsConsumedConcurrently: 64,
      maxBytesPerPartition: fetchBytesPerPartition(s.maxBufferedRequests),
      logger,
    });
    this.member = new PartitionConsumer<Job>({
      consumer,
      runner: this.runner,
      prepare: (record) => this.handOver(record),
      commitIntervalMs: options.commitIntervalMs ?? 200,
      logger,
      onCommit: (result, sentAt) => {
        this.senderMetrics.commit(result);
        if (result === 'ok') this.ledger.confirmOwnership(sentAt);
      },
      beforeFinalCommit: () => this.ledger.observeEnds(),
      onAssignment: () => this.senderMetrics.rebalance(),
      preparePartitions: (partitions) =>
        Promise.all(partitions.map((p) => this.restoreLedger(p))).then(() => undefined),
      releasePartitions: (partitions) => {
        for (const p of partitions) {
          this.ledgerRestores.get(p)?.abort();
          this.ledgerRestores.delete(p);
          this.ledger.revoke(p);
        }
      },
      // The calls in flight end and are recorded before another member can own their partitions.
      beforeRejoin: async () => {
        const settled = await this.processor.pauseCalls(s.callTimeoutMs + LEDGER_PUBLISH_GRACE_MS);
        if (!settled)
          logger.warn(
            { unsettled: this.processor.unsettledCalls },
            'rejoining the group with provider calls whose outcome is not yet recorded: their next owner waits for it',
          );
      },
      afterAssignment: () => this.processor.resumeCalls(),
      ...(options.onFatal ? { onFatal: options.onFatal } : {}),
    });
    this.ready = this.member.ready;
  }

  /** The sender serves no public HTTP. */
  readonly address = undefined;

  /** Base URL of the admin server (/healthz, /readyz, /metrics), when one runs. */
  get adminAddress(): string | undefined {
    return this.admin?.url;
  }

  isReady(): boolean {
    return this.member.isMember() && this.publisher.publishable && (this.table === undefined || this.table.isComplete);
  }

  /**
   * The runner's counts (`running` includes requests waiting for their circuit or a token), provider calls in flight,
   * remembered request ids, the conversation table (when the guard is on).
   */
  stats(): RunnerStats & {
    providerCalls: number;
    completedRequestIds: number;
    unsettledCalls: number;
    conversationTable?: ConversationTableStats;
  } {
    return {
      ...this.runner.stats(),
      providerCalls: this.callSlots.inUse,
      completedRequestIds: this.ledger.stats().entries,
      unsettledCalls: this.processor.unsettledCalls,
      ...(this.table ? { conversationTable: this.table.stats() } : {}),
    };
  }

  /**
   * Partition p's request ledger, restored before its requests are worked; retried with backoff
   * while Kafka cannot be read, until it works or the partition moves away.
   */
  private async restoreLedger(partition: number): Promise<void> {
    this.ledgerRestores.get(partition)?.abort();
    const abort = new AbortController();
    this.ledgerRestores.set(partition, abort);
    this.ledgerUpkeep.start();
    for (let attempt = 1; !abort.signal.aborted; attempt++) {
      try {
        await this.ledger.assign(partition, abort.signal);
        break;
      } catch (error) {
        if (abort.signal.aborted) break;
        const delayMs = Math.min(10_000, 250 * 2 ** Math.min(attempt, 6));
        this.logger.warn(
          { partition, err: errorMessage(error), retryInMs: delayMs },
          'restoring the request ledger failed: the partition waits for it',
        );
        await sleep(delayMs, abort.signal);
      }
    }
    if (this.ledgerRestores.get(partition) === abort) this.ledgerRestores.delete(partition);
  }

  /**
   * Stops taking requests, lets the provider calls in progress finish and their results be
   * published (within `sender.drainGraceMs`), commits, leaves the group and disconnects.
   * Resolves true when everything in progress finished in time. Idempotent.
   */
  drain(): Promise<boolean> {
    return this.drainOnce();
  }

  // ---- the start ----

  /**
   * The live businesses file (src/config/businesses-file.ts), followed from the start; each
   * valid list is applied by reloadBusinesses.
   */
  private followBusinesses(): void {
    this.businessesWatch = watchConfiguredBusinesses({
      config: this.config,
      registry: this.metrics,
      logger: this.logger,
      apply: (businesses) => this.reloadBusinesses(businesses),
    });
  }

  /** With the guard on: the conversation table starts being read, then followed. */
  private startGuard(): void {
    const table = this.table;
    if (!table) return;
    this.guard = startConversationGuard({
      kafka: this.kafka,
      config: this.config,
      table,
      businesses: this.liveBusinesses,
      logger: this.logger,
      onSkipped: () => this.senderMetrics.conversationRecordSkipped(),
      onFatal: this.options.onFatal,
    });
  }

  private async serveAdmin(): Promise<void> {
    const admin = this.options.admin;
    if (admin === false) return;
    this.admin = await startAdminServer({
      host: admin?.host ?? this.settings.adminHost,
      port: admin?.port ?? this.settings.adminPort,
      registry: this.metrics,
      logger: this.logger,
      notReadyReason: () => this.notReadyReason(),
      what: "the sender's admin port (sender.adminPort)",
    }).catch((err: unknown) => this.abortStart(err));
    this.logger.info({ url: this.admin.url }, 'admin endpoints listening (/healthz, /readyz, /metrics)');
  }

  /**
   * The start-up wait: no send request is taken before the table is complete, so that a
   * customer never seen really means no open window.
   */
  private async awaitConversationTable(): Promise<void> {
    const follower = this.guard?.follower;
    if (!follower) return;
    const loaded = await follower.loaded.catch(async (err: unknown) => {
      await this.admin?.close();
      return this.abortStart(err);
    });
    this.logger.info(
      { conversations: this.config.kafka.topics.conversations, ...loaded },
      'conversation table complete (every open window known, followed from here): consuming send requests',
    );
  }

  private async joinGroup(): Promise<void> {
    await this.member.start().catch(async (err: unknown) => {
      await this.admin?.close();
      return this.abortStart(err);
    });
  }

  /** Whatever started so far is stopped again when the start fails half-way. */
  private async abortStart(err: unknown): Promise<never> {
    this.businessesWatch?.stop();
    await this.guard?.stop();
    await this.member.abort();
    this.ledgerUpkeep.stop();
    await this.ledger.close();
    await this.publisher.close().catch(() => undefined);
    await this.client.close().catch(() => undefined);
    throw err;
  }

  // ---- while it runs ----

  /** The partition consumer hands a record over: its job for the runner, and the key it is ordered by. */
  private handOver(record: ConsumedRecord): { job: Job; key: string } {
    const job = prepareJob(record, this.apiKeys, {
      receivedAt: Date.now(),
      producedAt: Number(record.timestamp),
      maxRequestAgeMs: this.settings.maxRequestAgeMs,
    });
    return { job, key: orderKey(record, job) };
  }

  /**
   * A valid new businesses list replaces the API keys and the businesses whose windows are
   * kept in place, in one synchronous step, so a request sees the old set or the new one. A
   * business without an API key refuses the list (senderApiKeys throws).
   */
  private reloadBusinesses(businesses: Config['businesses']): void {
    const next = senderApiKeys({ ...this.config, businesses });
    this.apiKeys.clear();
    this.liveBusinesses.clear();
    for (const [id, key] of next) {
      this.apiKeys.set(id, key);
      this.liveBusinesses.add(id);
    }
  }

  private circuitChanged(business: string, state: CircuitState, failures: number): void {
    this.senderMetrics.circuitChange(business, state);
    if (state === 'open')
      this.logger.warn(
        { businessId: business, consecutiveFailures: failures },
        'provider circuit open: the provider keeps failing for this business; its requests wait and one probe at a time is sent',
      );
    else
      this.logger.info(
        { businessId: business },
        'provider circuit closed: the provider answers again; sending resumes',
      );
  }

  /** What /readyz says while not ready: the conversation table, the group membership, then the publisher. */
  private notReadyReason(): string | undefined {
    const follower = this.guard?.follower;
    return (
      (this.table && follower && !this.table.isComplete
        ? `conversation table not ready: ${follower.status()}`
        : undefined) ??
      this.member.notReadyReason() ??
      (this.publisher.publishable
        ? undefined
        : "results cannot be published to Kafka now (a broker's producer is not connected or its partitions cannot take writes)")
    );
  }

  // ---- the drain ----

  /** The member bounds its own drain by sender.drainGraceMs; closing after it is bounded by the clients' timeouts. */
  private async stop(): Promise<boolean> {
    const started = Date.now();
    const finished = await this.member.drain(this.settings.drainGraceMs);
    this.ledgerUpkeep.stop();
    for (const restore of this.ledgerRestores.values()) restore.abort();
    // Everything finished is in Kafka and the last commit proved the ends observed before it: the
    // checkpoints move there, so a restart reads nothing.
    await this.ledger.advance();
    await this.ledger.close();
    this.businessesWatch?.stop();
    await this.guard?.stop();
    await this.publisher
      .close()
      .catch((err: unknown) => this.logger.warn({ err }, 'disconnecting the producer failed'));
    await this.client.close().catch(() => undefined);
    await this.admin?.close();
    // The spans of the last requests are exported before the process ends (bounded).
    await this.tracer.shutdown(TRACING_FLUSH_MS);
    this.logger.info({ finished, durationMs: Date.now() - started }, 'sender stopped');
    return finished;
  }
}

/** Starts a sender (see `Sender.start`). */
export function startSender(options: StartSenderOptions): Promise<Sender> {
  return Sender.start(options);
}

/** The conversation table's follower and sweeper, while the guard is on. */
interface ConversationGuard {
  follower: ConversationFollower;
  stop(): Promise<void>;
}

/** The conversation window guard's table, read and then followed (README "Conversation window"), and swept. */
function startConversationGuard(options: {
  kafka: KafkaPort;
  config: Config;
  table: ConversationTable;
  businesses: ReadonlySet<string>;
  logger: Logger;
  onSkipped(): void;
  onFatal: ((error: Error) => void) | undefined;
}): ConversationGuard {
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
/**
 * Creates the sender's topics when missing (`kafka.createTopics`), the request ledger with as
 * many partitions as send-requests (partition p of one is the memory of partition p of the
 * other), and answers the DLQ's record limit and the partition count.
 */
async function prepareTopics(
  kafka: KafkaPort,
  config: Config,
  logger: Logger,
): Promise<{ dlqMaxBytes: number; partitions: number; minInsyncReplicas: Map<string, number> }> {
  const topics = config.kafka.topics;
  const s = config.sender;
  return withAdmin(kafka, async (admin) => {
    const partitions =
      (await admin.partitionCounts([topics.sendRequests])).get(topics.sendRequests) ?? config.kafka.partitions;
    const base = {
      replicationFactor: config.kafka.replicationFactor,
      minInsyncReplicas: config.kafka.minInsyncReplicas,
    };
    // Kept a little longer than the window: a restore still finds an outcome written near its end.
    const ledgerRetentionMs = s.idempotencyWindowMs + 3_600_000;
    const written = await admin.prepareRoleTopics(
      {
        createTopics: config.kafka.createTopics,
        create: [
          ...[topics.sendRequests, topics.sendResults, topics.sendRequestsDlq].map((topic) => ({
            topic,
            partitions: topic === topics.sendRequests ? partitions : config.kafka.partitions,
            ...base,
            ...(topic === topics.sendRequestsDlq
              ? { configEntries: [{ name: 'retention.ms', value: String(config.kafka.dlqRetentionMs) }] }
              : {}),
          })),
          {
            topic: topics.sendLedger,
            partitions,
            ...base,
            configEntries: [
              { name: 'cleanup.policy', value: 'compact,delete' },
              { name: 'retention.ms', value: String(ledgerRetentionMs) },
              // The active segment is never compacted: roll it at a tenth of the retention, at most 6 h.
              { name: 'segment.ms', value: String(Math.min(6 * 3_600_000, Math.floor(ledgerRetentionMs / 10))) },
            ],
          },
        ],
        written: [topics.sendResults, topics.sendRequestsDlq, topics.sendLedger],
      },
      logger,
    );
    const ledgerPartitions = (await admin.partitionCounts([topics.sendLedger])).get(topics.sendLedger);
    if (ledgerPartitions !== undefined && ledgerPartitions !== partitions) {
      throw new MsgbridgeError(
        'CONFIG_INVALID',
        `topic ${topics.sendLedger} has ${ledgerPartitions} partitions but ${topics.sendRequests} has ${partitions}: the request ledger must be co-partitioned with the requests (recreate it with ${partitions})`,
      );
    }
    // The DLQ topic's limit less room for the batch framing; Kafka's default when it cannot be read.
    const limit = written.maxMessageBytes.get(topics.sendRequestsDlq);
    return {
      dlqMaxBytes: limit !== undefined && limit > 32 * 1024 ? limit - 16 * 1024 : 1_000_000,
      partitions,
      minInsyncReplicas: written.minInsyncReplicas,
    };
  });
}

/** One log line per change: a batch failing, a broker's producer lost or back, its partitions unwritable. */
function publisherLog(logger: Logger): PublisherObserver {
  // Lanes fail and succeed side by side: a failure line at most every 30 s, whatever the others do.
  let lastFailureLog = -Infinity;
  return {
    batch: (info) => {
      if (info.ok || performance.now() - lastFailureLog < 30_000) return;
      lastFailureLog = performance.now();
      logger.error(
        { err: describeKafkaFailure(info.error), records: info.events },
        'a produce of results and ledger records failed: published again with a new producer',
      );
    },
    connection: (connected, err, broker) => {
      const lane = broker === undefined || broker < 0 ? {} : { broker };
      if (err) logger.warn({ ...lane, err: describeKafkaFailure(err) }, 'Kafka producer not connected: retrying');
      else if (connected) logger.info(lane, 'Kafka producer connected');
    },
    writable: (broker, err) => {
      const lane = broker < 0 ? {} : { broker };
      if (err) logger.warn({ ...lane, err: describeKafkaFailure(err) }, 'Kafka answers but cannot take writes now');
      else logger.info(lane, 'Kafka takes writes again');
    },
  };
}

/** How often each owned partition's ledger checkpoint moves up and old entries are swept. */
const LEDGER_UPKEEP_MS = 10_000;
/**
 * A produce request unanswered this long is given up and its broker's producer replaced; its
 * records are published again (a frozen broker holds its own partitions' records for this long).
 */
const PUBLISH_TIMEOUT_MS = 10_000;
/** After a call's deadline, how long its outcome may take to reach the ledger (README "Sent once"). */
const LEDGER_PUBLISH_GRACE_MS = 5_000;

/**
 * The egress proxy for the provider's origin (README "Egress proxy"): CONFIG_INVALID naming the setting when one cannot
 * be read.
 */
export function providerProxy(
  providerUrl: string,
  configured: string | null,
  env: Record<string, string | undefined>,
): ProxyChoice {
  const url = new URL(providerUrl);
  const protocol = url.protocol === 'https:' ? 'https:' : 'http:';
  const port = url.port !== '' ? Number(url.port) : protocol === 'https:' ? 443 : 80;
  return chooseProxy({ protocol, host: url.hostname.replace(/^\[(.*)\]$/, '$1'), port }, configured, env);
}

/** The provider's HTTP client, through the egress proxy when one applies (README "Egress proxy"). */
function providerClientFor(prepared: Prepared, logger: Logger, tracer: Prepared['tracer']): ProviderClient {
  const { config } = prepared.options;
  const s = config.sender;
  const { proxy } = prepared.proxy;
  if (proxy)
    logger.info({ proxy: proxy.display, reason: prepared.proxy.reason }, 'provider calls go through an HTTP proxy');
  else logger.debug({ reason: prepared.proxy.reason }, 'provider calls go direct, through no proxy');
  return createProviderClient({
    baseUrl: prepared.providerUrl,
    connections: config.provider.connections ?? s.concurrency,
    callTimeoutMs: s.callTimeoutMs,
    tracer,
    ...(proxy
      ? {
          proxy,
          onProxyChange: (working: boolean, detail: string) =>
            working
              ? logger.info({ proxy: proxy.display }, detail)
              : logger.error(
                  { proxy: proxy.display, err: detail },
                  'provider calls fail at the HTTP proxy: they wait and are retried under sender.retryBudgetMs, none is lost; check the proxy and provider.proxy or HTTPS_PROXY/HTTP_PROXY',
                ),
        }
      : {}),
  });
}
