import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import type { Registry } from 'prom-client';
import type { Config } from '../config/schema.js';
import { createKafka, type KafkaPort } from '../kafka/client.js';
import { connectingToKafka } from '../kafka/failure.js';
import { requireBrokers } from '../kafka/brokers.js';
import { lagReader } from '../kafka/group-lag.js';
import { startAdminServer, startApiServer, type HttpServer } from '../runtime/http-server.js';
import { silentLogger, type Logger } from '../platform/logger.js';
import { createMetricsRegistry } from '../runtime/metrics.js';
import { localUrl } from '../platform/net.js';
import { once, withinGrace, type Role } from '../runtime/role.js';
import type { MessageState } from '../contracts/message-state.js';
import type { RequestOutcome } from '../contracts/request-outcome.js';
import { createTrackerMetrics, type TrackerMetrics } from './metrics.js';
import { openGroupDirectory, type OwnedGroupDirectory } from '../kafka/group-directory.js';
import { QueryService } from './query-service.js';
import { TaskRestorer } from './task-restorer.js';
import { checkLocalStoreDir } from '../platform/local-store.js';
import type { TaskStore } from './state-store.js';
import { TrackerLogic, type TrackerTopics } from './tracker-logic.js';
import { prepareTrackerTopics, trackerTopics } from './tracker-topics.js';
import {
  emptyEngineStats,
  startTransactionalEngine,
  type ProcessResult,
  type TransactionalEngine,
  type TransactionEvent,
} from '../kafka/transactional-engine.js';
import type { ConsumedRecord } from '../kafka/group-consumer.js';
import {
  headerText,
  NOOP_TRACER,
  startKafkaProcessSpan,
  startTracing,
  TRACING_FLUSH_MS,
  type TraceSpan,
  type Tracer,
} from '../platform/tracing.js';
import { HEADER } from '../contracts/headers.js';
import { AccessGuard } from './access-guard.js';
import { StateCache } from './state-cache.js';
import { ConsoleAssets } from './console-assets.js';
import type { DlqPort } from './dlq-port.js';
import { trackerRoutes } from './http-api.js';
import { errorMessage } from '../platform/errors.js';

export { changelogTopicConfig, trackerTopics } from './tracker-topics.js';

export interface StartTrackerOptions {
  config: Config;
  brokers?: string[];
  logger?: Logger;
  registry?: Registry;
  /** The query and console server: default config.tracker.host/port; false = none. */
  http?: false | { host?: string; port?: number };
  /** The admin server (/healthz, /readyz, /metrics): default config.tracker.adminHost/adminPort; false = none. */
  admin?: false | { host?: string; port?: number };
  onFatal?: (error: Error) => void;
  /** Each step of each transaction (sent, committed, aborted), synchronously; must not throw. */
  onTransaction?: (event: TransactionEvent) => void;
  /** Where the OTEL_* variables are read (src/platform/README.md, "Tracing"); default process.env. */
  tracingEnv?: Record<string, string | undefined>;
  /** The console's dead-letter page (README "Console and access"); without it the page says to use `msgbridge dlq`. */
  dlq?: DlqPort;
}

/** Results whose traceparent is remembered for the links of their statuses (about 200 bytes each). */
const RESULT_TRACES_MAX = 100_000;

/** Engine statistics before the engine runs (the gauges may be read before: a shared registry). */
const NO_ENGINE_STATS = emptyEngineStats();

export async function startTracker(options: StartTrackerOptions): Promise<Tracker> {
  return Tracker.start(options);
}

/**
 * The tracker role's composition root (src/tracker/README.md): one consumer group on
 * `send-results`, `delivery_status` and `messages`, exactly-once into the compacted topics
 * `message-state` and `conversations`, state rebuilt from them per task, queries over HTTP.
 */
export class Tracker implements Role {
  readonly metrics: Registry;
  /**
   * Leaves the group after the transactions in flight, closes the server. Resolves true when it finished within
   * tracker.drainGraceMs.
   */
  readonly drain = once(() => this.stop());

