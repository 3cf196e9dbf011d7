import { accessSync, constants, mkdirSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type { Registry } from 'prom-client';
import type { Config } from '../config/schema.js';
import { MsgbridgeError } from '../platform/errors.js';
import { createKafka, type KafkaClient } from '../kafka/client.js';
import { connectingToKafka } from '../kafka/failure.js';
import { requireBrokers } from '../kafka/brokers.js';
import { lagReader } from '../kafka/group-lag.js';
import { partitionCounts, prepareRoleTopics, topicSettings, type KafkaAdmin } from '../kafka/topics.js';
import { startHealthServer, type HealthServer } from '../runtime/health-server.js';
import { silentLogger, type Logger } from '../platform/logger.js';
import { createMetricsRegistry } from '../runtime/metrics.js';
import { localUrl } from '../platform/net.js';
import { once, withinGrace, type Role } from '../runtime/role.js';
import type { MessageState } from '../contracts/message-state.js';
import { createTrackerMetrics } from './metrics.js';
import { groupDirectory } from '../kafka/group-directory.js';
import { QueryService } from './query-service.js';
import { TaskRestorer } from './task-restorer.js';
import type { TaskStore } from './state-store.js';
import { TrackerLogic, type TrackerTopics } from './tracker-logic.js';
import { startTransactionalEngine, type TransactionalEngine, type TransactionEvent } from '../kafka/transactional-engine.js';

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
  /** Each step of each transaction (sent, committed, aborted), synchronously; must not throw. */
  onTransaction?: (event: TransactionEvent) => void;
}

