import type { RecordProducer, RecordToWrite, TopicRecords } from '../kafka/port.js';
import { ReplaceableProducer } from '../kafka/replaceable-producer.js';

/**
 * Publishes what became of each request: its result and (for an invalid request) its DLQ
 * record, in batches without adding latency: while one produce request is in flight, new
 * records queue; when it returns, everything queued (up to `maxBatch`) goes out as the next
 * request. Each caller's promise settles with its own batch. The queue needs no bound of its
 * own: every record belongs to a request the keyed runner already counts.
 *
 * A producer is never reused after a failed produce (src/kafka/README.md, "A failed producer is
 * never reused"; ReplaceableProducer): the next batch connects a new one, and the callers retry
 * their records with backoff.
 */
export interface ResultPublisherOptions {
  createProducer: () => RecordProducer;
  maxBatch?: number;
  /**
   * How long the first record after an idle moment waits for others before it is produced (ms,
   * default 0). While a produce is in flight records queue anyway; this groups those of a sender
   * working below its capacity (the results of one rate-limit grant), at a produce request each.
   */
  lingerMs?: number;
  /** A produce in flight longer than this counts as failing for `publishable` (ms). */
  stallMs?: number;
  /** Called when a producer is dropped after a failure. */
  onReplace?: (error: unknown) => void;
  /** Called once when produces start failing (with the cause) and once when one succeeds again. */
  onHealthChange?: (ok: boolean, error?: unknown) => void;
}

interface Queued {
  topic: string;
  record: RecordToWrite;
  resolve: () => void;
  reject: (e: unknown) => void;
}

export class ResultPublisher {
  private queue: Queued[] = [];
  private sending = false;
  private readonly producers = new ReplaceableProducer();
  private failing = false;
  /** When the produce in flight started (performance.now()), if one is. */
  private sendingSince: number | undefined;
  private readonly maxBatch: number;
  private readonly lingerMs: number;

  constructor(private readonly options: ResultPublisherOptions) {
    this.maxBatch = options.maxBatch ?? 1000;
    this.lingerMs = options.lingerMs ?? 0;
  }

  /** Connects the first producer (a start-up failure is the caller's to report). */
  async start(): Promise<void> {
    await this.connected();
  }

  /** False after a failed produce until one succeeds again, and while one hangs past `stallMs`. */
  get publishable(): boolean {
    if (this.failing) return false;
    const stallMs = this.options.stallMs;
    return stallMs === undefined || this.sendingSince === undefined || performance.now() - this.sendingSince < stallMs;
  }

  publish(topic: string, record: RecordToWrite): Promise<void> {
    if (this.producers.closed) return Promise.reject(new Error('the result publisher is closed'));
    return new Promise((resolve, reject) => {
      this.queue.push({ topic, record, resolve, reject });
      if (this.sending) return;
      this.sending = true;
      if (this.lingerMs > 0) setTimeout(() => void this.flush(), this.lingerMs);
      else void this.flush();
    });
  }

  async close(): Promise<void> {
    await this.producers.close()?.disconnect();
  }

  private async connected(): Promise<RecordProducer> {
    const producer = await this.producers.connected(() => this.options.createProducer());
    if (!producer) throw new Error('the result publisher is closed');
    return producer;
  }

  /** Produces what is queued, batch after batch; `sending` is already true (set by publish). */
  private async flush(): Promise<void> {
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
        let producer: RecordProducer | undefined;
        try {
          this.sendingSince = performance.now();
          producer = await this.connected();
          await producer.send(batches);
          if (this.failing) this.options.onHealthChange?.(true);
          this.failing = false;
          for (const item of batch) item.resolve();
        } catch (error) {
          if (!this.failing) this.options.onHealthChange?.(false, error);
          this.failing = true;
          if (producer && this.producers.discard(producer)) this.options.onReplace?.(error);
          for (const item of batch) item.reject(error);
        } finally {
          this.sendingSince = undefined;
        }
      }
    } finally {
      this.sending = false;
    }
  }
}
