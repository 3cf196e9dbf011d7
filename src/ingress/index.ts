import type { Registry } from 'prom-client';
import type { BusinessesWatch } from '../config/businesses-file.js';
import type { BusinessConfig, Config } from '../config/schema.js';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { BatchingPublisher } from '../kafka/batching-publisher.js';
import { createKafka, type KafkaPort } from '../kafka/client.js';
import { withAdmin } from '../kafka/admin.js';
import type { ProducerFactory } from '../kafka/port.js';
import { createProducerFactory } from '../kafka/producer-factory.js';
import { connectingToKafka, describeKafkaFailure } from '../kafka/failure.js';
import { requireBrokers } from '../kafka/brokers.js';
import { silentLogger, type Logger } from '../platform/logger.js';
import { localUrl } from '../platform/net.js';
import { startTracing, TRACING_FLUSH_MS, type Tracer } from '../platform/tracing.js';
import { uwsInUse } from '../platform/uws.js';
import { createMetricsRegistry } from '../runtime/metrics.js';
import { startAdminServer, type HttpServer } from '../runtime/http-server.js';
import { createLiveWebhookHandler, rulesFromConfig } from './handle-webhook.js';
import { watchConfiguredBusinesses } from '../runtime/businesses-reload.js';
import { drainOnce, type Role } from '../runtime/role.js';
import { createIngressMetrics, type IngressMetrics } from './metrics.js';
import { startIngressServer, type IngressServer } from './server.js';

/** A body in progress younger than this is never closed to make room for another (ms). */
const RECEIVING_GRACE_MS = 1000;

export { createWebhookHandler, rulesFromConfig } from './handle-webhook.js';
export type { WebhookDecision, WebhookHandler, IngressRules } from './handle-webhook.js';

export interface StartIngressOptions {
  config: Config;
  logger?: Logger;
  /** Bootstrap servers; default config.kafka.brokers (the CLI passes obtainBrokers()). */
  brokers?: string[];
  /** Registry for the ingress metrics; default a new one with the process metrics. */
  registry?: Registry;
  /** Replaces the configured producer (tests); called per lane and again after every failure. */
  createProducer?: ProducerFactory;
  /**
   * Benchmarks only: acknowledge every event without writing it anywhere, to measure the
   * ceiling of the HTTP and verification path. Deliberately not a configuration setting.
   */
  unsafeDiscardRecords?: boolean;
  /** Set by the worker threads of startIngressWorkers (workers.ts) only: their admin port is the main thread's. */
  worker?: IngressWorkerHooks;
  /** The admin server (/healthz, /readyz, /metrics): default config.ingress.adminHost/adminPort; false = none. */
  admin?: false | { host?: string; port?: number };
  /** Where the OTEL_* variables are read (src/platform/README.md, "Tracing"); default process.env. */
  tracingEnv?: Record<string, string | undefined>;
}

/** What a worker thread of workers.ts adds to its ingress. */
export interface IngressWorkerHooks {
  /** The worker's label in the metrics ("1", "2"...). */
  id: string;
}

/** What a worker thread of workers.ts needs to control its ingress. */
export interface IngressControls {
  /** Reads the businesses file again (the main thread forwards SIGHUP: signals do not reach worker threads). */
  reloadBusinesses(): void;
  /** Closes the listening socket and every connection (before a worker thread ends). */
  closeAll(): void;
}

export type IngressState = 'running' | 'draining' | 'stopped';

export interface Ingress extends Role {
  readonly port: number;
  /** http://host:port, with 127.0.0.1 for a wildcard host. */
  readonly address: string;
  readonly state: IngressState;
  /**
   * Stops accepting (new webhooks 503, /readyz 503), answers every request already admitted
   * once its batch is acknowledged (or failed), flushes and disconnects the producer, closes
   * the listening socket and the admin port; true when that took less than ingress.drainGraceMs.
   */
  drain(): Promise<boolean>;
}

/** Every ingress topic must hold a whole webhook body and a whole batch in one record batch. */
export function ingressTopicMaxMessageBytes(config: Config): number {
  return Math.max(1_048_588, config.ingress.maxBodyBytes + 65_536, config.ingress.batchMaxBytes + 65_536);
}

/**
 * The ingress composition root: configuration → handler, publisher, metrics, server.
 * Resolves once topics exist, the producer is connected and the server listens.
 */
export function startIngress(options: StartIngressOptions): Promise<Ingress> {
  return startIngressWithControls(options);
}