  private readonly config: Config;
  private readonly logger: Logger;
  private readonly topics: TrackerTopics;
  /** The open store of each task this member runs. */
  private readonly stores = new Map<number, TaskStore>();
  private readonly trackerMetrics: TrackerMetrics;
  private readonly lag: ReturnType<typeof lagReader>;
  private readonly logic: TrackerLogic;
  private readonly restorer: TaskRestorer;
  private readonly queries: QueryService;
  private readonly guard: AccessGuard;
  /** Task restores in progress: index building waits for them (a restore gates readiness, indexes do not). */
  private restoresRunning = 0;
  /** The index builds, one after another. */
  private indexBuilds: Promise<void> = Promise.resolve();
  private residencyRemapRunning = false;
  private api: HttpServer | undefined;
  private admin: HttpServer | undefined;
  /** Where other members forward queries to this one; undefined without a server or tracker.advertisedUrl. */
  private queryUrl: string | undefined;
  private engine: TransactionalEngine | undefined;
  private directory: OwnedGroupDirectory | undefined;
  private residencyTimer: NodeJS.Timeout | undefined;
  private expiryTimer: NodeJS.Timeout | undefined;
  private tracer: Tracer = NOOP_TRACER;
  /** Tracing on: message id → the `traceparent` of its accepted result, most recent last (bounded). */
  private readonly resultTraces = new StateCache<string>({ maxEntries: RESULT_TRACES_MAX });

  /** Checks the settings and the topics, then runs the tracker: ready once `ready` resolves. */
  static async start(options: StartTrackerOptions): Promise<Tracker> {
    const { config } = options;
    const logger = options.logger ?? silentLogger;
    const brokers = options.brokers ?? config.kafka.brokers;
    requireBrokers(brokers);
    checkStateDir(config.tracker.stateDir);
    const tracer = await startTracing({ role: 'tracker', env: options.tracingEnv, logger });
    try {
      const kafka = createKafka(config.kafka, { logger, brokers, clientId: `${config.kafka.clientId}-tracker` });
      const topics = trackerTopics(config);
      const partitions = await connectingToKafka(brokers, () => prepareTrackerTopics(kafka, config, topics, logger));
      const tracker = new Tracker(options, logger, kafka, topics, partitions);
      tracker.tracer = tracer;
      // The query server starts first: its address is published to the group (query forwarding).
      try {
        await tracker.serveAdmin();
        await tracker.serveQueries();
        await tracker.joinGroup(partitions);
      } catch (error) {
        tracker.guard.stop();
        await tracker.api?.close();
        await tracker.admin?.close();
        throw error;
      }
      tracker.startHousekeeping();
      return tracker;
    } catch (error) {
      await tracer.shutdown(TRACING_FLUSH_MS);
      throw error;
    }
  }

  private constructor(
    private readonly options: StartTrackerOptions,
    logger: Logger,
    private readonly kafka: KafkaPort,
    topics: TrackerTopics,
    partitions: number,
  ) {
    const { config } = options;
    this.config = config;
    this.logger = logger;
    this.topics = topics;
    this.metrics = options.registry ?? createMetricsRegistry('tracker');
    this.lag = lagReader(kafka, config.tracker.groupId, [topics.sendResults, topics.deliveryStatus, topics.messages]);
    this.trackerMetrics = createTrackerMetrics(this.metrics, {
      engine: () => this.engine?.stats() ?? NO_ENGINE_STATS,
      ownedTasks: () => this.engine?.ownedTasks().length ?? 0,
      cached: () => this.logic.cachedCounts(),
      stores: () => [...this.stores].map(([task, store]) => ({ task, ...store.stats() })),
      lag: () => this.lag.read(),
    });
    this.logic = new TrackerLogic({
      topics,
      partitions,
      maxCachedMessages: config.tracker.maxCachedMessages,
      maxCachedConversations: config.tracker.maxCachedConversations,
      counters: this.trackerMetrics,
      onSkip: (reason, record, detail) =>
        logger.warn(
          { reason, topic: record.topic, partition: record.partition, offset: record.offset, detail },
          'record skipped: it carries no event the tracker can apply',
        ),
    });
    this.restorer = new TaskRestorer({ kafka, config, topics, partitions, logger, logic: this.logic });
    this.queries = new QueryService(this.logic, config.tracker.queryTimeoutMs);
    this.guard = new AccessGuard(config.tracker, logger, this.metrics);
  }

  /** Resolves once the member joined its group and every task it was given is restored. */
  get ready(): Promise<void> {
    return this.runningEngine().ready;
  }

  /** Base URL of its query and console server, when one runs. */
  get address(): string | undefined {
    return this.api?.url;
  }

