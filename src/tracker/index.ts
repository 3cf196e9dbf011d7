import type { Admin, Kafka } from 'kafkajs';
import type { Registry } from 'prom-client';
import type { Config } from '../config/schema.js';
import { MsgbridgeError } from '../errors.js';
import { createKafka } from '../kafka/client.js';
import { connectingToKafka } from '../kafka/failure.js';
import { checkWrittenTopics, ensureTopics } from '../kafka/topics.js';
import { startHealthServer, type HealthServer } from '../observability/health-server.js';
import { silentLogger, type Logger } from '../observability/logger.js';
import { createMetricsRegistry } from '../observability/metrics.js';
import { readChangelog, readChangelogPartition } from './changelog-restore.js';
import { messageStateOf, type MessageState } from './message-state.js';
import { createTrackerMetrics } from './metrics.js';
import { findMessageState, findRequestState } from './query.js';
import { TrackerLogic, type Loaded, type TrackerTopics } from './tasks.js';
import { startTransactionalEngine, type TransactionalEngine } from './transactional-engine.js';

/**
 * The tracker role's composition root (src/tracker/README.md): one consumer group on
 * `send-results`, `delivery_status` and `messages`, exactly-once into the compacted topics
 * `message-state` and `conversations`, state rebuilt from them per task, queries over HTTP.
 */
export interface StartTrackerOptions {
  config: Config;
  brokers?: string[];
  logger?: Logger;
  registry?: Registry;
  /** Health, metrics and query server: default config.tracker.host/port; false = none. */
  health?: false | { host?: string; port?: number };
  onFatal?: (error: Error) => void;
}

export interface Tracker {
  /** Resolves once the member joined its group and every task it was given is restored. */
  readonly ready: Promise<void>;
  isReady(): boolean;
  readonly metrics: Registry;
  readonly url: string | undefined;
  /** The current state of a message (memory, else message-state); undefined when unknown. */
  message(messageId: string): Promise<MessageState | undefined>;
  request(requestId: string): Promise<MessageState | undefined>;
  /** Leaves the group after the transactions in flight, closes the server. Resolves true when it finished within tracker.drainGraceMs. */
  drain(): Promise<boolean>;
}

export function trackerTopics(config: Config): TrackerTopics {
  const t = config.kafka.topics;
  return { sendResults: t.sendResults, deliveryStatus: t.deliveryStatus, messages: t.messages, messageState: t.messageState, conversations: t.conversations };
}

const MAX_ID_LENGTH = 512;

