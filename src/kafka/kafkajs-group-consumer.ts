import type { Admin, Consumer, EachBatchPayload, Offsets } from 'kafkajs';
import type { Logger } from '../platform/logger.js';
import { consumedRecord, createConsumer, kafkajsClient, type KafkaSource } from './client.js';
import { beforeRejoin } from './kafkajs-failover-fix.js';
import {
  CommitMetadataTooLargeError,
  RejoinNeededError,
  type CommittedOffset,
  type ConsumedRecord,
  type GroupConsumer,
  type GroupConsumerHandlers,
  type OffsetToCommit,
} from './group-consumer.js';

/** Heartbeat errors after which kafkajs 2.2.4 rejoins the group (runner.js: isRebalancing, UNKNOWN_MEMBER_ID). */
const REJOIN_ERRORS = new Set([
  'REBALANCE_IN_PROGRESS',
  'NOT_COORDINATOR_FOR_GROUP',
  'ILLEGAL_GENERATION',
  'UNKNOWN_MEMBER_ID',
]);

const errorType = (error: unknown): string => (error as { type?: string })?.type ?? '';

export interface KafkajsGroupConsumerOptions {
  groupId: string;
  topic: string;
  /** Where a group without committed offsets starts (default: the beginning). */
  fromBeginning?: boolean;
  sessionTimeoutMs?: number;
  rebalanceTimeoutMs?: number;
  heartbeatIntervalMs?: number;
  /** Longest a fetch waits for data: also bounds how quickly a pause or stop takes effect. */
  maxWaitTimeMs?: number;
  maxBytesPerPartition?: number;
  maxBytes?: number;
  /**
   * Batches of different partitions handled at once (default 1). A handler that waits for room
   * holds its partition only: with several, one partition's long batch cannot starve the
   * others (a partition taken over after a rebalance starts at once).
   */
  partitionsConsumedConcurrently?: number;
  logger?: Logger;
}

/**
 * A consumer-group member on kafkajs 2.2.4, shaped around its known sharp edges:
 *
 * - `eachBatch` with `autoCommit: false` and `eachBatchAutoResolve: false`: the caller resolves
 *   each record it takes (that moves the fetch position) and commits on its own schedule.
 *   kafkajs keeps at most one fetch response per broker in memory (a fetcher waits for its
 *   batches to be handled), so a handler that waits for room is real backpressure; no
 *   pause/resume dance (resume has known issues in 2.x).
 * - After every rejoin kafkajs fetches again from the committed offsets, even for partitions
 *   it kept: the caller must recognise offsets it already took.
 * - `consumer.commitOffsets` retries through the runner's retrier, and a retry runs with the
 *   *current* generation: after a rebalance it can commit a partition that now belongs to
 *   another member (the broker only checks generation and member id, see kafkajs#1046). Commits
 *   here go through the batch payload's `commitOffsetsIfNecessary(offsets)`, which commits
 *   once with the generation current at the call, and the caller decides what to commit from
 *   the assignment it was told about (GROUP_JOIN is emitted synchronously after the sync, in
 *   the same turn as the new generation takes effect).
 */
