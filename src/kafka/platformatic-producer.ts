import { isIP } from 'node:net';
import { ProduceAcks, Producer, type ProducerOptions, type SASLOptions } from '@platformatic/kafka';
import type { KafkaConfig } from '../config/schema.js';
import { javaCompatibleHash } from './partitioner.js';
import { tlsOptions } from './tls.js';
import {
  assertWritable,
  type ClusterLayout,
  type PartitionLeader,
  type RecordProducer,
  type TopicRecords,
} from './port.js';
import { errorMessage } from '../platform/errors.js';

/**
 * An acks=all, idempotent producer on @platformatic/kafka behind the RecordProducer port, built
 * from the same KafkaConfig as the kafkajs client. Its sends run one after another (overlapping
 * ones would share sequence numbers), its retries are bounded, and it refuses every send after a
 * failed one: why, measured, in src/kafka/README.md, "The @platformatic/kafka adapter". Keys are
 * placed with the Java hash (partitioner.ts). `connect()` obtains the producer id.
 */
export interface PlatformaticProducerOptions {
  brokers: string[];
  /** How long the broker may wait for the in-sync replicas (the produce request's timeout). */
  timeoutMs?: number;
  /** Attempts after the first, for each request; a send fails once they are spent. */
  retries?: number;
}

type Key = string | Buffer | null;
type Value = string | Buffer;

const toBuffer = (data: string | Buffer | null | undefined): Buffer | undefined =>
  data === null || data === undefined ? undefined : typeof data === 'string' ? Buffer.from(data) : data;

/** The producer's options, exported for tests: what is set and why is decided here only. */
export function platformaticProducerOptions(
  config: KafkaConfig,
  options: PlatformaticProducerOptions,
): ProducerOptions<Key, Value, string, string | Buffer> {
  if (options.brokers.length === 0)
    throw new Error('the platformatic producer needs at least one broker (start the local broker first)');
  const producerOptions: ProducerOptions<Key, Value, string, string | Buffer> = {
    clientId: config.clientId,
    bootstrapBrokers: options.brokers,
    connectTimeout: config.connectionTimeoutMs,
    requestTimeout: config.requestTimeoutMs,
    timeout: options.timeoutMs ?? config.requestTimeoutMs,
    // Above 1, or the library makes it infinite (see above). As kafkajs: 5, 100 ms doubling to 1 s.
    retries: Math.max(2, options.retries ?? 5),
    retryDelay: (_client, _operation, attempt) => Math.min(1000, 100 * 2 ** (attempt - 1)),
    idempotent: true,
    acks: ProduceAcks.ALL,
    autocreateTopics: false,
    // As the Java client: refreshed every 5 minutes, and at once when a broker says it is stale.
    metadataMaxAge: 300_000,
    serializers: { key: toBuffer, value: toBuffer, headerKey: toBuffer, headerValue: toBuffer },
    partitioner: (_message, key) => (key === undefined ? 0 : javaCompatibleHash(key)),
  };
  const tls = tlsOptions(config.ssl);
  if (tls) {
    producerOptions.tls = tls;
    // SNI carries host names only (RFC 6066): Node warns when it is given an IP address.
    producerOptions.tlsServerName = !options.brokers.every(
      (broker) => isIP(broker.slice(0, broker.lastIndexOf(':'))) !== 0,
    );
  }
  if (config.sasl) {
    const mechanism = ({ plain: 'PLAIN', 'scram-sha-256': 'SCRAM-SHA-256', 'scram-sha-512': 'SCRAM-SHA-512' } as const)[
      config.sasl.mechanism
    ];
    producerOptions.sasl = {
      mechanism,
      username: config.sasl.username,
      password: config.sasl.password,
    } satisfies SASLOptions;
  }
  return producerOptions;
}

export function createPlatformaticProducer(config: KafkaConfig, options: PlatformaticProducerOptions): RecordProducer {
  const producer = new Producer(platformaticProducerOptions(config, options));
  let tail: Promise<unknown> = Promise.resolve();
  let failed: unknown;

  const produce = async (batches: TopicRecords[]): Promise<void> => {
    if (failed !== undefined) {
      throw new Error(`an earlier send on this producer failed; it must be replaced (${errorMessage(failed)})`, {
        cause: failed,
      });
    }
    const messages = [];
    for (const { topic, records } of batches) {
      for (const r of records)
        messages.push({ topic, key: r.key, value: r.value, headers: r.headers, partition: r.partition });
    }
    try {
      await producer.send({ messages });
    } catch (err) {
      failed = err ?? new Error('send failed');
      throw err;
    }
  };

  // forceUpdate also replaces the client's cached metadata, which routes its next sends.
  const layout = async (topics: string[]): Promise<ClusterLayout> => {
    const metadata = await producer.metadata({ topics, forceUpdate: true });
    const partitions: PartitionLeader[] = [];
    for (const [topic, { partitions: described }] of metadata.topics) {
      described.forEach((p, partition) => partitions.push({ topic, partition, leader: p.leader, isr: p.isr.length }));
    }
    return { brokers: new Map([...metadata.brokers].map(([id, b]) => [id, `${b.host}:${b.port}`])), partitions };
  };

  return {
    async connect() {
      await producer.initIdempotentProducer({});
    },
    async probe(topics: string[]) {
      assertWritable(topics, (await layout(topics)).partitions);
    },
    layout,
    send(batches) {
      const sending = tail.then(() => produce(batches));
      tail = sending.catch(() => {});
      return sending;
    },
    async disconnect() {
      // A broker that stopped answering must not hold a drain or a replacement forever.
      let timer: NodeJS.Timeout | undefined;
      await Promise.race([
        producer.close().catch(() => {}),
        new Promise<void>((resolve) => {
          timer = setTimeout(resolve, config.connectionTimeoutMs + 1000);
          timer.unref();
        }),
      ]);
      clearTimeout(timer);
    },
  };
}