/** startIngress, with what a worker thread needs (workers.ts). */
export async function startIngressWithControls(options: StartIngressOptions): Promise<Ingress & IngressControls> {
  const logger = options.logger ?? silentLogger;
  requireSigningSecrets(options.config, logger);
  const brokers = options.brokers ?? options.config.kafka.brokers;
  // A bad OTEL_* variable is a configuration error: said before Kafka is even tried.
  const tracer = await startTracing({ role: 'ingress', env: options.tracingEnv, logger });
  try {
    const kafka = await prepareKafka(options, brokers, logger);
    const ingress = new ThreadIngress(options, logger, brokers, kafka, tracer);
    await ingress.start();
    return ingress;
  } catch (err) {
    await tracer.shutdown(TRACING_FLUSH_MS);
    throw err;
  }
}

/** Refuses a configuration no webhook could pass (also before `msgbridge ingress` starts a broker or threads). */
export function assertIngressConfigUsable(config: Pick<Config, 'businesses'>): void {
  if (!config.businesses.some((b) => b.signingSecrets.length > 0)) {
    throw new MsgbridgeError(
      'CONFIG_INVALID',
      'the ingress needs at least one business with a webhook signing secret: set MSGBRIDGE_BUSINESS_ID and MSGBRIDGE_SIGNING_SECRET, or businesses[].signingSecrets in the configuration file',
    );
  }
}

/** Refuses a configuration no webhook could pass; warns about each business that cannot. */
function requireSigningSecrets(config: Config, logger: Logger): void {
  assertIngressConfigUsable(config);
  warnUnsigned(config.businesses, logger);
}

function warnUnsigned(businesses: readonly BusinessConfig[], logger: Logger): void {
  for (const b of businesses) {
    if (b.signingSecrets.length === 0)
      logger.warn({ business: b.id }, 'business has no signing secret: its webhooks will be refused (403)');
  }
}

/** The publisher's producers, and what the cluster says of the topics. */
interface KafkaSide {
  createProducer: ProducerFactory;
  /** Per topic, when the cluster says. */
  minInsyncReplicas: Map<string, number> | undefined;
}

/**
 * The producers to publish with: none at all for the benchmark ceiling, the caller's (tests), or
 * the configured client's once the topics exist on the configured Kafka.
 */
async function prepareKafka(options: StartIngressOptions, brokers: string[], logger: Logger): Promise<KafkaSide> {
  const { config } = options;
  if (options.unsafeDiscardRecords) {
    logger.warn('publishing disabled (benchmark ceiling): events are acknowledged without being written to Kafka');
    return {
      createProducer: () => ({ connect: async () => {}, send: async () => {}, disconnect: async () => {} }),
      minInsyncReplicas: undefined,
    };
  }
  if (options.createProducer) return { createProducer: options.createProducer, minInsyncReplicas: undefined };
  requireBrokers(brokers);
  const kafka = createKafka(config.kafka, { logger, brokers });
  const minInsyncReplicas = await connectingToKafka(brokers, () => prepareIngressTopics(kafka, config, logger));
  return {
    createProducer: await createProducerFactory(config.kafka, { kafka, brokers, logger }),
    minInsyncReplicas,
  };
}

/**
 * One thread's whole ingress (the main thread's, or a worker's of workers.ts): its metrics,
 * publisher and producers, live webhook rules and uWS server. Built by startIngressWithControls,
 * which awaits start() before handing it out.
 */
class ThreadIngress implements Ingress, IngressControls {
  readonly ready = Promise.resolve();
  readonly metrics: Registry;
  readonly drain: () => Promise<boolean>;
  private currentState: IngressState = 'running';
  private readonly config: Config;
  private readonly ingressMetrics: IngressMetrics;
  private readonly publisher: BatchingPublisher;
  private readonly handler: ReturnType<typeof createLiveWebhookHandler>;
  private businessesWatch: BusinessesWatch | undefined;
  /** Set by start(), once listening. */
  private server: IngressServer | undefined;
  private admin: HttpServer | undefined;

