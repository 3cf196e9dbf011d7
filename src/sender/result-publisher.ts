import type { RecordProducer, RecordToWrite, TopicRecords } from '../kafka/port.js';

/**
 * Publishes records in batches without adding latency: while one produce request is in
 * flight, new records queue; when it returns, everything queued (up to `maxBatch`) goes out
 * as the next request. Each caller's promise settles with its own batch. The queue needs no
 * bound of its own: every record belongs to a request the keyed runner already counts.
 */
export class BatchingPublisher {
  private queue: { topic: string; record: RecordToWrite; resolve: () => void; reject: (e: unknown) => void }[] = [];
  private sending = false;

  constructor(
    private readonly producer: RecordProducer,
    private readonly maxBatch = 1000,
  ) {}

  publish(topic: string, record: RecordToWrite): Promise<void> {
    return new Promise((resolve, reject) => {
      this.queue.push({ topic, record, resolve, reject });
      if (!this.sending) void this.flush();
    });
  }

  private async flush(): Promise<void> {
    this.sending = true;
    try {
      while (this.queue.length > 0) {
        const batch = this.queue.splice(0, this.maxBatch);
        const byTopic = new Map<string, RecordToWrite[]>();
        for (const item of batch) {
          const list = byTopic.get(item.topic) ?? [];
          list.push(item.record);
          byTopic.set(item.topic, list);
        }
        const batches: TopicRecords[] = [...byTopic].map(([topic, records]) => ({ topic, records }));
        try {
          await this.producer.send(batches);
          for (const item of batch) item.resolve();
        } catch (error) {
          for (const item of batch) item.reject(error);
        }
      }
    } finally {
      this.sending = false;
    }
  }
}
