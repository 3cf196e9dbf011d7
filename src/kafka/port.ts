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

export interface RecordProducer {
  connect(): Promise<void>;
  /** Resolves once every record is acknowledged by all in-sync replicas (acks=all). */
  send(batches: TopicRecords[]): Promise<void>;
  disconnect(): Promise<void>;
  /**
   * One metadata round trip for these topics, proving that Kafka answers this producer's
   * client; rejects when it does not. Used to notice an outage while nothing is being sent.
   */
  probe?(topics: string[]): Promise<void>;
}
