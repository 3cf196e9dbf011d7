import { withAdmin, type KafkaClient } from '../kafka/client.js';
import type { Config } from '../config/schema.js';
import type { Logger } from '../platform/logger.js';
import { partitionEnds, readChangelog, type PartitionEnds } from '../kafka/changelog-reader.js';
import type { TrackerMetrics } from './metrics.js';
import { TaskStore, taskStoreDir, type ChangelogEntry, type Checkpoint } from './state-store.js';
import type { TrackerLogic, TrackerTopics } from './tracker-logic.js';

/**
 * Brings a task's local store up to its changelogs before the task takes traffic (README
 * "Local store"): from the store's checkpoint when the directory holds a consistent store
 * (a restart reads only what changed), in bulk from the beginning otherwise.
 */
export interface TaskRestorerOptions {
  kafka: KafkaClient;
  config: Config;
  topics: TrackerTopics;
  partitions: number;
  logger: Logger;
  logic: TrackerLogic;
}

/** Changelog records applied to the store per LMDB transaction during a restore. */
const CHUNK = 5_000;
const READ_TIMEOUT_MS = 30 * 60_000;
const REMAP_EVERY_BYTES = 8 * 1024 * 1024;
/** Tasks reading their changelogs at once: enough to overlap fetch latency, few enough to bound the fetched bytes in memory. */
const CONCURRENT_READS = 3;
const READ_BYTES_PER_PARTITION = 2 * 1024 * 1024;