export async function startTracker(options: StartTrackerOptions): Promise<Tracker> {
  const { config } = options;
  const logger = options.logger ?? silentLogger;
  const brokers = options.brokers ?? config.kafka.brokers;
  if (brokers.length === 0) throw new MsgbridgeError('CONFIG_INVALID', 'kafka.brokers: no Kafka brokers (set KAFKA_BROKERS)');
  const kafka = createKafka(config.kafka, { logger, brokers, clientId: `${config.kafka.clientId}-tracker` });
  const topics = trackerTopics(config);
  const partitions = await connectingToKafka(brokers, () => prepareTrackerTopics(kafka, config, topics, logger));

  const registry = options.registry ?? createMetricsRegistry('tracker');
  // Set once the engine started; the gauges may be read before (a shared registry).
  const started: { engine?: TransactionalEngine } = {};
  const lag = lagReader(kafka, config.tracker.groupId, [topics.sendResults, topics.deliveryStatus, topics.messages]);
  const metrics = createTrackerMetrics(registry, {
    engine: () => started.engine?.stats() ?? { transactions: 0, failedTransactions: 0, recordsIn: 0, recordsOut: 0, recordsSkipped: 0, fenced: 0, taskStarts: 0, lastTaskStartMs: 0 },
    ownedTasks: () => started.engine?.ownedTasks().length ?? 0,
    cached: () => logic.cachedCounts(),
    lag: () => lag.read(),
  });
  const logic = new TrackerLogic({
    topics,
    partitions,
    maxCachedMessages: config.tracker.maxCachedMessages,
    maxCachedConversations: config.tracker.maxCachedConversations,
    counters: metrics,
    onSkip: (reason, record, detail) => logger.warn({ reason, topic: record.topic, partition: record.partition, offset: record.offset, detail }, 'record skipped: it carries no event the tracker can apply'),
  });
  const readTimeoutMs = 120_000;

  const engine = await startTransactionalEngine({
    kafka,
    groupId: config.tracker.groupId,
    inputTopics: [topics.sendResults, topics.deliveryStatus, topics.messages],
    transactionalIdPrefix: config.tracker.transactionalIdPrefix,
    logger,
    maxBatchRecords: config.tracker.maxBatchRecords,
    transactionTimeoutMs: config.tracker.transactionTimeoutMs,
    sessionTimeoutMs: config.tracker.sessionTimeoutMs,
    heartbeatIntervalMs: config.tracker.heartbeatIntervalMs,
    // Every input partition of every task at once: a task's throughput is bounded by its
    // transaction round trips, so tasks must not wait for each other (one task's batches never overlap).
    partitionsConsumedConcurrently: 3 * partitions,
    onFatal: options.onFatal,
    async onTaskAssigned(task, { signal }) {
      const started = performance.now();
      logic.startTask(task);
      const restored = await readChangelogPartition({ kafka, topic: topics.messageState, partition: task, signal, timeoutMs: readTimeoutMs, onRecord: (r) => logic.restore(task, r) });
      const windows = await readChangelog({
        kafka,
        topic: topics.conversations,
        signal,
        timeoutMs: readTimeoutMs,
        filter: (r) => r.key !== null && logic.ownsConversation(task, r.key.toString()),
        onRecord: (r) => logic.restore(task, r),
      });
      const seconds = (performance.now() - started) / 1000;
      metrics.restore(seconds);
      logger.info({ task, messageStates: restored.delivered, conversations: windows.delivered, ms: Math.round(seconds * 1000) }, 'task restored from the compacted topics');
    },
    onTaskRevoked(task) {
      logic.dropTask(task);
    },
    async process(task, records) {
      const events = logic.decodeBatch(records);
      const reload = logic.needsReload(task, events);
      const loaded: Loaded = { messages: new Map(), conversations: new Map() };
      if (reload.messageIds.length > 0) {
        const wanted = new Set(reload.messageIds);
        await readChangelogPartition({ kafka, topic: topics.messageState, partition: task, timeoutMs: readTimeoutMs, filter: (r) => wanted.has(r.key?.toString() ?? ''), onRecord: (r) => logic.reloadInto(loaded, r) });
      }
      if (reload.conversationKeys.length > 0) {
        const wanted = new Set(reload.conversationKeys);
        await readChangelog({ kafka, topic: topics.conversations, timeoutMs: readTimeoutMs, filter: (r) => wanted.has(r.key?.toString() ?? ''), onRecord: (r) => logic.reloadInto(loaded, r) });
      }
      return logic.process(task, events, loaded);
    },
  });

  started.engine = engine;
  const query = { kafka, topic: topics.messageState, partitions, timeoutMs: config.tracker.queryTimeoutMs };
  const message = async (id: string) => {
    const state = logic.cachedMessage(id) ?? (await findMessageState(query, id));
    return state && messageStateOf(state);
  };
  const request = async (id: string) => {
    const state = logic.cachedRequest(id) ?? (await findRequestState(query, id));
    return state && messageStateOf(state);
  };

  let health: HealthServer | undefined;
  if (options.health !== false) {
    health = await startHealthServer({
      host: options.health?.host ?? config.tracker.host,
      port: options.health?.port ?? config.tracker.port,
      registry,
      logger,
      notReadyReason: () => (engine.isReady() ? undefined : 'restoring its tasks from the compacted topics, or not in its group'),
      route: async (path) => {
        const match = /^\/(messages|requests)\/([^/]+)$/.exec(path);
        if (!match) return undefined;
        let id: string;
        try {
          id = decodeURIComponent(match[2]!);
        } catch {
          return { status: 400, body: { error: 'INVALID_ARGUMENT', message: 'the id is not valid percent-encoding' } };
        }
        if (id.length === 0 || id.length > MAX_ID_LENGTH) return { status: 400, body: { error: 'INVALID_ARGUMENT', message: `an id has 1 to ${MAX_ID_LENGTH} characters` } };
        const state = match[1] === 'messages' ? await message(id) : await request(id);
        return state ? { status: 200, body: state } : { status: 404, body: { error: 'NOT_FOUND', message: `no state for ${match[1] === 'messages' ? 'message' : 'request'} ${id}` } };
      },
    });
    logger.info({ url: health.url }, 'tracker health, metrics and queries listening');
  }

  let draining: Promise<boolean> | undefined;
  return {
    ready: engine.ready,
    isReady: () => engine.isReady(),
    metrics: registry,
    url: health?.url,
    message,
    request,
    drain() {
      draining ??= (async () => {
        let timer: NodeJS.Timeout | undefined;
        const inTime = await Promise.race([
          engine.stop().then(() => true),
          new Promise<boolean>((resolve) => {
            timer = setTimeout(() => resolve(false), config.tracker.drainGraceMs);
          }),
        ]);
        clearTimeout(timer);
        await lag.close();
        await health?.close();
        return inTime;
      })();
      return draining;
    },
  };
}

