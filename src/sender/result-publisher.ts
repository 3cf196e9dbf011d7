import { BatchingPublisher, type PublisherObserver } from '../kafka/batching-publisher.js';
import type { ProducerFactory, RecordToWrite } from '../kafka/port.js';

/**
 * Publishes what becomes of each request: its `calling`, `done` and `released` ledger records,
 * its result, its DLQ record. On the ingress's batching publisher (src/kafka/batching-publisher.ts):
 * a lane per leader broker, each with its own producer and one produce request in flight, so a
 * dead or frozen broker holds only the records of the partitions it leads. One producer for
 * everything made a produce request fail whenever any of its records went to that broker: the
 * `done` records of calls already answered waited with them, and a member killed meanwhile, or
 * one that lost its partitions, left those calls to be made again (README "Sent once").
 *
 * A record refused or failed (a broker down, a queue full, a timeout) rejects its promise; the
 * processor publishes it again with backoff. The queue bound only guards against a bug: every
 * record belongs to a request the keyed runner already counts.
 */
export interface ResultPublisherOptions {
  createProducer: ProducerFactory;
  /** The topics written: their leaders decide the lanes. */
  topics: string[];
  /** A produce request unanswered this long is given up and its lane's producer replaced (ms). */
  publishTimeoutMs: number;
  minInsyncReplicas?: ReadonlyMap<string, number> | undefined;
  /** Records held at most (queued and in flight). */
  maxRecords: number;
  observer?: PublisherObserver;
}

export class ResultPublisher {
  private readonly publisher: BatchingPublisher;
  private closed = false;

  constructor(options: ResultPublisherOptions) {
    this.publisher = new BatchingPublisher({
      createProducer: options.createProducer,
      batchMaxEvents: 1000,
      batchMaxBytes: 1_000_000,
      queueMaxEvents: options.maxRecords,
      queueMaxBytes: 256 * 1024 * 1024,
      publishTimeoutMs: options.publishTimeoutMs,
      probeTopics: options.topics,
      probeTimeoutMs: options.publishTimeoutMs,
      ...(options.minInsyncReplicas ? { minInsyncReplicas: options.minInsyncReplicas } : {}),
      ...(options.observer ? { observer: options.observer } : {}),
    });
  }

  /** Reads where the partitions are and connects a producer per leader (KAFKA_UNAVAILABLE when it cannot). */
  start(): Promise<void> {
    return this.publisher.start();
  }

  /** Every lane connected, proven writable and unstuck (and not closed): what /readyz reports. */
  get publishable(): boolean {
    return this.publisher.ready;
  }

  publish(topic: string, record: RecordToWrite): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the result publisher is closed'));
    return new Promise((resolve, reject) => {
      // One shape for every record (a spread of the callers' several shapes was a slow copy).
      const event = {
        topic,
        key: record.key,
        value: record.value,
        headers: record.headers,
        partition: record.partition,
      };
      const refused = this.publisher.publish(event, (error) => (error ? reject(error) : resolve()));
      if (refused) reject(refused);
    });
  }

  /** Lets what was admitted finish (bounded by the publish timeout), then disconnects. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.publisher.drain();
  }
}