  constructor(
    private readonly options: StartIngressOptions,
    private readonly logger: Logger,
    private readonly brokers: string[],
    kafka: KafkaSide,
    private readonly tracer: Tracer,
  ) {
    this.config = options.config;
    this.metrics = options.registry ?? createMetricsRegistry('ingress');
    // The gauges read the publisher at scrape time, after it exists.
    this.ingressMetrics = createIngressMetrics(
      this.metrics,
      { stats: () => this.publisher.stats(), ready: () => this.isReady() },
      { worker: options.worker?.id },
    );
    this.publisher = createIngressPublisher(this.config, kafka, this.ingressMetrics, logger);
    this.handler = createLiveWebhookHandler(rulesFromConfig(this.config));
    this.drain = drainOnce(this.config.ingress.drainGraceMs, () => this.drainSteps());
  }

  get port(): number {
    return this.listening.port;
  }

  get address(): string {
    return localUrl(this.config.ingress.host, this.listening.port);
  }

  get adminAddress(): string | undefined {
    return this.admin?.url;
  }

  get state(): IngressState {
    return this.currentState;
  }

  isReady(): boolean {
    return this.notReadyReason() === undefined;
  }

  /** What /readyz says while not ready. */
  private notReadyReason(): string | undefined {
    if (this.currentState !== 'running') return `${this.currentState}: not taking new webhooks`;
    if (!this.publisher.ready)
      return 'Kafka cannot take its writes now (a producer not connected, or a partition below min.insync.replicas)';
    if (this.server && !this.server.hasRoom())
      return 'its queue is full (ingress.queueMaxEvents or queueMaxBytes): Kafka is slower than the webhooks';
    return undefined;
  }

  /** Connects the producer, follows the businesses file, listens; undoes the last two when listening fails. */
  async start(): Promise<void> {
    await connectingToKafka(this.brokers, () => this.publisher.start());
    this.businessesWatch = watchConfiguredBusinesses({
      config: this.config,
      registry: this.metrics,
      logger: this.logger,
      apply: (businesses) => this.applyBusinesses(businesses),
    });
    try {
      this.server = await this.listen();
      this.admin = await this.serveAdmin();
    } catch (err) {
      this.server?.closeAll();
      this.businessesWatch?.stop();
      await this.publisher.drain();
      throw err;
    }
    const { config } = this;
    this.logger.info(
      {
        url: this.address,
        admin: this.admin?.url,
        businesses: config.businesses.map((b) => b.id),
        topics: config.kafka.topics,
        kafkaClient: config.kafka.client,
        uws: uwsInUse()?.binary ?? 'JavaScript fallback',
      },
      'ingress listening',
    );
  }

  reloadBusinesses(): void {
    this.businessesWatch?.reload();
  }

  closeAll(): void {
    this.listening.closeAll();
  }

  /** A new list from the businesses file: the rules swap in one step. */
  private applyBusinesses(businesses: BusinessConfig[]): void {
    warnUnsigned(businesses, this.logger);
    this.handler.replace(rulesFromConfig({ ...this.config, businesses }));
  }

  /** /healthz, /readyz and /metrics on the admin port; none in a worker thread (the main thread's speaks for all). */
  private async serveAdmin(): Promise<HttpServer | undefined> {
    const { admin, worker } = this.options;
    if (admin === false || worker) return undefined;
    return startAdminServer({
      host: admin?.host ?? this.config.ingress.adminHost,
      port: admin?.port ?? this.config.ingress.adminPort,
      registry: this.metrics,
      notReadyReason: () => this.notReadyReason(),
      logger: this.logger,
      what: "the ingress's admin port (ingress.adminPort)",
    });
  }

  private listen(): Promise<IngressServer> {
    const settings = this.config.ingress;
    return startIngressServer({
      host: settings.host,
      port: settings.port,
      handler: this.handler,
      publisher: this.publisher,
      metrics: this.ingressMetrics,
      logger: this.logger,
      retryAfterSeconds: settings.retryAfterSeconds,
      bodyTimeoutMs: settings.idleTimeoutSeconds * 1000,
      memoryBudgetBytes: settings.queueMaxBytes,
      receiving: {
        maxTotal: settings.maxReceivingRequests,
        maxPerAddress: settings.maxReceivingPerAddress,
        graceMs: RECEIVING_GRACE_MS,
      },
      chunkedBodies: settings.chunkedBodies,
      tracer: this.tracer,
    });
  }

  /** What drain() runs once, within ingress.drainGraceMs. */
  private async drainSteps(): Promise<void> {
    const server = this.listening;
    const graceMs = this.config.ingress.drainGraceMs;
    this.currentState = 'draining';
    this.businessesWatch?.stop();
    // Half the grace period for bodies still arriving; the rest for their batches, the
    // producer's flush and disconnect.
    server.stopAccepting(Math.floor(graceMs / 2));
    await server.whenIdle();
    await this.publisher.drain();
    server.close();
    await this.admin?.close();
    // The spans of the last answers are exported before the process ends (bounded).
    await this.tracer.shutdown(TRACING_FLUSH_MS);
    this.currentState = 'stopped';
  }