export interface Tracker extends Role {
  /** Resolves once the member joined its group and every task it was given is restored. */
  readonly ready: Promise<void>;
  /** Base URL of its health, metrics and queries server, when one runs. */
  readonly address: string | undefined;
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

export async function startTracker(options: StartTrackerOptions): Promise<Tracker> {
  const { config } = options;
  const logger = options.logger ?? silentLogger;
  const brokers = options.brokers ?? config.kafka.brokers;
  requireBrokers(brokers);
  checkStateDir(config.tracker.stateDir);
  const kafka = createKafka(config.kafka, { logger, brokers, clientId: `${config.kafka.clientId}-tracker` });
  const topics = trackerTopics(config);
  const partitions = await connectingToKafka(brokers, () => prepareTrackerTopics(kafka, config, topics, logger));

  const registry = options.registry ?? createMetricsRegistry('tracker');
  // Set once the engine started; the gauges may be read before (a shared registry).
  const running: { engine?: TransactionalEngine } = {};
  const stores = new Map<number, TaskStore>();
  const lag = lagReader(kafka, config.tracker.groupId, [topics.sendResults, topics.deliveryStatus, topics.messages]);
  const metrics = createTrackerMetrics(registry, {
    engine: () => running.engine?.stats() ?? { transactions: 0, failedTransactions: 0, recordsIn: 0, recordsOut: 0, recordsSkipped: 0, fenced: 0, taskStarts: 0, lastTaskStartMs: 0 },
    ownedTasks: () => running.engine?.ownedTasks().length ?? 0,
    cached: () => logic.cachedCounts(),
    stores: () => [...stores].map(([task, store]) => ({ task, ...store.stats() })),
    lag: () => lag.read(),
  });
  const logic = new TrackerLogic({
    topics,
    partitions,
    maxCachedMessages: config.tracker.maxCachedMessages,
    maxCachedConversations: config.tracker.maxCachedConversations,
    counters: metrics,
    // Part of normal operation (a rejected result carries no state), unlike a malformed record.
    onSkip: (reason, record, detail) =>
      (reason === 'not_accepted' ? logger.debug.bind(logger) : logger.warn.bind(logger))(
        { reason, topic: record.topic, partition: record.partition, offset: record.offset, detail },
        'record skipped: it carries no event the tracker can apply',
      ),
  });
  const restorer = new TaskRestorer({ kafka, config, topics, partitions, logger, logic });
  // Restores in progress: index building waits for them (a task's restore gates its readiness, its indexes do not).
  let restoring = 0;
  let indexing: Promise<void> = Promise.resolve();

  // The query server starts first: its address is published to the group (query forwarding).
  const queries = new QueryService(logic, config.tracker.queryTimeoutMs);
  let health: HealthServer | undefined;
  if (options.health !== false) {
    health = await startHealthServer({
      host: options.health?.host ?? config.tracker.host,
      port: options.health?.port ?? config.tracker.port,
      registry,
      logger,
      notReadyReason: () => (running.engine?.isReady() ? undefined : 'restoring its tasks from the compacted topics, or not in its group'),
      route: (path, query, headers) => queries.route(path, query, headers),
    });
    logger.info({ url: health.url }, 'tracker health, metrics and queries listening');
  }
  const queryUrl = config.tracker.advertisedUrl ?? (health ? advertisedUrlOf(options.health === false ? config.tracker.host : (options.health?.host ?? config.tracker.host), health.port) : undefined);

  let engine: TransactionalEngine;
  try {
    engine = await startTransactionalEngine({
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
      ...(queryUrl ? { queryUrl } : {}),
      onFatal: options.onFatal,
      ...(options.onTransaction ? { onTransaction: options.onTransaction } : {}),
      async onTaskAssigned(task, { signal }) {
        restoring++;
        let store: TaskStore;
        try {
          store = await restorer.restore(task, signal, metrics);
        } finally {
          restoring--;
        }
        stores.set(task, store);
        logic.startTask(task, store);
        // One build at a time, at most about half a core: traffic goes first.
        if (!store.indexesComplete()) indexing = indexing.then(() => buildIndexes(task, store));
      },
      async onTaskRevoked(task) {
        logic.dropTask(task);
        const store = stores.get(task);
        stores.delete(task);
        await store?.close();
      },
      process(task, records) {
        return logic.process(task, logic.decodeBatch(records));
      },
    });
  } catch (error) {
    await health?.close();
    throw error;
  }
  running.engine = engine;
  const directoryAdmin = kafka.admin();
  queries.attach(engine, groupDirectory(directoryAdmin, config.tracker.groupId, topics.sendResults), queryUrl, async () => directoryAdmin.connect());

  /**
   * A bulk-restored store's indexes, built while the task runs: chunks in their own LMDB
   * transactions, yielding to the event loop between them (batches and queries go on).
   */
  async function buildIndexes(task: number, store: TaskStore): Promise<void> {
    const began = performance.now();
    let indexed = 0;
    try {
      for (;;) {
        if (stores.get(task) !== store) return;
        if (restoring > 0) {
          await new Promise((resolve) => setTimeout(resolve, 100));
          continue;
        }
        if (store.isRemapping()) {
          await new Promise((resolve) => setTimeout(resolve, 5));
          continue;
        }
        const chunkStarted = performance.now();
        const step = store.buildIndexes(500, Date.now() - config.tracker.stateRetentionMs);
        indexed += step.indexed;
        if (step.done) break;
        // Reading every state maps every page: let them go as it goes (README "Memory").
        if (indexed % 50_000 < 500) await remap(task, store);
        // At most about half a core: traffic goes first.
        await new Promise((resolve) => setTimeout(resolve, Math.max(1, performance.now() - chunkStarted)));
      }
      await remap(task, store);
      logger.info({ task, states: indexed, ms: Math.round(performance.now() - began) }, 'task store indexes built (lookups by request id and recipient complete)');
    } catch (error) {
      if (stores.get(task) === store) logger.warn({ task, error: (error as Error).message }, 'building the store indexes failed; they are built again at the next start of the task');
    }
  }

  /** Remaps a task's store between its batches (the store cannot be read meanwhile). */
  async function remap(task: number, store: TaskStore): Promise<boolean> {
    return (await running.engine?.runExclusive(task, () => (stores.get(task) === store ? store.remap() : false)).catch(() => false)) ?? false;
  }

  // The stores' mapped pages count in the process's RSS: past the bound, unmap them (README "Memory").
  const baselineFileBytes = residentFileBytes() ?? 0;
  let remapping = false;
  const residency = setInterval(() => {
    const mapped = residentFileBytes();
    if (remapping || mapped === undefined || mapped - baselineFileBytes < config.tracker.maxStoreResidentBytes) return;
    remapping = true;
    void (async () => {
      // Every task at once: each remap waits behind its own task's batches, not behind the others'.
      const remapped = (await Promise.all([...stores].map(([task, store]) => remap(task, store)))).filter(Boolean).length;
      logger.debug({ before: mapped, after: residentFileBytes(), remapped, stores: stores.size }, 'stores remapped (file-backed resident memory past tracker.maxStoreResidentBytes)');
    })().finally(() => (remapping = false));
  }, 1_000);
  residency.unref();

  // Retention: states not updated for tracker.stateRetentionMs leave the stores (the topics' own
  // retention removes their records); bounded work per sweep.
  const sweep = setInterval(() => {
    const now = Date.now();
    for (const [task, store] of stores) {
      try {
        if (store.isRemapping()) continue;
        const gone = store.expire(now - config.tracker.stateRetentionMs, now - config.tracker.conversationRetentionMs, 10_000);
        if (gone.messages > 0) metrics.expired('message', gone.messages);
        if (gone.conversations > 0) metrics.expired('conversation', gone.conversations);
      } catch (error) {
        logger.warn({ task, error: (error as Error).message }, 'dropping expired states from the local store failed; trying again at the next sweep');
      }
    }
  }, 60_000);
  sweep.unref();

  return {
    ready: engine.ready,
    isReady: () => engine.isReady(),
    metrics: registry,
    address: health?.url,
    message: (id) => queries.message(id),
    request: (id) => queries.request(id),
    drain: once(async () => {
      clearInterval(sweep);
      clearInterval(residency);
      const inTime = await withinGrace(engine.stop(), config.tracker.drainGraceMs);
      await Promise.all([...stores.values()].map((store) => store.close().catch(() => undefined)));
      await lag.close();
      await directoryAdmin.disconnect().catch(() => undefined);
      await health?.close();
      return inTime;
    }),
  };
}

/** The stores' directory exists (created when missing) and is writable: a clear error at start, not a task that fails forever. */
export function checkStateDir(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
  } catch (error) {
    throw new MsgbridgeError(
      'CONFIG_INVALID',
      `tracker.stateDir ${dir}: the tracker cannot write its stores there (${(error as NodeJS.ErrnoException).code ?? (error as Error).message}); set MSGBRIDGE_TRACKER_STATE_DIR to a writable directory on a volume that outlives the process`,
    );
  }
}

