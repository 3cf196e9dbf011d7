import { consumedRecord, createConsumer, type KafkaSource } from './client.js';
import type { ConsumedRecord } from './group-consumer.js';

/**
 * A short-lived reader of whole topics for the operator commands (`msgbridge tail`, `msgbridge
 * send`'s follow): a private group that commits nothing, built by `createConsumer` (its retry
 * policy, read_committed, no topic created by subscribing; the failover fix applies to it as to
 * every consumer).
 */
export interface TopicSubscriptionOptions {
  /** A group of its own (a random suffix: nothing else joins it). */
  groupId: string;
  topics: string[];
  /** Start at the oldest record instead of the end. */
  fromBeginning: boolean;
  /** The longest a fetch waits for records. */
  maxWaitTimeInMs: number;
  /** Each record, one at a time, in each partition's order. */
  onRecord(record: ConsumedRecord): Promise<void> | void;
}

export interface TopicSubscription {
  /** Resolves when the member first joined its group: `seek` takes effect from then on. */
  joined: Promise<void>;
  /** Moves a partition's position (`offset`: the next record to read). */
  seek(topic: string, partition: number, offset: string): void;
  /** Leaves the group and disconnects. */
  stop(): Promise<void>;
}

/** Connects, subscribes and starts reading; resolves once the reading runs (not yet joined: see `joined`). */
export async function subscribeTopics(
  kafka: KafkaSource,
  options: TopicSubscriptionOptions,
): Promise<TopicSubscription> {
  const consumer = createConsumer(kafka, { groupId: options.groupId, maxWaitTimeInMs: options.maxWaitTimeInMs });
  await consumer.connect();
  await consumer.subscribe({ topics: options.topics, fromBeginning: options.fromBeginning });
  const joined = new Promise<void>((resolve) => consumer.on(consumer.events.GROUP_JOIN, () => resolve()));
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ topic, partition, message }) => options.onRecord(consumedRecord(topic, partition, message)),
  });
  return {
    joined,
    seek: (topic, partition, offset) => consumer.seek({ topic, partition, offset }),
    stop: () => consumer.disconnect(),
  };
}