  private get listening(): IngressServer {
    if (!this.server) throw new Error('the ingress is not listening yet');
    return this.server;
  }
}

/** The publisher, its batches and connections counted in the metrics and logged. */
function createIngressPublisher(
  config: Config,
  kafka: KafkaSide,
  metrics: IngressMetrics,
  logger: Logger,
): BatchingPublisher {
  const settings = config.ingress;
  return new BatchingPublisher({
    createProducer: kafka.createProducer,
    batchMaxEvents: settings.batchMaxEvents,
    batchMaxBytes: settings.batchMaxBytes,
    queueMaxEvents: settings.queueMaxEvents,
    queueMaxBytes: settings.queueMaxBytes,
    publishTimeoutMs: settings.publishTimeoutMs,
    idleProbeIntervalMs: settings.kafkaProbeIntervalMs,
    probeTopics: ingressTopics(config),
    probeTimeoutMs: Math.min(config.kafka.requestTimeoutMs, settings.publishTimeoutMs),
    minInsyncReplicas: kafka.minInsyncReplicas,
    observer: {
      batch: (info) => {
        metrics.batch(info);
        if (!info.ok)
          logger.error(
            { err: describeKafkaFailure(info.error), events: info.events },
            'produce request failed: events answered 503, reconnecting',
          );
      },
      connection: (connected, err, broker) => {
        if (err) metrics.producerFailure();
        const lane = broker === undefined || broker < 0 ? {} : { broker };
        if (err)
          logger.warn(
            { ...lane, err: describeKafkaFailure(err) },
            'Kafka producer not connected: events for the partitions it writes are answered 503',
          );
        else if (connected) logger.info(lane, 'Kafka producer connected');
      },
      writable: (broker, err) => {
        const lane = broker < 0 ? {} : { broker };
        if (err)
          logger.warn(
            { ...lane, err: describeKafkaFailure(err) },
            'Kafka answers but cannot take writes now: not ready until it can',
          );
        else logger.info(lane, 'Kafka takes writes again');
      },
    },
  });
}

/** The topics the ingress writes to. */
function ingressTopics(config: Config): string[] {
  const { topics } = config.kafka;
  return [topics.messages, topics.deliveryStatus, topics.webhooksDlq];
}

/** Creates or checks the ingress topics; answers their min.insync.replicas (when the cluster says). */
async function prepareIngressTopics(kafka: KafkaPort, config: Config, logger: Logger): Promise<Map<string, number>> {
  const { partitions, replicationFactor } = config.kafka;
  const maxMessageBytes = String(ingressTopicMaxMessageBytes(config));
  const names = ingressTopics(config);
  try {
    const written = await withAdmin(kafka, (admin) =>
      admin.prepareRoleTopics(
        {
          createTopics: config.kafka.createTopics,
          create: names.map((topic) => ({
            topic,
            partitions,
            replicationFactor,
            minInsyncReplicas: config.kafka.minInsyncReplicas,
            configEntries: [
              { name: 'max.message.bytes', value: maxMessageBytes },
              ...(topic === config.kafka.topics.webhooksDlq
                ? [{ name: 'retention.ms', value: String(config.kafka.dlqRetentionMs) }]
                : []),
            ],
          })),
          written: names,
        },
        logger,
      ),
    );
    // Topics made by an operator keep their settings; say so when one cannot take a full body.
    for (const [name, value] of written.maxMessageBytes) {
      if (value < config.ingress.maxBodyBytes + 4096) {
        logger.warn(
          { topic: name, maxMessageBytes: value, maxBodyBytes: config.ingress.maxBodyBytes },
          'topic max.message.bytes is below ingress.maxBodyBytes: the largest webhooks cannot be written (503 until fixed)',
        );
      }
    }
    return written.minInsyncReplicas;
  } catch (err) {
    if (err instanceof MsgbridgeError) throw err;
    throw new MsgbridgeError(
      'KAFKA_UNAVAILABLE',
      `cannot prepare the ingress topics ${names.join(', ')}: ${errorMessage(err)}`,
      { cause: err },
    );
  }
}
