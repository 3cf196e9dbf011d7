import { randomUUID } from 'node:crypto';
import type { KafkaMessage } from 'kafkajs';
import { MsgbridgeError } from '../platform/errors.js';
import { consumedRecord, createConsumer, type KafkaSource, withKafkajsAdmin } from './client.js';
import { EndOfLog, onBatchEnd, partitionEnds, type PartitionEnds } from './changelog-reader.js';
import type { ConsumedRecord } from './group-consumer.js';

/**
 * Reading a bounded range of a topic (the dead-letter commands, src/commands/dlq.ts): each
 * partition from an offset up to an end fixed before the read, committed records only, in a
 * private one-member group that commits nothing. The caller can stop early (a page is full), and
 * learns where each partition stopped, so the next page starts exactly there. The start of a
 * time window is found with the broker's offset index (ListOffsets by timestamp), never by
 * reading from the beginning.
 */

export type { PartitionEnds };

/** Low and high watermark of every partition (read_uncommitted: the high watermark). */
export function topicEnds(kafka: KafkaSource, topic: string): Promise<Map<number, PartitionEnds>> {
  return partitionEnds(kafka, topic);
}

/**
 * Per partition, the first offset whose record timestamp is at or after `timestampMs` (the
 * broker's time index); a partition with no such record answers its high watermark.
 */
export async function offsetsAtTime(
  kafka: KafkaSource,
  topic: string,
  timestampMs: number,
  ends: Map<number, PartitionEnds>,
): Promise<Map<number, number>> {
  const answer = await withKafkajsAdmin(kafka, (admin) => admin.fetchTopicOffsetsByTimestamp(topic, timestampMs));
  const offsets = new Map<number, number>();
  for (const [partition, end] of ends) {
    const found = Number(answer.find((p) => p.partition === partition)?.offset ?? -1);
    offsets.set(partition, found >= 0 ? Math.min(Math.max(found, end.low), end.high) : end.high);
  }
  return offsets;
}

export interface RangeReadOptions {
  kafka: KafkaSource;
  topic: string;
  /** Where each partition starts (partitions absent here are not read). */
  from: Map<number, number>;
  /** Where each partition ends (exclusive); at most its high watermark. */
  to: Map<number, number>;
  /** Every record of the range, in offset order per partition; 'stop' ends the read at once. */
  onRecord(record: ConsumedRecord): 'continue' | 'stop';
  /** The whole read must finish within this (default 120 s). */
  timeoutMs?: number;
  /** The reader is a private group `<prefix>-<uuid>` that never commits (ACLs: Read on this prefix). */
  groupIdPrefix?: string;
}

export interface RangeReadResult {
  /** Per partition: the offset after the last record handed to onRecord (or its start). */
  next: Map<number, number>;
  /** onRecord said stop before every partition reached its end. */
  stopped: boolean;
}

export async function readRange(options: RangeReadOptions): Promise<RangeReadResult> {
  const { kafka, topic, from, to } = options;
  const timeoutMs = options.timeoutMs ?? 120_000;
  const bounds = new Map<number, PartitionEnds>();
  const next = new Map<number, number>();
  for (const [partition, start] of from) {
    const end = to.get(partition) ?? start;
    bounds.set(partition, { low: start, high: end });
    next.set(partition, start);
  }
  const tracker = new EndOfLog(bounds);
  for (const [partition, start] of from) tracker.expect(partition, start);
  if (tracker.done) return { next, stopped: false };
  const { pending } = tracker;

  const consumer = createConsumer(kafka, {
    groupId: `${options.groupIdPrefix ?? 'msgbridge-dlq-read'}-${randomUUID()}`,
    maxWaitTimeInMs: 200,
  });
  let stopped = false;
  let finish: (error?: Error) => void = () => {};
  const finished = new Promise<void>((resolve, reject) => (finish = (error) => (error ? reject(error) : resolve())));
  // Awaited below; this keeps a rejection while nothing awaits it yet (an abort or a timeout during
  // the consumer's join) from being reported as unhandled, which ends the process.
  finished.catch(() => undefined);

  onBatchEnd(consumer, topic, (partition, position) => {
    if (stopped || !tracker.reached(partition, position)) return;
    consumer.pause([{ topic, partitions: [partition] }]);
    if (tracker.done) finish();
  });
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    const assigned = payload.memberAssignment[topic] ?? [];
    const others = assigned.filter((p) => !pending.has(p));
    if (others.length > 0) consumer.pause([{ topic, partitions: others }]);
    for (const p of assigned) if (pending.has(p)) consumer.seek({ topic, partition: p, offset: String(next.get(p)) });
  });
  consumer.on(consumer.events.CRASH, ({ payload }) => {
    if (!payload.restart) finish(payload.error);
  });

  const deliver = (partition: number, messages: KafkaMessage[]): void => {
    const end = pending.get(partition);
    if (end === undefined) return;
    for (const m of messages) {
      if (stopped) return;
      const offset = Number(m.offset);
      if (offset >= end) break;
      if (offset < next.get(partition)!) continue;
      next.set(partition, offset + 1);
      if (options.onRecord(consumedRecord(topic, partition, m)) === 'stop') {
        stopped = true;
        finish();
        return;
      }
    }
  };

  const timer = setTimeout(() => {
    finish(
      new MsgbridgeError(
        'KAFKA_UNAVAILABLE',
        `reading ${topic} did not reach the end of its range within ${timeoutMs} ms (${tracker.describe()}): Kafka is slow or unreachable`,
      ),
    );
  }, timeoutMs);
  try {
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        try {
          deliver(batch.partition, batch.messages);
        } catch (error) {
          finish(error instanceof Error ? error : new Error(String(error)));
        }
      },
    });
    await finished;
    return { next, stopped };
  } finally {
    clearTimeout(timer);
    await consumer.disconnect().catch(() => undefined);
  }
}
