import { consumedRecord, type KafkaSource, withKafkajsAdmin } from './client.js';
import { boundedRead, partitionEnds, type PartitionEnds } from './changelog-reader.js';
import type { ConsumedRecord } from './group-consumer.js';

/**
 * Reading a bounded range of a topic (the dead-letter commands, src/commands/dlq.ts): each
 * partition from an offset up to an end fixed before the read, committed records only, fetched
 * from each partition's leader without a consumer group (changelog-reader.ts). The caller can stop early (a page is full), and
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
}

export interface RangeReadResult {
  /** Per partition: the offset after the last record handed to onRecord (or its start). */
  next: Map<number, number>;
  /** onRecord said stop before every partition reached its end. */
  stopped: boolean;
}

export async function readRange(options: RangeReadOptions): Promise<RangeReadResult> {
  const { topic, from, to } = options;
  const timeoutMs = options.timeoutMs ?? 120_000;
  const next = new Map(from);
  let stopped = false;
  if ([...from].every(([partition, start]) => (to.get(partition) ?? start) <= start)) return { next, stopped };
  await boundedRead(
    {
      kafka: options.kafka,
      topic,
      timeoutMs,
      stuck: (where) =>
        `reading ${topic} did not reach the end of its range within ${timeoutMs} ms (${where}): Kafka is slow or unreachable`,
    },
    (read) =>
      read.fetchToEnds({
        from,
        to: new Map([...from.keys()].map((p) => [p, to.get(p) ?? from.get(p)!])),
        describe: `cannot read ${topic}`,
        onBatch: (partition, messages) => {
          for (const m of messages) {
            next.set(partition, Number(m.offset) + 1);
            if (options.onRecord(consumedRecord(topic, partition, m)) === 'stop') {
              stopped = true;
              return 'stop';
            }
          }
          return 'continue';
        },
      }),
  );
  return { next, stopped };
}
