import type { Cluster, KafkaMessage } from 'kafkajs';
import { withoutAbortedRecords, type AbortedTransaction, type TransactionalRecord } from './aborted-transactions.js';
import { createConsumer, type KafkaSource } from './client.js';

/**
 * Reading partitions without a consumer group: each partition's records fetched straight from
 * its leader, at offsets the caller keeps. A group costs a private group's join (and the broker
 * holds a new group's first join for `group.initial.rebalance.delay.ms`, 3 s by default) for a
 * read that only needs a position of its own. README "Reading changelogs".
 */

/** A fetched record as kafkajs decodes it, with the record batch it came in. */
export type FetchedRecord = KafkaMessage &
  TransactionalRecord & { batchContext?: { firstOffset: string; lastOffsetDelta: number } };

interface FetchedPartition {
  partition: number;
  abortedTransactions?: AbortedTransaction[];
  messages: FetchedRecord[];
}

/** Fetch's isolation level: only records of committed transactions (and of none). */
const READ_COMMITTED = 1;
/** A consumer's replica id in a fetch (a follower's is its broker id). */
const CONSUMER_REPLICA = -1;
/** The bytes of one fetch response, whatever the number of partitions in it. */
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

export interface PartitionBatch {
  partition: number;
  /** The committed records, in offset order. */
  messages: KafkaMessage[];
  /**
   * The offset to fetch next: after the last record batch the fetch returned, its aborted records
   * and transaction markers included (the Java consumer's position); the fetch offset when it
   * returned none (nothing committed there yet).
   */
  next: number;
}

export interface LeaderFetchOptions {
  /** How long a leader may hold a fetch that finds nothing to return (an open transaction). */
  maxWaitMs: number;
  maxBytesPerPartition: number;
}

/**
 * A cluster of its own: kafkajs's client API has no group-less consumer, but a consumer's cluster
 * (metadata, a connection per broker, a broker's `fetch` and `listOffsets`) is handed to its
 * partition assigners, a typed public hook, so it is taken from there. The consumer itself never
 * connects or joins. `readUncommitted` is the isolation of the offsets the cluster lists.
 */
export function privateCluster(kafka: KafkaSource, options: { readUncommitted: boolean }): Cluster {
  let cluster: Cluster | undefined;
  createConsumer(kafka, {
    groupId: 'msgbridge-no-group',
    readUncommitted: options.readUncommitted,
    partitionAssigners: [
      (config) => {
        cluster = config.cluster;
        return {
          name: 'none',
          version: 0,
          assign: async () => [],
          protocol: () => ({ name: 'none', metadata: Buffer.alloc(0) }),
        };
      },
    ],
  });
  if (!cluster) throw new Error('kafkajs did not hand the consumer cluster to its partition assigner');
  return cluster;
}

/**
 * One fetch of `positions` (partition → offset) of `topic`, from each partition's leader as the
 * cluster's metadata names it (leaders asked at once), read_committed. A leader that is gone or
 * moved fails the whole round with kafkajs's retriable error: the caller refreshes the metadata
 * and asks again (`whileLeadersMove`); nothing was consumed, since the positions are the caller's.
 */
export async function fetchFromLeaders(
  cluster: Cluster,
  topic: string,
  positions: ReadonlyMap<number, number>,
  options: LeaderFetchOptions,
): Promise<PartitionBatch[]> {
  // A partition without a leader is listed under node -1 (being elected).
  const byLeader = Object.entries(cluster.findLeaderForPartitions(topic, [...positions.keys()])).filter(
    ([nodeId]) => Number(nodeId) >= 0,
  );
  const led = new Set(byLeader.flatMap(([, partitions]) => partitions));
  const leaderless = [...positions.keys()].filter((p) => !led.has(p));
  if (leaderless.length > 0) throw new NoLeader(topic, leaderless);
  const rounds = await Promise.all(
    byLeader.map(async ([nodeId, partitions]) => {
      const broker = await cluster.findBroker({ nodeId });
      const requested = partitions.map((partition) => ({
        partition,
        fetchOffset: String(positions.get(partition)),
        maxBytes: options.maxBytesPerPartition,
      }));
      const { responses } = (await broker.fetch({
        replicaId: CONSUMER_REPLICA,
        isolationLevel: READ_COMMITTED,
        maxWaitTime: options.maxWaitMs,
        minBytes: 1,
        maxBytes: Math.min(MAX_RESPONSE_BYTES, Math.max(1, partitions.length) * options.maxBytesPerPartition),
        topics: [{ topic, partitions: requested }],
      })) as { responses: { topicName: string; partitions: FetchedPartition[] }[] };
      return responses
        .filter((r) => r.topicName === topic)
        .flatMap((r) => r.partitions)
        .filter((data) => positions.has(data.partition))
        .map((data) => batchOf(positions.get(data.partition)!, data));
    }),
  );
  return rounds.flat();
}

function batchOf(from: number, data: FetchedPartition): PartitionBatch {
  let next = from;
  const last = data.messages.at(-1);
  // kafkajs drops a record batch the response's byte limit cut short: the last one it kept is whole.
  if (last?.batchContext)
    next = Math.max(from, Number(last.batchContext.firstOffset) + last.batchContext.lastOffsetDelta + 1);
  else if (last) next = Math.max(from, Number(last.offset) + 1);
  const messages = committedRecords(data.messages, data.abortedTransactions ?? [], from);
  return { partition: data.partition, messages, next };
}

/**
 * The records a read_committed consumer sees among those fetched from `from`: none of an aborted
 * transaction (aborted-transactions.ts), no transaction markers, none below `from` (a compressed
 * batch starts before it).
 */
export function committedRecords(
  records: FetchedRecord[],
  abortedTransactions: AbortedTransaction[],
  from: number,
): KafkaMessage[] {
  return withoutAbortedRecords(records, abortedTransactions).filter(
    (record) => !record.isControlRecord && Number(record.offset) >= from,
  );
}

/** A partition whose leader the metadata does not name (being elected): retriable, as kafkajs's own. */
class NoLeader extends Error {
  readonly retriable = true;
  constructor(topic: string, partitions: number[]) {
    super(`topic ${topic} has no leader for partition ${partitions.join(', ')}`);
    this.name = 'NoLeader';
  }
}