  /** Base URL of its admin server (/healthz, /readyz, /metrics), when one runs. */
  get adminAddress(): string | undefined {
    return this.admin?.url;
  }

  isReady(): boolean {
    return this.runningEngine().isReady();
  }

  /**
   * The current state of a message, from this member's store or its owner's; undefined when
   * unknown. A query forwarded to another member carries `credentials` (e.g. `{ authorization:
   * 'Bearer <token>' }`): the other member checks them like any caller's.
   */
  message(messageId: string, credentials?: Record<string, string>): Promise<MessageState | undefined> {
    return this.queries.message(messageId, credentials);
  }

  /**
   * The message a request created, else its rejected or expired outcome (it has an `outcome` field); undefined when
   * unknown.
   */
  request(requestId: string, credentials?: Record<string, string>): Promise<MessageState | RequestOutcome | undefined> {
    return this.queries.request(requestId, credentials);
  }

  /** Set by `start` before the instance is handed out. */
  private runningEngine(): TransactionalEngine {
    if (!this.engine) throw new Error('the tracker is not started');
    return this.engine;
  }

  /** The admin server (unless `admin: false`): /healthz, /readyz, /metrics on the private port. */
  private async serveAdmin(): Promise<void> {
    const { admin } = this.options;
    if (admin === false) return;
    this.admin = await startAdminServer({
      host: admin?.host ?? this.config.tracker.adminHost,
      port: admin?.port ?? this.config.tracker.adminPort,
      registry: this.metrics,
      logger: this.logger,
      notReadyReason: () =>
        this.engine?.isReady() ? undefined : 'restoring its tasks from the compacted topics, or not in its group',
      what: "the tracker's admin port (tracker.adminPort)",
    });
    this.logger.info({ url: this.admin.url }, 'admin endpoints listening (/healthz, /readyz, /metrics)');
  }

  /** The query and console server (unless `http: false`), and the address it is known by. */
  private async serveQueries(): Promise<void> {
    const { http } = this.options;
    const { tracker } = this.config;
    if (http !== false) {
      const host = http?.host ?? tracker.host;
      this.guard.start();
      const routes = trackerRoutes({
        queries: this.queries,
        guard: this.guard,
        assets: new ConsoleAssets(),
        dlq: this.options.dlq,
        logger: this.logger,
      });
      this.api = await startApiServer({
        host,
        port: http?.port ?? tracker.port,
        logger: this.logger,
        route: routes,
        what: "the tracker's query port (tracker.port)",
      });
      this.logger.info(
        { url: this.api.url, console: `${this.api.url}/console/` },
        'tracker queries and console listening',
      );
      this.queryUrl = tracker.advertisedUrl ?? advertisedUrlOf(host, this.api.port);
    } else {
      this.queryUrl = tracker.advertisedUrl;
    }
  }

  /** Starts the exactly-once engine in the group; the queries follow its tasks. */
  private async joinGroup(partitions: number): Promise<void> {
    const { config, options, topics } = this;
    this.engine = await startTransactionalEngine({
      kafka: this.kafka,
      groupId: config.tracker.groupId,
      inputTopics: [topics.sendResults, topics.deliveryStatus, topics.messages],
      transactionalIdPrefix: config.tracker.transactionalIdPrefix,
      logger: this.logger,
      maxBatchRecords: config.tracker.maxBatchRecords,
      transactionTimeoutMs: config.tracker.transactionTimeoutMs,
      sessionTimeoutMs: config.tracker.sessionTimeoutMs,
      heartbeatIntervalMs: config.tracker.heartbeatIntervalMs,
      // Every input partition of every task at once: a task's throughput is bounded by its
      // transaction round trips, so tasks must not wait for each other (one task's batches never overlap).
      partitionsConsumedConcurrently: 3 * partitions,
      ...(this.queryUrl ? { queryUrl: this.queryUrl } : {}),
      onFatal: options.onFatal,
      ...(options.onTransaction ? { onTransaction: options.onTransaction } : {}),
      onTaskAssigned: (task, { signal }) => this.openTask(task, signal),
      onTaskRevoked: (task) => this.closeTask(task),
      process: (task, records) => this.process(task, records),
    });
    const directory = openGroupDirectory(this.kafka, config.tracker.groupId, topics.sendResults);
    this.directory = directory;
    this.queries.attach(this.engine, directory, this.queryUrl, () => directory.connect());
  }