export function createKafkajsGroupConsumer(kafka: KafkaSource, options: KafkajsGroupConsumerOptions): GroupConsumer {
  const { topic, groupId, logger } = options;
  const consumer: Consumer = createConsumer(kafka, {
    groupId,
    sessionTimeout: options.sessionTimeoutMs ?? 30_000,
    rebalanceTimeout: options.rebalanceTimeoutMs ?? 60_000,
    heartbeatInterval: options.heartbeatIntervalMs ?? 3_000,
    maxWaitTimeInMs: options.maxWaitTimeMs ?? 1_000,
    maxBytesPerPartition: options.maxBytesPerPartition ?? 1024 * 1024,
    maxBytes: options.maxBytes ?? 10 * 1024 * 1024,
  });
  let admin: Admin | undefined;
  let commitFn: EachBatchPayload['commitOffsetsIfNecessary'] | undefined;
  let started = false;
  let unregister: (() => void) | undefined;

  const adminClient = async (): Promise<Admin> => {
    if (!admin) {
      const created = kafkajsClient(kafka).admin();
      await created.connect();
      admin = created;
    }
    return admin;
  };

  return {
    async start(handlers: GroupConsumerHandlers) {
      if (started) throw new Error('the consumer is already started');
      started = true;
      consumer.on(consumer.events.GROUP_JOIN, (event) => {
        if (handlers.beforeRejoin) {
          unregister?.();
          unregister = beforeRejoin(groupId, event.payload.memberId, handlers.beforeRejoin);
        }
        const partitions = [...(event.payload.memberAssignment[topic] ?? [])].sort((a, b) => a - b);
        logger?.info(
          { groupId, memberId: event.payload.memberId, partitions, durationMs: event.payload.duration },
          'joined the consumer group',
        );
        handlers.onAssignment(partitions, event.payload.memberId);
      });
      consumer.on(consumer.events.REBALANCING, (event) => {
        logger?.info({ groupId, memberId: event.payload.memberId }, 'the group is rebalancing');
        handlers.onRebalancing?.();
      });
      consumer.on(consumer.events.STOP, () => {
        logger?.info({ groupId }, 'consumer stopped');
      });
      consumer.on(consumer.events.CRASH, (event) => {
        handlers.onCrash?.(event.payload.error, event.payload.restart);
      });
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: options.fromBeginning ?? true });
      await consumer.run({
        autoCommit: false,
        eachBatchAutoResolve: false,
        partitionsConsumedConcurrently: options.partitionsConsumedConcurrently ?? 1,
        eachBatch: async (payload) => {
          commitFn = payload.commitOffsetsIfNecessary;
          const { batch } = payload;
          const records: ConsumedRecord[] = batch.messages.map((m) => consumedRecord(batch.topic, batch.partition, m));
          // kafkajs decides to rejoin from the type of what the handler throws: hand it back its own error.
          await handlers
            .onBatch(batch.partition, records, {
              resolveOffset: (offset) => payload.resolveOffset(offset),
              heartbeat: () =>
                payload.heartbeat().catch((error: unknown) => {
                  // The original stays the cause: kafkajs needs to see its own error to rejoin.
                  if (REJOIN_ERRORS.has(errorType(error)))
                    throw new RejoinNeededError(`the group is rebalancing (${errorType(error)})`, { cause: error });
                  throw error;
                }),
              isActive: () => payload.isRunning() && !payload.isStale(),
            })
            .catch((error: unknown) => {
              throw error instanceof RejoinNeededError && error.cause ? error.cause : error;
            });
        },
      });
    },

    async commit(offsets: OffsetToCommit[]) {
      if (offsets.length === 0) return;
      if (!commitFn) throw new Error('no batch received yet: nothing can have been processed');
      const payload = {
        topics: [
          {
            topic,
            partitions: offsets.map((o) => ({
              partition: o.partition,
              offset: String(o.offset),
              metadata: o.metadata,
            })),
          },
        ],
      };
      // `metadata` is not in the Offsets type, but kafkajs passes partition entries through to
      // the OffsetCommit request, which encodes it.
      await commitFn(payload as Offsets).catch((error: unknown) => {
        if (errorType(error) === 'OFFSET_METADATA_TOO_LARGE')
          throw new CommitMetadataTooLargeError('the broker refuses the commit metadata (offset.metadata.max.bytes)', {
            cause: error,
          });
        throw error;
      });
    },

    async fetchCommitted(partitions: number[]): Promise<CommittedOffset[]> {
      const client = await adminClient();
      const result = await client.fetchOffsets({ groupId, topics: [topic] });
      const wanted = new Set(partitions);
      const entry = result.find((t) => t.topic === topic);
      return (entry?.partitions ?? [])
        .filter((p) => wanted.has(p.partition))
        .map((p) => ({ partition: p.partition, offset: Number(p.offset), metadata: p.metadata ?? null }));
    },

    pauseAll() {
      try {
        consumer.pause([{ topic }]);
      } catch (error) {
        logger?.warn({ err: error }, 'pausing the consumer failed');
      }
    },

    async stop() {
      unregister?.();
      try {
        await consumer.disconnect();
      } finally {
        const a = admin;
        admin = undefined;
        if (a) await a.disconnect().catch(() => undefined);
      }
    },
  };
}
