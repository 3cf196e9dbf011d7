import { isIP } from 'node:net';
import { ProduceAcks, Producer, type ProducerOptions, type SASLOptions } from '@platformatic/kafka';
import type { KafkaConfig } from '../config/schema.js';
import { javaCompatibleHash } from './partitioner.js';
import { tlsOptions } from './tls.js';
import { assertWritable, type ClusterLayout, type PartitionLeader, type RecordProducer, type TopicRecords } from './port.js';

/**
 * An acks=all, idempotent producer on @platformatic/kafka behind the RecordProducer port, built
 * from the same KafkaConfig as the kafkajs client (src/kafka/client.ts): brokers, client id,
 * TLS, SASL, connection and request timeouts.
 *
 * What the batching publisher relies on, and how this client keeps it:
 *
 * - One produce request in flight, in order. The idempotent producer forces `maxInflights: 1`
 *   per broker connection. But it reads a partition's next sequence number when it *builds*
 *   a request and advances it only when the response arrives, so two `send` calls overlapping
 *   on one producer would carry the same sequence numbers: the broker would answer the second
 *   with OUT_OF_ORDER_SEQUENCE or, when both batches have the same size, acknowledge it as a
 *   "duplicate" of the first without writing it (measured on 1.35.0: three overlapping sends
 *   of 10 records all acknowledged, 10 written; upstream platformatic/kafka#326, reported
 *   against 2.1.0, a line that needs Node 22). This adapter therefore runs its sends one
 *   after another itself, whatever the caller does (`maxInFlightBatches` > 1 just queues here).
 *
 * - Internal retries cannot reorder or duplicate. A retried request is rebuilt with the same
 *   (not yet advanced) sequence numbers, so a request that timed out but was written is
 *   recognised by the broker as a duplicate, as it should be. Retries are bounded: for an
 *   idempotent producer the library turns `retries` of 0, 1 or unset into "forever", which
 *   would never surface an outage (no 503, no reconnect), so a budget is set explicitly.
 *   Unlike kafkajs, this client does not retry a request that timed out (`requestTimeoutMs`):
 *   the send fails at once, the publisher answers 503 and replaces the producer. A broker
 *   that stops answering is noticed after one request timeout instead of after all retries.
 *
 * - A failed send poisons the producer. After a failure the library leaves the failed
 *   partitions' sequence numbers where they were, although the request may have been written;
 *   the next, different batch would reuse them, and one of the same size would be
 *   acknowledged as a duplicate without being written: an acknowledged event lost. That is
 *   the same hazard as with kafkajs, and the same cure holds: the publisher throws the
 *   producer away after any failed send and connects a new one (a new producer id). This
 *   adapter also refuses every send after a failure, so the rule does not depend on the
 *   caller alone.
 *
 * - Partitioning: the Java/kafkajs key hash, not this library's default (see partitioner.ts).
 *
 * The client connects lazily; `connect()` obtains the producer id (InitProducerId), which
 * proves that a broker answers and leaves nothing to do on the first send.
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
export function platformaticProducerOptions(config: KafkaConfig, options: PlatformaticProducerOptions): ProducerOptions<Key, Value, string, string | Buffer> {
  if (options.brokers.length === 0) throw new Error('the platformatic producer needs at least one broker (start the local broker first)');
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
    producerOptions.tlsServerName = !options.brokers.every((broker) => isIP(broker.slice(0, broker.lastIndexOf(':'))) !== 0);
  }
  if (config.sasl) {
    const mechanism = ({ plain: 'PLAIN', 'scram-sha-256': 'SCRAM-SHA-256', 'scram-sha-512': 'SCRAM-SHA-512' } as const)[config.sasl.mechanism];
    producerOptions.sasl = { mechanism, username: config.sasl.username, password: config.sasl.password } satisfies SASLOptions;
  }
  return producerOptions;
}

export function createPlatformaticProducer(config: KafkaConfig, options: PlatformaticProducerOptions): RecordProducer {
  const producer = new Producer(platformaticProducerOptions(config, options));
  let tail: Promise<unknown> = Promise.resolve();
  let failed: unknown;

  const produce = async (batches: TopicRecords[]): Promise<void> => {
    if (failed !== undefined) {
      throw new Error(`an earlier send on this producer failed; it must be replaced (${(failed as Error)?.message ?? String(failed)})`, { cause: failed });
    }
    const messages = [];
    for (const { topic, records } of batches) {
      for (const r of records) messages.push({ topic, key: r.key, value: r.value, headers: r.headers, partition: r.partition });
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