  /** One batch of a task through the logic; with tracing on, a span per state change. */
  private process(task: number, records: ConsumedRecord[]): ProcessResult {
    const result = this.logic.process(task, this.logic.decodeBatch(records));
    if (!this.tracer.enabled || result.outputs.length === 0) return result;
    return this.traceStateChanges(result);
  }

  /**
   * A consumer span per state change (src/platform/README.md, "Tracing"), continuing and
   * linking the `traceparent` of the record that caused it; the state's record carries the
   * span's own `traceparent`. The spans end when the transaction commits: one that aborts did
   * not happen, and its spans are never exported (the batch runs again).
   */
  private traceStateChanges(result: ReturnType<TrackerLogic['process']>): ProcessResult {
    const spans: TraceSpan[] = [];
    const groupId = this.config.tracker.groupId;
    result.outputs.forEach((output, i) => {
      const cause = result.causes[i]!;
      const traceparent = headerText(cause.headers[HEADER.traceparent]);
      const also =
        output.topic === this.topics.messageState && typeof output.key === 'string'
          ? this.resultTrace(output.key, cause.topic, traceparent)
          : undefined;
      const span = startKafkaProcessSpan(
        this.tracer,
        {
          topic: cause.topic,
          partition: cause.partition,
          offset: cause.offset,
          traceparent,
          key: cause.key?.toString(),
        },
        groupId,
        also,
      );
      span.setAttribute('msgbridge.state_topic', output.topic);
      if (typeof output.key === 'string') span.setAttribute('msgbridge.state_key', output.key);
      output.headers = { ...output.headers, [HEADER.traceparent]: span.traceparent };
      spans.push(span);
    });
    return {
      outputs: result.outputs,
      commit: (written) => {
        for (const span of spans) span.end();
        result.commit?.(written);
      },
    };
  }

  /**
   * A status's state change also links to the message's accepted result, whose trace is the
   * send's: a provider that does not propagate `traceparent` in its webhooks starts a new trace
   * for each status, and this link is what still ties it to the send (src/platform/README.md,
   * "Tracing"). Kept in memory only, for the most recent results (a restart forgets them: the
   * link is then missing).
   */
  private resultTrace(messageId: string, causeTopic: string, traceparent: string | undefined): string[] | undefined {
    if (causeTopic === this.topics.sendResults) {
      if (traceparent === undefined) return undefined;
      this.resultTraces.set(messageId, traceparent);
      return undefined;
    }
    const result = this.resultTraces.peek(messageId);
    return result === undefined || result === traceparent ? undefined : [result];
  }

  /** A task given to this member: its store restored, then the logic runs on it; its indexes follow when missing. */
  private async openTask(task: number, signal: AbortSignal): Promise<void> {
    this.restoresRunning++;
    let store: TaskStore;
    try {
      store = await this.restorer.restore(task, signal, this.trackerMetrics);
    } finally {
      this.restoresRunning--;
    }
    this.stores.set(task, store);
    this.logic.startTask(task, store);
    // One build at a time, at most about half a core: traffic goes first.
    if (!store.indexesComplete()) this.indexBuilds = this.indexBuilds.then(() => this.buildIndexes(task, store));
  }

  private async closeTask(task: number): Promise<void> {
    this.logic.dropTask(task);
    const store = this.stores.get(task);
    this.stores.delete(task);
    await store?.close();
  }

  /**
   * A bulk-restored store's indexes, built while the task runs: chunks in their own LMDB
   * transactions, yielding to the event loop between them (batches and queries go on).
   */
  private async buildIndexes(task: number, store: TaskStore): Promise<void> {
    const began = performance.now();
    let indexed = 0;
    try {
      for (;;) {
        if (this.stores.get(task) !== store) return;
        if (this.restoresRunning > 0) {
          await new Promise((resolve) => setTimeout(resolve, 100));
          continue;
        }
        if (store.isRemapping()) {
          await new Promise((resolve) => setTimeout(resolve, 5));
          continue;
        }
        const chunkStarted = performance.now();
        const step = store.buildIndexes(500, Date.now() - this.config.tracker.stateRetentionMs);
        indexed += step.indexed;
        if (step.done) break;
        // Reading every state maps every page: let them go as it goes (README "Memory").
        if (indexed % 50_000 < 500) await this.remap(task, store);
        // At most about half a core: traffic goes first.
        await new Promise((resolve) => setTimeout(resolve, Math.max(1, performance.now() - chunkStarted)));
      }
      await this.remap(task, store);
      this.logger.info(
        { task, states: indexed, ms: Math.round(performance.now() - began) },
        'task store indexes built (lookups by request id and recipient complete)',
      );
    } catch (error) {
      if (this.stores.get(task) === store)
        this.logger.warn(
          { task, error: errorMessage(error) },
          'building the store indexes failed; they are built again at the next start of the task',
        );
    }
  }

