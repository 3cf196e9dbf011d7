/**
 * The small surface the relay needs from a Kafka client. kafkajs (kafkajs-producer.ts) and
 * @platformatic/kafka (platformatic-producer.ts) implement it; `kafka.client` picks the
 * ingress's.
 */
export interface RecordToWrite {
  key: string | Buffer | null;
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
  /** Resolves once every record is acknowledged by all in-sync replicas (acks=all); RecordTooLargeError when one cannot fit. */
  send(batches: TopicRecords[]): Promise<void>;
  disconnect(): Promise<void>;
  /**
   * One metadata round trip for these topics, proving that Kafka answers this producer's
   * client and that every partition of them has a leader; rejects when not (see
   * assertWritable). Used to notice an outage while nothing is being sent.
   */
  probe?(topics: string[]): Promise<void>;
}

/** One partition as a metadata answer describes it; `leader` is -1 while it has none. */
export interface PartitionLeader {
  topic: string;
  partition: number;
  leader: number;
}

/**
 * Throws when these topics cannot take writes although Kafka answered their metadata: a topic
 * missing from the answer, or a partition without a leader (a produce request to it would
 * fail). Shared by the clients' probes.
 */
export function assertWritable(topics: readonly string[], partitions: readonly PartitionLeader[]): void {
  const problems: string[] = [];
  for (const topic of topics) {
    const own = partitions.filter((p) => p.topic === topic);
    if (own.length === 0) problems.push(`topic ${topic} is missing`);
    const leaderless = own.filter((p) => p.leader < 0).map((p) => p.partition);
    if (leaderless.length > 0) problems.push(`topic ${topic} has no leader for partition${leaderless.length > 1 ? 's' : ''} ${leaderless.sort((a, b) => a - b).join(', ')}`);
  }
  if (problems.length > 0) throw new Error(`Kafka answers but cannot take writes: ${problems.join('; ')}`);
}
