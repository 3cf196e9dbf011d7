import type { Registry } from 'prom-client';
import type { Config } from '../config/schema.js';
import { MsgbridgeError } from '../platform/errors.js';
import { BatchingPublisher } from '../kafka/batching-publisher.js';
import { createKafka } from '../kafka/client.js';
import { createKafkajsProducer } from '../kafka/kafkajs-producer.js';
import { preferBrokers, type ProducerFactory } from '../kafka/port.js';
import { connectingToKafka, describeKafkaFailure } from '../kafka/failure.js';
import { requireBrokers } from '../kafka/brokers.js';
import { prepareRoleTopics } from '../kafka/topics.js';
import { silentLogger, type Logger } from '../platform/logger.js';
import { createMetricsRegistry } from '../runtime/metrics.js';
import { createLiveWebhookHandler, rulesFromConfig } from './handle-webhook.js';
import { watchConfiguredBusinesses } from '../runtime/businesses-reload.js';
import { drainOnce, type Role } from '../runtime/role.js';
import { createIngressMetrics } from './metrics.js';
import { startIngressServer, type IngressServer } from './server.js';

/** A body in progress younger than this is never closed to make room for another (ms). */
const RECEIVING_GRACE_MS = 1000;
import { localUrl } from '../platform/net.js';

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
  /** Set by the worker threads of startIngressWorkers (workers.ts) only. */
  worker?: IngressWorkerHooks;
}

/** What a worker thread of workers.ts adds to its ingress. */
export interface IngressWorkerHooks {
  /** The worker's label in the metrics ("1", "2"...). */
  id: string;
  /** What /metrics answers: every worker's metrics, aggregated by the main thread. */
  metricsText: () => Promise<{ contentType: string; body: string }>;
  /** /readyz is 200 only when the other workers are ready too. */
  othersReady: () => boolean;
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
   * the listening socket; true when that took less than ingress.drainGraceMs.
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
  const { config } = options;
  const logger = options.logger ?? silentLogger;
  const ingress = config.ingress;

  if (!config.businesses.some((b) => b.signingSecrets.length > 0)) {
    throw new MsgbridgeError(
      'CONFIG_INVALID',
      'the ingress needs at least one business with a webhook signing secret: set MSGBRIDGE_BUSINESS_ID and MSGBRIDGE_SIGNING_SECRET, or businesses[].signingSecrets in the configuration file',
    );
  }
  for (const b of config.businesses) {
    if (b.signingSecrets.length === 0) logger.warn({ business: b.id }, 'business has no signing secret: its webhooks will be refused (403)');
  }

  let createProducer = options.createProducer;
  let minInsyncReplicas: Map<string, number> | undefined;
  const brokers = options.brokers ?? config.kafka.brokers;
  if (options.unsafeDiscardRecords) {
    logger.warn('publishing disabled (benchmark ceiling): events are acknowledged without being written to Kafka');
    createProducer = () => ({ connect: async () => {}, send: async () => {}, disconnect: async () => {} });
  }
  if (!createProducer) {
    requireBrokers(brokers);
    const kafka = createKafka(config.kafka, { logger, brokers });
    minInsyncReplicas = await connectingToKafka(brokers, () => prepareIngressTopics(kafka, config, logger));
    if (config.kafka.client === 'platformatic') {
      // Loaded only when chosen: importing @platformatic/kafka costs about 30 MiB of memory.
      const { createPlatformaticProducer } = await import('../kafka/platformatic-producer.js');
      createProducer = (first) => createPlatformaticProducer(config.kafka, { brokers: preferBrokers(brokers, first), timeoutMs: config.kafka.requestTimeoutMs });
    } else {
      createProducer = (first) =>
        createKafkajsProducer(first?.length ? createKafka(config.kafka, { logger, brokers: preferBrokers(brokers, first) }) : kafka, { idempotent: true, timeoutMs: config.kafka.requestTimeoutMs });
    }
  }