/**
 * Creates the inputs and the compacted outputs when missing (`kafka.createTopics`), checks the
 * outputs can keep acks=all; answers the inputs' partition count, which the outputs must share
 * (message-state is co-partitioned with them: task p writes partition p).
 */
async function prepareTrackerTopics(kafka: Kafka, config: Config, topics: TrackerTopics, logger: Logger): Promise<number> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const inputs = [topics.sendResults, topics.deliveryStatus, topics.messages];
    const existing = new Set(await admin.listTopics());
    const present = inputs.filter((t) => existing.has(t));
    const counts = present.length > 0 ? (await admin.fetchTopicMetadata({ topics: present })).topics.map((t) => t.partitions.length) : [];
    const partitions = counts[0] ?? config.kafka.partitions;
    if (config.kafka.createTopics) {
      const base = { replicationFactor: config.kafka.replicationFactor, minInsyncReplicas: config.kafka.minInsyncReplicas };
      await ensureTopics(
        admin,
        [
          ...inputs.map((topic) => ({ topic, partitions, ...base })),
          ...[topics.messageState, topics.conversations].map((topic) => ({ topic, partitions, ...base, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] })),
        ],
        logger,
      );
    }
    const { topics: outputs } = await admin.fetchTopicMetadata({ topics: [topics.messageState] }).catch(() => ({ topics: [] as { partitions: unknown[] }[] }));
    const outputPartitions = outputs[0]?.partitions.length;
    if (outputPartitions !== undefined && outputPartitions !== partitions) {
      throw new MsgbridgeError('CONFIG_INVALID', `topic ${topics.messageState} has ${outputPartitions} partitions but the tracker's inputs have ${partitions}: they must be co-partitioned (recreate it with ${partitions})`);
    }
    await checkWrittenTopics(admin, [topics.messageState, topics.conversations], logger);
    return partitions;
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

/** The group's lag per input topic, read at most every 5 s (scrapes can be frequent). */
function lagReader(kafka: Kafka, groupId: string, inputs: string[]): { read(): Promise<Map<string, number>>; close(): Promise<void> } {
  let admin: Admin | undefined;
  let last: { at: number; value: Map<string, number> } | undefined;
  return {
    async read() {
      if (last && Date.now() - last.at < 5000) return last.value;
      admin ??= kafka.admin();
      await admin.connect();
      const value = new Map<string, number>();
      for (const topic of inputs) {
        const [ends, committed] = await Promise.all([admin.fetchTopicOffsets(topic), admin.fetchOffsets({ groupId, topics: [topic] })]);
        const done = new Map((committed[0]?.partitions ?? []).map((p) => [p.partition, Number(p.offset)]));
        value.set(topic, ends.reduce((sum, p) => sum + Math.max(0, Number(p.offset) - Math.max(0, done.get(p.partition) ?? 0)), 0));
      }
      last = { at: Date.now(), value };
      return value;
    },
    async close() {
      await admin?.disconnect().catch(() => undefined);
    },
  };
}