export class TaskRestorer {
  private clusterId: Promise<string> | undefined;
  private reading = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly options: TaskRestorerOptions) {}

  /** The cluster's id: a store written against another cluster (a new local broker) is not reused. */
  private cluster(): Promise<string> {
    this.clusterId ??= withAdmin(this.options.kafka, async (admin) => (await admin.describeCluster()).clusterId).catch((error: unknown) => {
      this.clusterId = undefined;
      throw error;
    });
    return this.clusterId;
  }

  /** The task's store, open and caught up with both changelogs (as of when the read began). */
  async restore(task: number, signal: AbortSignal, metrics: TrackerMetrics): Promise<TaskStore> {
    const { config, topics, partitions, logger } = this.options;
    const started = performance.now();
    const clusterId = await this.cluster();
    let store = TaskStore.open(taskStoreDir(config.tracker.stateDir, config.tracker.groupId, task), {
      clusterId,
      task,
      partitions,
      messageStateTopic: topics.messageState,
      conversationsTopic: topics.conversations,
      requestOutcomesTopic: topics.requestOutcomes,
      inboundMessagesTopic: topics.inboundMessages,
    });
    try {
      const [stateEnds, windowEnds, outcomeEnds, inboundEnds] = await Promise.all([
        partitionEnds(this.options.kafka, topics.messageState),
        partitionEnds(this.options.kafka, topics.conversations),
        partitionEnds(this.options.kafka, topics.requestOutcomes),
        partitionEnds(this.options.kafka, topics.inboundMessages),
      ]);
      let checkpoint = store.checkpoint();
      const inconsistency =
        checkpoint &&
        (why(checkpoint.messageState, stateEnds.get(task)) ??
          why(checkpoint.conversations, windowEnds.get(task)) ??
          (checkpoint.requestOutcomes === undefined ? undefined : why(checkpoint.requestOutcomes, outcomeEnds.get(task))) ??
          (checkpoint.inboundMessages === undefined ? undefined : why(checkpoint.inboundMessages, inboundEnds.get(task))));
      if (checkpoint && inconsistency) {
        logger.warn({ task, dir: store.dir, checkpoint, reason: inconsistency }, 'the local store does not match the changelogs; rebuilding it from them');
        store = TaskStore.rebuild(store);
        checkpoint = undefined;
      }
      const mode = checkpoint ? 'delta' : 'bulk';
      const now = Date.now();
      await this.turn();
      let states: { records: number };
      let windows: { records: number };
      let outcomes: { records: number };
      let inbound: { records: number };
      try {
        states = await this.read(store, task, 'messageState', checkpoint, now - config.tracker.stateRetentionMs, signal);
        windows = await this.read(store, task, 'conversations', checkpoint, now - config.tracker.conversationRetentionMs, signal);
        outcomes = await this.read(store, task, 'requestOutcomes', checkpoint, now - config.tracker.stateRetentionMs, signal);
        inbound = await this.read(store, task, 'inboundMessages', checkpoint, now - config.tracker.stateRetentionMs, signal);
      } finally {
        this.reading--;
        this.waiting.shift()?.();
      }
      const seconds = (performance.now() - started) / 1000;
      const records = states.records + windows.records + outcomes.records + inbound.records;
      metrics.restore(seconds, mode, records);
      const stats = store.stats();
      logger.info(
        {
          task,
          mode,
          from: checkpoint ?? null,
          changelogRecords: { messageState: states.records, conversations: windows.records, requestOutcomes: outcomes.records, inboundMessages: inbound.records },
          recordsPerSecond: seconds > 0 ? Math.round(records / seconds) : null,
          storeEntries: { messages: stats.messages, conversations: stats.conversations, requestOutcomes: stats.outcomes, inboundMessages: stats.inbound },
          storeBytes: stats.bytes,
          ms: Math.round(seconds * 1000),
        },
        mode === 'delta' ? 'task store caught up from its checkpoint' : 'task store restored in bulk from the compacted topics',
      );
      return store;
    } catch (error) {
      await store.close().catch(() => undefined);
      throw error;
    }
  }

  /** Waits for one of the CONCURRENT_READS slots. */
  private async turn(): Promise<void> {
    while (this.reading >= CONCURRENT_READS) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.reading++;
  }

  /**
   * One changelog into the store, in chunks of one LMDB transaction each; the checkpoint
   * follows the chunks, so an interrupted bulk restore resumes where it stopped. A bulk read of
   * `conversations` also reads the other partitions for this task's customers: windows written
   * before they moved to the task's own partition.
   */
  private async read(store: TaskStore, task: number, which: keyof Checkpoint, checkpoint: Checkpoint | undefined, expireBeforeMs: number, signal: AbortSignal): Promise<{ records: number }> {
    const { kafka, topics, logic } = this.options;
    const topic = { messageState: topics.messageState, conversations: topics.conversations, requestOutcomes: topics.requestOutcomes, inboundMessages: topics.inboundMessages }[which];
    // Absent in a store of an earlier release (no outcomes or inbound messages kept yet): that changelog from its start.
    const from = checkpoint?.[which];
    const allPartitions = which === 'conversations' && !checkpoint;
    let chunk: ChangelogEntry[] = [];
    // Records of other partitions: applied beside the task's own (a window is a max, order does
    // not matter), never moving the task's position.
    let others: ChangelogEntry[] = [];
    let position: number | undefined;
    // Into an empty store, message states are copied as they are (indexes built later: README "Local store").
    const fast = which === 'messageState' && !checkpoint;
    // Loading touches every page it writes: unmap them as it goes (README "Memory").
    let loadedBytes = 0;
    const flush = () => {
      if (others.length > 0) store.applyChangelog(which, others, {}, expireBeforeMs);
      if (chunk.length > 0 || position !== undefined) {
        const reached = position === undefined ? {} : { [which]: position };
        if (fast) store.loadChangelog(chunk, reached);
        else store.applyChangelog(which, chunk, reached, expireBeforeMs);
        for (const e of chunk) loadedBytes += e.value?.length ?? 0;
        if (loadedBytes > REMAP_EVERY_BYTES) {
          store.remapNow();
          loadedBytes = 0;
        }
      }
      chunk = [];
      others = [];
      position = undefined;
    };
    const result = await readChangelog({
      kafka,
      topic,
      signal,
      timeoutMs: READ_TIMEOUT_MS,
      maxBytesPerPartition: READ_BYTES_PER_PARTITION,
      ...(allPartitions ? {} : { partitions: [task] }),
      ...(from !== undefined ? { from: new Map([[task, from]]) } : {}),
      filter: (r) => r.key !== null && (r.partition === task || logic.ownsConversation(task, r.key.toString())),
      onRecord: (r) => {
        if (r.partition !== task) others.push({ key: r.key!.toString(), value: r.value });
        else {
          chunk.push({ key: r.key!.toString(), value: r.value });
          position = Number(r.offset) + 1;
        }
        if (chunk.length + others.length >= CHUNK) flush();
      },
    });
    flush();
    store.remapNow();
    // The end read up to: markers and aborted records past the last delivered one are covered too.
    const end = result.ends.get(task);
    if (end !== undefined) store.applyChangelog(which, [], { [which]: end }, expireBeforeMs);
    return { records: result.delivered };
  }
}

/** Why a stored position cannot be continued from the changelog partition; undefined when it can. */
function why(position: number, ends: PartitionEnds | undefined): string | undefined {
  if (!ends) return 'the changelog partition does not exist';
  if (position > ends.high) return `its position ${position} is past the end of the changelog (${ends.high}): the topic was recreated or truncated`;
  if (position < ends.low) return `its position ${position} is before the start of the changelog (${ends.low}): records it never read were deleted`;
  return undefined;
}