/** File-backed resident bytes of this process (Linux); undefined where /proc is not there. */
function residentFileBytes(): number | undefined {
  try {
    const m = /^RssFile:\s+(\d+) kB/m.exec(readFileSync('/proc/self/status', 'utf8'));
    return m ? Number(m[1]) * 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** The address other members forward queries to when tracker.advertisedUrl is unset. */
function advertisedUrlOf(host: string, port: number): string {
  return host === '0.0.0.0' || host === '::' ? `http://${hostname()}:${port}` : localUrl(host, port);
}

/**
 * Creates the inputs and the compacted outputs when missing (`kafka.createTopics`), checks the
 * outputs can keep acks=all; answers the inputs' partition count, which the outputs must share
 * (message-state is co-partitioned with them: task p writes partition p).
 */
async function prepareTrackerTopics(kafka: KafkaClient, config: Config, topics: TrackerTopics, logger: Logger): Promise<number> {
  const admin = kafka.admin();
  await admin.connect();
  try {
    const inputs = [topics.sendResults, topics.deliveryStatus, topics.messages];
    const counts = await partitionCounts(admin, inputs);
    const partitions = inputs.map((t) => counts.get(t)).find((n) => n !== undefined) ?? config.kafka.partitions;
    const base = { partitions, replicationFactor: config.kafka.replicationFactor, minInsyncReplicas: config.kafka.minInsyncReplicas };
    await prepareRoleTopics(
      admin,
      {
        createTopics: config.kafka.createTopics,
        create: [
          ...inputs.map((topic) => ({ topic, ...base })),
          ...[topics.messageState, topics.conversations].map((topic) => ({
            topic,
            ...base,
            configEntries: changelogTopicConfig(config, topic === topics.messageState ? 'messageState' : 'conversations'),
          })),
        ],
        written: [topics.messageState, topics.conversations],
      },
      logger,
    );
    const outputPartitions = (await partitionCounts(admin, [topics.messageState]).catch(() => new Map<string, number>())).get(topics.messageState);
    if (outputPartitions !== undefined && outputPartitions !== partitions) {
      throw new MsgbridgeError(
        'CONFIG_INVALID',
        `topic ${topics.messageState} has ${outputPartitions} partitions but the tracker's inputs have ${partitions}: they must be co-partitioned (recreate it with ${partitions})`,
      );
    }
    await warnUnboundedChangelogs(admin, config, topics, logger);
    return partitions;
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

/**
 * The changelogs' topic settings: compacted (one record per key) and deleted after the
 * retention (bounded history), with segments that roll so that compaction and deletion run.
 */
export function changelogTopicConfig(config: Config, which: 'messageState' | 'conversations'): { name: string; value: string }[] {
  const retentionMs = which === 'messageState' ? config.tracker.stateRetentionMs : config.tracker.conversationRetentionMs;
  // The active segment is never cleaned: roll it often enough that the log stays near one
  // record per key (at most a tenth of the retention, at most 6 h).
  const segmentMs = Math.min(6 * 3_600_000, Math.floor(retentionMs / 10));
  return [
    { name: 'cleanup.policy', value: 'compact,delete' },
    { name: 'retention.ms', value: String(retentionMs) },
    { name: 'segment.ms', value: String(segmentMs) },
  ];
}

/** Says loudly when an existing changelog keeps more than the configured retention (created before, or by hand). */
async function warnUnboundedChangelogs(admin: KafkaAdmin, config: Config, topics: TrackerTopics, logger: Logger): Promise<void> {
  try {
    for (const [resourceName, settings] of await topicSettings(admin, [topics.messageState, topics.conversations])) {
      const r = { resourceName };
      const setting = (name: string) => settings.get(name);
      const wanted = r.resourceName === topics.messageState ? config.tracker.stateRetentionMs : config.tracker.conversationRetentionMs;
      const policy = setting('cleanup.policy') ?? '';
      const retention = Number(setting('retention.ms'));
      if (!policy.includes('delete') || retention < 0 || retention > wanted) {
        logger.warn(
          { topic: r.resourceName, cleanupPolicy: policy, retentionMs: retention, wantedRetentionMs: wanted },
          `topic ${r.resourceName} keeps records longer than the tracker's retention: its history (and restore time) grows without bound; set cleanup.policy=compact,delete and retention.ms=${wanted}`,
        );
      }
    }
  } catch (error) {
    logger.warn({ error: (error as Error).message }, 'could not read the settings of the changelog topics');
  }
}
