/**
 * The small surface the relay needs from a Kafka client. kafkajs (kafkajs-producer.ts) and
 * @platformatic/kafka (platformatic-producer.ts) implement it; `kafka.client` picks the
 * ingress's.
 */
export interface RecordToWrite {
  key: string | Buffer | null;
  /** Where it goes; unset = the client's partitioner (the Java key hash, see partitioner.ts). */
  partition?: number;
  value: string | Buffer;
  headers: Record<string, string | Buffer>;
}

export interface TopicRecords {
  topic: string;
  records: RecordToWrite[];
}

/**
 * A produce refused because a record (or its batch) exceeds what the topic or broker takes
 * (max.message.bytes): retrying it as it is can never succeed. Adapters translate their
 * client's error into this.
 */
export class RecordTooLargeError extends Error {
  override readonly name = 'RecordTooLargeError';
}

export function isRecordTooLarge(error: unknown): boolean {
  return error instanceof RecordTooLargeError || (error instanceof Error && error.cause instanceof RecordTooLargeError);
}

export interface RecordProducer {
  connect(): Promise<void>;
  /**
   * Resolves once every record is acknowledged by all in-sync replicas (acks=all); RecordTooLargeError when one cannot
   * fit.
   */
  send(batches: TopicRecords[]): Promise<void>;
  disconnect(): Promise<void>;
  /**
   * One metadata round trip for these topics, proving that Kafka answers this producer's
   * client and that every partition of them has a leader; rejects when not (see
   * assertWritable). Used to notice an outage while nothing is being sent.
   */
  probe?(topics: string[]): Promise<void>;
  /**
   * The brokers and partition leaders of these topics, freshly asked (the client's own metadata
   * cache is refreshed with it, so that its next send goes where this answer says). A client
   * without it is used as one lane (see batching-publisher.ts).
   */
  layout?(topics: string[]): Promise<ClusterLayout>;
}

/** A metadata answer: every broker's address and every partition's leader and in-sync replicas. */
export interface ClusterLayout {
  /** Broker id → `host:port` as the cluster advertises it. */
  brokers: Map<number, string>;
  partitions: PartitionLeader[];
}

/**
 * Creates a new, unconnected producer. `bootstrapFirst` are addresses to try before the
 * configured bootstrap brokers: a client asks the first one that accepts a connection for
 * metadata and its producer id, and a hung broker still accepts connections, so a replacement
 * producer is steered towards brokers known to answer.
 */
export type ProducerFactory = (bootstrapFirst?: readonly string[]) => RecordProducer;

/** `first` then the rest of `brokers`, without repeats. */
export function preferBrokers(brokers: readonly string[], first: readonly string[] = []): string[] {
  return [...new Set([...first, ...brokers])];
}

/** Kafka answered, but some partitions cannot take acks=all writes now: a new producer would not help. */
export class NotWritableError extends Error {
  override readonly name = 'NotWritableError';
}

/** One partition as a metadata answer describes it; `leader` is -1 while it has none. */
export interface PartitionLeader {
  topic: string;
  partition: number;
  leader: number;
  /** Replicas in sync, when the answer says. */
  isr?: number;
}

/**
 * Throws when these topics cannot take writes although Kafka answered their metadata: a topic
 * missing from the answer, a partition without a leader, or one with fewer in-sync replicas
 * than the topic's min.insync.replicas (`minInsync`, when known): an acks=all produce request
 * to it would fail (NOT_ENOUGH_REPLICAS). Shared by the clients' probes and the publisher.
 */
export function assertWritable(
  topics: readonly string[],
  partitions: readonly PartitionLeader[],
  minInsync?: ReadonlyMap<string, number>,
): void {
  const problems: string[] = [];
  const list = (ids: number[]) => `partition${ids.length > 1 ? 's' : ''} ${ids.sort((a, b) => a - b).join(', ')}`;
  for (const topic of topics) {
    const own = partitions.filter((p) => p.topic === topic);
    if (own.length === 0) problems.push(`topic ${topic} is missing`);
    const leaderless = own.filter((p) => p.leader < 0).map((p) => p.partition);
    if (leaderless.length > 0) problems.push(`topic ${topic} has no leader for ${list(leaderless)}`);
    const needed = minInsync?.get(topic) ?? 1;
    const short = own.filter((p) => p.leader >= 0 && p.isr !== undefined && p.isr < needed).map((p) => p.partition);
    if (short.length > 0)
      problems.push(
        `topic ${topic} has fewer than ${needed} in-sync replicas (min.insync.replicas) for ${list(short)}`,
      );
  }
  if (problems.length > 0) throw new NotWritableError(`Kafka answers but cannot take writes: ${problems.join('; ')}`);
}
