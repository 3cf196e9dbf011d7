import './kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed
import { CompressionTypes, type Admin, type Producer } from 'kafkajs';
import {
  assertWritable,
  RecordTooLargeError,
  type ClusterLayout,
  type RecordProducer,
  type TopicRecords,
} from './port.js';
import { kafkajsClient, type KafkaSource } from './client.js';
import { errorMessage } from '../platform/errors.js';

/** kafkajs protocol errors that mean a record can never fit. */
const TOO_LARGE = new Set(['MESSAGE_TOO_LARGE', 'RECORD_LIST_TOO_LARGE']);

function tooLarge(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 5; depth++) {
    if (TOO_LARGE.has((e as { type?: string }).type ?? '')) return true;
    const errors = (e as { errors?: unknown[] }).errors;
    if (Array.isArray(errors) && errors.some((inner) => TOO_LARGE.has((inner as { type?: string })?.type ?? '')))
      return true;
    e = (e as { originalError?: unknown; cause?: unknown }).originalError ?? (e as { cause?: unknown }).cause;
  }
  return false;
}

export interface KafkajsProducerOptions {
  /** Idempotent producer: kafkajs makes it safe only with one request in flight. */
  idempotent?: boolean;
  /** Per-request timeout of the produce call. */
  timeoutMs?: number;
}

/** acks=all producer behind the RecordProducer port. */
export function createKafkajsProducer(kafka: KafkaSource, options: KafkajsProducerOptions = {}): RecordProducer {
  const idempotent = options.idempotent ?? true;
  const producer: Producer = kafkajsClient(kafka).producer({
    idempotent,
    maxInFlightRequests: idempotent ? 1 : undefined,
    allowAutoTopicCreation: false,
    retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 1000 },
  });
  // kafkajs's producer has no metadata call of its own: probes go through an admin client of
  // the same configuration, created on first use and closed with the producer.
  // The producer's own metadata is refreshed by kafkajs when a broker answers NOT_LEADER, or
  // after metadataMaxAge: a lane (batching-publisher.ts) may reach a moved partition's old
  // leader once before it learns.
  let admin: Admin | undefined;
  const layout = async (topics: string[]): Promise<ClusterLayout> => {
    admin ??= kafkajsClient(kafka).admin({ retry: { retries: 0 } });
    await admin.connect();
    const metadata = await admin.fetchTopicMetadata({ topics });
    const cluster = await admin.describeCluster();
    return {
      brokers: new Map(cluster.brokers.map((b) => [b.nodeId, `${b.host}:${b.port}`])),
      partitions: metadata.topics.flatMap((t) =>
        t.partitions.map((p) => ({ topic: t.name, partition: p.partitionId, leader: p.leader, isr: p.isr.length })),
      ),
    };
  };
  return {
    connect: () => producer.connect(),
    async disconnect() {
      const closing = admin?.disconnect().catch(() => {});
      admin = undefined;
      await Promise.all([producer.disconnect(), closing]);
    },
    async probe(topics: string[]) {
      assertWritable(topics, (await layout(topics)).partitions);
    },
    layout,
    async send(batches: TopicRecords[]) {
      await producer
        .sendBatch({
          acks: -1,
          timeout: options.timeoutMs ?? 30_000,
          compression: CompressionTypes.None,
          topicMessages: batches.map((b) => ({
            topic: b.topic,
            messages: b.records.map((r) => ({
              key: r.key,
              value: r.value,
              headers: r.headers,
              partition: r.partition,
            })),
          })),
        })
        .catch((error: unknown) => {
          if (tooLarge(error))
            throw new RecordTooLargeError(`Kafka refused a record as too large: ${errorMessage(error)}`, {
              cause: error,
            });
          throw error;
        });
    },
  };
}