  const registry = options.registry ?? createMetricsRegistry('ingress');
  // The gauges read the publisher at scrape time, after it exists.
  const isReady = () => state === 'running' && publisher.ready && (server?.hasRoom() ?? true);
  const metrics = createIngressMetrics(registry, { stats: () => publisher.stats(), ready: isReady }, { worker: options.worker?.id });
  const publisher = new BatchingPublisher({
    createProducer,
    batchMaxEvents: ingress.batchMaxEvents,
    batchMaxBytes: ingress.batchMaxBytes,
    queueMaxEvents: ingress.queueMaxEvents,
    queueMaxBytes: ingress.queueMaxBytes,
    publishTimeoutMs: ingress.publishTimeoutMs,
    idleProbeIntervalMs: ingress.kafkaProbeIntervalMs,
    probeTopics: ingressTopics(config),
    probeTimeoutMs: Math.min(config.kafka.requestTimeoutMs, ingress.publishTimeoutMs),
    minInsyncReplicas,
    observer: {
      batch: (info) => {
        metrics.batch(info);
        if (!info.ok) logger.error({ err: describeKafkaFailure(info.error), events: info.events }, 'produce request failed: events answered 503, reconnecting');
      },
      connection: (connected, err, broker) => {
        if (err) metrics.producerFailure();
        const lane = broker === undefined || broker < 0 ? {} : { broker };
        if (err) logger.warn({ ...lane, err: describeKafkaFailure(err) }, 'Kafka producer not connected: events for the partitions it writes are answered 503');
        else if (connected) logger.info(lane, 'Kafka producer connected');
      },
      writable: (broker, err) => {
        const lane = broker < 0 ? {} : { broker };
        if (err) logger.warn({ ...lane, err: describeKafkaFailure(err) }, 'Kafka answers but cannot take writes now: not ready until it can');
        else logger.info(lane, 'Kafka takes writes again');
      },
    },
  });
  await connectingToKafka(brokers, () => publisher.start());

  let state: IngressState = 'running';
  let server: IngressServer | undefined;
  const handler = createLiveWebhookHandler(rulesFromConfig(config));
  const businessesWatch = watchConfiguredBusinesses({
    config,
    registry,
    logger,
    apply: (businesses) => {
      for (const b of businesses) {
        if (b.signingSecrets.length === 0) logger.warn({ business: b.id }, 'business has no signing secret: its webhooks will be refused (403)');
      }
      handler.replace(rulesFromConfig({ ...config, businesses }));
    },
  });
  try {
    server = await startIngressServer({
      host: ingress.host,
      port: ingress.port,
      handler,
      publisher,
      metrics,
      metricsText: options.worker?.metricsText ?? (async () => ({ contentType: registry.contentType, body: await registry.metrics() })),
      logger,
      retryAfterSeconds: ingress.retryAfterSeconds,
      bodyTimeoutMs: ingress.idleTimeoutSeconds * 1000,
      memoryBudgetBytes: ingress.queueMaxBytes,
      receiving: { maxTotal: ingress.maxReceivingRequests, maxPerAddress: ingress.maxReceivingPerAddress, graceMs: RECEIVING_GRACE_MS },
      chunkedBodies: ingress.chunkedBodies,
      othersReady: options.worker?.othersReady,
    });
  } catch (err) {
    businessesWatch?.stop();
    await publisher.drain();
    throw err;
  }
  const url = localUrl(ingress.host, server.port);
  logger.info({ url, businesses: config.businesses.map((b) => b.id), topics: config.kafka.topics, kafkaClient: config.kafka.client }, 'ingress listening');

  const drain = drainOnce(ingress.drainGraceMs, async () => {
    state = 'draining';
    businessesWatch?.stop();
    // Half the grace period for bodies still arriving; the rest for their batches, the
    // producer's flush and disconnect.
    server.stopAccepting(Math.floor(ingress.drainGraceMs / 2));
    await server.whenIdle();
    await publisher.drain();
    server.close();
    state = 'stopped';
  });

  return {
    port: server.port,
    address: url,
    ready: Promise.resolve(),
    isReady,
    get state() {
      return state;
    },
    metrics: registry,
    drain,
    reloadBusinesses: () => businessesWatch?.reload(),
    closeAll: () => server.closeAll(),
  };
}

/** The topics the ingress writes to. */
function ingressTopics(config: Config): string[] {
  const { topics } = config.kafka;
  return [topics.messages, topics.deliveryStatus, topics.webhooksDlq];
}

/** Creates or checks the ingress topics; answers their min.insync.replicas (when the cluster says). */
async function prepareIngressTopics(kafka: ReturnType<typeof createKafka>, config: Config, logger: Logger): Promise<Map<string, number>> {
  const { partitions, replicationFactor } = config.kafka;
  const maxMessageBytes = String(ingressTopicMaxMessageBytes(config));
  const names = ingressTopics(config);
  const admin = kafka.admin();
  try {
    await admin.connect();
    const written = await prepareRoleTopics(
      admin,
      {
        createTopics: config.kafka.createTopics,
        create: names.map((topic) => ({
          topic,
          partitions,
          replicationFactor,
          minInsyncReplicas: config.kafka.minInsyncReplicas,
          configEntries: [
            { name: 'max.message.bytes', value: maxMessageBytes },
            ...(topic === config.kafka.topics.webhooksDlq ? [{ name: 'retention.ms', value: String(config.kafka.dlqRetentionMs) }] : []),
          ],
        })),
        written: names,
      },
      logger,
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
    throw new MsgbridgeError('KAFKA_UNAVAILABLE', `cannot prepare the ingress topics ${names.join(', ')}: ${(err as Error).message}`, { cause: err });
  } finally {
    await admin.disconnect().catch(() => {});
  }
}
