import type { KafkaPort } from '../kafka/client.js';
import type { Config } from '../config/schema.js';
import type { Logger } from '../platform/logger.js';
import { ChangelogRestorer } from '../kafka/changelog-restore.js';
import type { TrackerMetrics } from './metrics.js';
import { TaskStore, taskStoreDir, type Checkpoint } from './state-store.js';
import type { TrackerLogic, TrackerTopics } from './tracker-logic.js';

type ChangelogName = 'messageState' | 'conversations' | 'requestOutcomes' | 'inboundMessages';

/**
 * Brings a task's local store up to its changelogs before the task takes traffic (README
 * "Local store"): from the store's checkpoint when the directory holds a consistent store
 * (a restart reads only what changed), in bulk from the beginning otherwise. The reading itself
 * is src/kafka/changelog-restore.ts, shared with the sender's request ledger.
 */
export interface TaskRestorerOptions {
  kafka: KafkaPort;
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
const READ_BYTES_PER_PARTITION = 2 * 1024 * 1024;

export class TaskRestorer {
  private readonly changelogs: ChangelogRestorer;

  constructor(private readonly options: TaskRestorerOptions) {
    this.changelogs = new ChangelogRestorer(options.kafka);
  }

  /** The task's store, open and caught up with both changelogs (as of when the read began). */
  async restore(task: number, signal: AbortSignal, metrics: TrackerMetrics): Promise<TaskStore> {
    const { config, topics, partitions, logger } = this.options;
    const started = performance.now();
    const clusterId = await this.changelogs.clusterId();
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
      let checkpoint = store.checkpoint();
      const inconsistency =
        checkpoint &&
        (await this.changelogs.inconsistency([
          { topic: topics.messageState, partition: task, position: checkpoint.messageState },
          { topic: topics.conversations, partition: task, position: checkpoint.conversations },
          // Absent in a store of an earlier release (no outcomes or inbound messages kept yet): read from its start.
          { topic: topics.requestOutcomes, partition: task, position: checkpoint.requestOutcomes },
          { topic: topics.inboundMessages, partition: task, position: checkpoint.inboundMessages },
        ]));
      if (checkpoint && inconsistency) {
        logger.warn(
          { task, dir: store.dir, checkpoint, reason: inconsistency },
          'the local store does not match the changelogs; rebuilding it from them',
        );
        store = TaskStore.rebuild(store);
        checkpoint = undefined;
      }
      const mode = checkpoint ? 'delta' : 'bulk';
      const now = Date.now();
      const [states, windows, outcomes, inbound] = await this.changelogs.inTurn(async () => [
        await this.read(store, task, 'messageState', checkpoint, now - config.tracker.stateRetentionMs, signal),
        await this.read(store, task, 'conversations', checkpoint, now - config.tracker.conversationRetentionMs, signal),
        await this.read(store, task, 'requestOutcomes', checkpoint, now - config.tracker.stateRetentionMs, signal),
        await this.read(store, task, 'inboundMessages', checkpoint, now - config.tracker.stateRetentionMs, signal),
      ]);
      const seconds = (performance.now() - started) / 1000;
      const records = states.records + windows.records + outcomes.records + inbound.records;
      metrics.restore(seconds, mode, records);
      const stats = store.stats();
      logger.info(
        {
          task,
          mode,
          from: checkpoint ?? null,
          changelogRecords: {
            messageState: states.records,
            conversations: windows.records,
            requestOutcomes: outcomes.records,
            inboundMessages: inbound.records,
          },
          recordsPerSecond: seconds > 0 ? Math.round(records / seconds) : null,
          storeEntries: {
            messages: stats.messages,
            conversations: stats.conversations,
            requestOutcomes: stats.outcomes,
            inboundMessages: stats.inbound,
          },
          storeBytes: stats.bytes,
          ms: Math.round(seconds * 1000),
        },
        mode === 'delta'
          ? 'task store caught up from its checkpoint'
          : 'task store restored in bulk from the compacted topics',
      );
      return store;
    } catch (error) {
      await store.close().catch(() => undefined);
      throw error;
    }
  }

  /**
   * One changelog into the store, in chunks of one LMDB transaction each; the checkpoint
   * follows the chunks, so an interrupted bulk restore resumes where it stopped. A bulk read of
   * `conversations` also reads the other partitions for this task's customers: windows written
   * before they moved to the task's own partition.
   */
  private async read(
    store: TaskStore,
    task: number,
    which: ChangelogName,
    checkpoint: Checkpoint | undefined,
    expireBeforeMs: number,
    signal: AbortSignal,
  ): Promise<{ records: number }> {
    const { topics, logic } = this.options;
    const topic = {
      messageState: topics.messageState,
      conversations: topics.conversations,
      requestOutcomes: topics.requestOutcomes,
      inboundMessages: topics.inboundMessages,
    }[which];
    const from = checkpoint?.[which];
    // Into an empty store, message states are copied as they are (indexes built later: README "Local store").
    const fast = which === 'messageState' && !checkpoint;
    // Loading touches every page it writes: unmap them as it goes (README "Memory").
    let loadedBytes = 0;
    const result = await this.changelogs.read({
      topic,
      partition: task,
      // Records of other partitions: applied beside the task's own (a window is a max, order does
      // not matter), never moving the task's position.
      allPartitions: which === 'conversations' && !checkpoint,
      ...(from !== undefined ? { from } : {}),
      filter: (r) => r.partition === task || logic.ownsConversation(task, r.key!.toString()),
      chunkSize: CHUNK,
      signal,
      timeoutMs: READ_TIMEOUT_MS,
      maxBytesPerPartition: READ_BYTES_PER_PARTITION,
      apply: (own, others, reached) => {
        if (others.length > 0) store.applyChangelog(which, others, {}, expireBeforeMs);
        const position = reached === undefined ? {} : { [which]: reached };
        if (fast && own.length > 0) store.loadChangelog(own, position);
        else store.applyChangelog(which, own, position, expireBeforeMs);
        for (const e of own) loadedBytes += e.value?.length ?? 0;
        if (loadedBytes > REMAP_EVERY_BYTES) {
          store.remapNow();
          loadedBytes = 0;
        }
      },
    });
    store.remapNow();
    return { records: result.records };
  }
}