  /** Remaps a task's store between its batches (the store cannot be read meanwhile). */
  private async remap(task: number, store: TaskStore): Promise<boolean> {
    return (
      (await this.engine
        ?.runExclusive(task, () => (this.stores.get(task) === store ? store.remap() : false))
        .catch(() => false)) ?? false
    );
  }

  /** The two periodic chores: the stores' resident memory, and retention. */
  private startHousekeeping(): void {
    const baselineFileBytes = residentFileBytes() ?? 0;
    this.residencyTimer = setInterval(() => this.boundResidentMemory(baselineFileBytes), 1_000);
    this.residencyTimer.unref();
    this.expiryTimer = setInterval(() => this.expireStates(), 60_000);
    this.expiryTimer.unref();
  }

  /** The stores' mapped pages count in the process's RSS: past the bound, unmap them (README "Memory"). */
  private boundResidentMemory(baselineFileBytes: number): void {
    const mapped = residentFileBytes();
    if (
      this.residencyRemapRunning ||
      mapped === undefined ||
      mapped - baselineFileBytes < this.config.tracker.maxStoreResidentBytes
    )
      return;
    this.residencyRemapRunning = true;
    void (async () => {
      // Every task at once: each remap waits behind its own task's batches, not behind the others'.
      const remapped = (await Promise.all([...this.stores].map(([task, store]) => this.remap(task, store)))).filter(
        Boolean,
      ).length;
      this.logger.debug(
        { before: mapped, after: residentFileBytes(), remapped, stores: this.stores.size },
        'stores remapped (file-backed resident memory past tracker.maxStoreResidentBytes)',
      );
    })().finally(() => (this.residencyRemapRunning = false));
  }

  /**
   * Retention: states not updated for tracker.stateRetentionMs leave the stores (the topics' own
   * retention removes their records); bounded work per sweep.
   */
  private expireStates(): void {
    const now = Date.now();
    for (const [task, store] of this.stores) {
      try {
        if (store.isRemapping()) continue;
        const gone = store.expire(
          now - this.config.tracker.stateRetentionMs,
          now - this.config.tracker.conversationRetentionMs,
          10_000,
        );
        if (gone.messages > 0) this.trackerMetrics.expired('message', gone.messages);
        if (gone.conversations > 0) this.trackerMetrics.expired('conversation', gone.conversations);
        if (gone.outcomes > 0) this.trackerMetrics.expired('request_outcome', gone.outcomes);
        if (gone.inbound > 0) this.trackerMetrics.expired('inbound_message', gone.inbound);
      } catch (error) {
        this.logger.warn(
          { task, error: errorMessage(error) },
          'dropping expired states from the local store failed; trying again at the next sweep',
        );
      }
    }
  }

  /** The drain's steps: leave the group within the grace, then close the stores, clients and server. */
  private async stop(): Promise<boolean> {
    clearInterval(this.expiryTimer);
    clearInterval(this.residencyTimer);
    const inTime = await withinGrace(this.runningEngine().stop(), this.config.tracker.drainGraceMs);
    await Promise.all([...this.stores.values()].map((store) => store.close().catch(() => undefined)));
    await this.lag.close();
    await this.directory?.close().catch(() => undefined);
    this.guard.stop();
    await this.api?.close();
    await this.admin?.close();
    // The spans of the last state changes are exported before the process ends (bounded).
    await this.tracer.shutdown(TRACING_FLUSH_MS);
    return inTime;
  }
}

/**
 * The stores' directory exists (created when missing) and is writable: a clear error at start, not a task that fails
 * forever.
 */
export function checkStateDir(dir: string): void {
  checkLocalStoreDir(dir, 'tracker.stateDir', 'MSGBRIDGE_TRACKER_STATE_DIR', 'the tracker');
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
