import { performance } from 'node:perf_hooks';
import { Deque } from '../deque.js';
import { MsgbridgeError, type ErrorCode } from '../errors.js';
import type { RecordProducer, RecordToWrite, TopicRecords } from './port.js';

/**
 * Batching without latency (DESIGN §2) on the RecordProducer port.
 *
 * Events are queued; whenever no produce request is in flight, everything queued (bounded by
 * count and bytes) goes out as one `send`. Under light load a batch is one event and goes out
 * at once (no linger); under heavy load batches grow by themselves to whatever arrived during
 * the previous round trip. Each caller is told about its own event only when the batch that
 * carried it is acknowledged (acks=all).
 *
 * Per-key order. Events leave the queue in arrival order and, with one batch in flight (the
 * default), batch N+1 is only sent after batch N has finished, so nothing written later can
 * overtake something written earlier. Inside a batch, the client keeps the order of a
 * partition's records, and with the idempotent producer (max one request in flight per
 * connection, retries resent with the same sequence numbers) its internal retries cannot
 * reorder or duplicate them. Both clients behind the port (kafkajs-producer.ts,
 * platformatic-producer.ts) are used this way. What remains is failure:
 * when an event fails (its batch failed, or it timed out while still queued), every event of
 * the same topic and key that is still queued behind it fails too, so a later event of that
 * key cannot reach Kafka before the earlier one that the provider will now redeliver. Events
 * of other keys are unaffected. With `maxInFlightBatches` > 1 a failed batch cannot recall a
 * later batch already in flight, so that setting trades this guarantee for pipelining.
 *
 * After any failed send the producer is thrown away and a fresh one is connected (with
 * backoff) before anything else is sent. kafkajs rolls a partition's idempotence sequence
 * number back when a produce request fails, and @platformatic/kafka never advances it for a
 * failed one, including a request that timed out but was in fact written; their own retries
 * resend the same records, which the broker then recognises as duplicates, as it should. But
 * once they give up (retries are limited, hence kafkajs's "may invalidate EoS guarantees"
 * warning), the next, different batch would reuse those sequence numbers, and the broker
 * could acknowledge it as a "duplicate" of the written one without writing it: an
 * acknowledged event lost. A new producer gets a new producer id, so that cannot happen; this
 * is also how the publisher recovers when Kafka comes back, without a restart. While no
 * producer is connected, new events are refused at once (503 at the HTTP edge) instead of
 * waiting for a timeout.
 *
 * Pipelining. kafkajs's idempotent producer holds a per-broker lock for the whole produce
 * round trip, so a second batch in flight only waits behind the first, holding events that
 * could otherwise have joined a bigger next batch; on one broker it buys nothing (measured in
 * docs/benchmarks.md), and it would weaken the order guarantee above. @platformatic/kafka's
 * idempotent producer reads sequence numbers when it builds a request, so its adapter runs
 * sends one at a time (overlapping ones would be acknowledged without being written).
 */

export interface PublishRecord extends RecordToWrite {
  topic: string;
}

/** Called exactly once per admitted event: null when acknowledged, else why not. */
export type PublishCallback = (err: MsgbridgeError | null) => void;

export interface BatchInfo {
  events: number;
  bytes: number;
  durationMs: number;
  ok: boolean;
  error?: unknown;
}

export interface PublisherObserver {
  batch?(info: BatchInfo): void;
  connection?(connected: boolean, error?: unknown): void;
}

export interface BatchingPublisherOptions {
  /** A new, unconnected producer: called at start and after every failed send. */
  createProducer: () => RecordProducer;
  batchMaxEvents: number;
  batchMaxBytes: number;
  queueMaxEvents: number;
  queueMaxBytes: number;
  /** From admission to acknowledgement; past it the caller is told PUBLISH_TIMEOUT. */
  publishTimeoutMs: number;
  /** Produce requests in flight at once. 1 keeps per-key order across failures (see above). */
  maxInFlightBatches?: number;
  reconnectBackoffMs?: { initial: number; max: number };
  /** How often deadlines are checked (one timer for all events, not one per event). */
  sweepIntervalMs?: number;
  /**
   * An outage shows at the next send; with no traffic there is none. When nothing has been
   * acknowledged for this long and nothing is queued or in flight, the producer is asked for
   * the metadata of `probeTopics` (RecordProducer.probe), again every interval while idle. A
   * probe that fails or takes over `probeTimeoutMs` counts as a failed send: not ready, events
   * refused (503), a new producer connected with backoff. 0 (the default) turns probing off.
   */
  idleProbeIntervalMs?: number;
  probeTopics?: string[];
  probeTimeoutMs?: number;
  observer?: PublisherObserver;
}

export interface PublisherStats {
  queuedEvents: number;
  queuedBytes: number;
  inFlightEvents: number;
  inFlightBytes: number;
  connected: boolean;
  /** A batch has been in flight for longer than the publish timeout. */
  stalled: boolean;
}

interface Entry {
  record: PublishRecord;
  bytes: number;
  deadline: number;
  /** Null once the caller has been told. */
  cb: PublishCallback | null;
  /** Taken out of the queue without being sent (timed out, or failed for ordering). */
  dropped: boolean;
}

interface Batch {
  entries: Entry[];
  bytes: number;
  startedAt: number;
  producer: RecordProducer;
}

/** Bytes an event holds in memory and in a produce request: value, key, headers, framing. */
export function recordBytes(record: RecordToWrite): number {
  let n = 64 + record.value.length + (record.key === null ? 0 : record.key.length);
  for (const name in record.headers) n += name.length + record.headers[name]!.length + 8;
  return n;
}

function keyOf(record: PublishRecord): string {
  const key = record.key === null ? '' : typeof record.key === 'string' ? record.key : record.key.toString('latin1');
  return `${record.topic}\u0000${key}`;
}

const noop = () => {};
const EMPTY = Buffer.alloc(0);

export class BatchingPublisher {
  private readonly opts: Required<Omit<BatchingPublisherOptions, 'observer'>> & { observer: PublisherObserver };
  private producer: RecordProducer | undefined;
  private connected = false;
  private accepting = true;
  private closed = false;
  private started = false;

  private readonly queue = new Deque<Entry>();
  private queuedEvents = 0;
  private queuedBytes = 0;
  private inFlight: Batch[] = [];
  private inFlightEvents = 0;
  private inFlightBytes = 0;

  private flushScheduled = false;
  private sweepTimer: NodeJS.Timeout | undefined;
  private reconnecting = false;
  private cancelBackoff: (() => void) | undefined;
  private idleWaiters: (() => void)[] = [];

  /** When Kafka last proved it answers: producer connected, batch acknowledged or probe answered. */
  private lastHeardAt = 0;
  private probeTimer: NodeJS.Timeout | undefined;
  private probing = false;
  private sendsStarted = 0;

  constructor(options: BatchingPublisherOptions) {
    this.opts = {
      maxInFlightBatches: 1,
      reconnectBackoffMs: { initial: 100, max: 2000 },
      sweepIntervalMs: Math.max(10, Math.min(100, Math.floor(options.publishTimeoutMs / 10))),
      idleProbeIntervalMs: 0,
      probeTopics: [],
      probeTimeoutMs: 5000,
      observer: {},
      ...options,
    };
  }

  /** Connects the first producer; rejects with KAFKA_UNAVAILABLE when Kafka does not answer. */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    const producer = this.opts.createProducer();
    try {
      await producer.connect();
    } catch (err) {
      void producer.disconnect().catch(noop);
      throw new MsgbridgeError('KAFKA_UNAVAILABLE', `cannot connect the Kafka producer: ${(err as Error).message}`, { cause: err });
    }
    this.producer = producer;
    this.connected = true;
    this.lastHeardAt = performance.now();
    this.opts.observer.connection?.(true);
    this.sweepTimer = setInterval(() => this.sweep(), this.opts.sweepIntervalMs);
    this.sweepTimer.unref();
    if (this.opts.idleProbeIntervalMs > 0) {
      // Checked at a fraction of the interval, so that an idle outage shows within about 1.25 intervals.
      this.probeTimer = setInterval(() => void this.probeIfIdle(), Math.max(50, Math.floor(this.opts.idleProbeIntervalMs / 4)));
      this.probeTimer.unref();
    }
  }

  /**
   * Admits one event, or returns why not (and then never calls `cb`). Once admitted, `cb` is
   * called exactly once, never synchronously.
   */
  publish(record: PublishRecord, cb: PublishCallback): MsgbridgeError | undefined {
    const refused = this.admission(record);
    if (refused) return refused;
    const bytes = recordBytes(record);
    const pending = this.queuedEvents + this.inFlightEvents;
    if (pending > 0 && (pending + 1 > this.opts.queueMaxEvents || this.queuedBytes + this.inFlightBytes + bytes > this.opts.queueMaxBytes)) {
      return new MsgbridgeError('QUEUE_FULL', 'the publish queue is full');
    }
    this.queue.push({ record, bytes, deadline: performance.now() + this.opts.publishTimeoutMs, cb, dropped: false });
    this.queuedEvents++;
    this.queuedBytes += bytes;
    this.scheduleFlush();
    return undefined;
  }

  /** Why an event would be refused right now, ignoring its size; undefined when it would be admitted. */
  admission(record?: PublishRecord): MsgbridgeError | undefined {
    if (!this.accepting) return new MsgbridgeError('SHUTTING_DOWN', 'the ingress is shutting down');
    if (!this.connected) return new MsgbridgeError('KAFKA_UNAVAILABLE', 'Kafka is not reachable');
    if (record === undefined && this.queuedEvents + this.inFlightEvents >= this.opts.queueMaxEvents) {
      return new MsgbridgeError('QUEUE_FULL', 'the publish queue is full');
    }
    return undefined;
  }

  /** Bytes of the events held: queued or in flight. */
  heldBytes(): number {
    return this.queuedBytes + this.inFlightBytes;
  }

  /** Producer connected, no batch stuck past the publish timeout, queue below its bounds. */
  get ready(): boolean {
    const s = this.stats();
    return (
      this.accepting &&
      s.connected &&
      !s.stalled &&
      s.queuedEvents + s.inFlightEvents < this.opts.queueMaxEvents &&
      s.queuedBytes + s.inFlightBytes < this.opts.queueMaxBytes
    );
  }

  stats(): PublisherStats {
    const oldest = this.inFlight[0];
    return {
      queuedEvents: this.queuedEvents,
      queuedBytes: this.queuedBytes,
      inFlightEvents: this.inFlightEvents,
      inFlightBytes: this.inFlightBytes,
      connected: this.connected,
      stalled: oldest !== undefined && performance.now() - oldest.startedAt > this.opts.publishTimeoutMs,
    };
  }

  /**
   * Stops admitting, lets everything admitted finish (acknowledged, or failed by its own
   * deadline), then disconnects the producer. Callers bound it with their grace period.
   */
  async drain(): Promise<void> {
    this.accepting = false;
    if (this.queuedEvents + this.inFlight.length > 0) {
      await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    }
    this.closed = true;
    this.cancelBackoff?.();
    if (this.sweepTimer) clearInterval(this.sweepTimer);
    if (this.probeTimer) clearInterval(this.probeTimer);
    const producer = this.producer;
    this.producer = undefined;
    this.connected = false;
    if (producer) await producer.disconnect().catch(noop);
  }

  private scheduleFlush(): void {
    if (this.flushScheduled || !this.connected || this.inFlight.length >= this.opts.maxInFlightBatches) return;
    this.flushScheduled = true;
    // setImmediate rather than a microtask: every request the server read in this turn of the
    // event loop joins the first batch, at no added latency.
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    while (this.connected && this.queuedEvents > 0 && this.inFlight.length < this.opts.maxInFlightBatches) {
      this.send(this.takeBatch());
    }
  }

  private takeBatch(): Entry[] {
    const entries: Entry[] = [];
    let bytes = 0;
    const q = this.queue;
    for (let entry = q.peek(); entry !== undefined && entries.length < this.opts.batchMaxEvents; entry = q.peek()) {
      if (!entry.dropped) {
        if (entries.length > 0 && bytes + entry.bytes > this.opts.batchMaxBytes) break;
        entries.push(entry);
        bytes += entry.bytes;
      }
      q.shift();
    }
    this.queuedEvents -= entries.length;
    this.queuedBytes -= bytes;
    return entries;
  }

  private send(entries: Entry[]): void {
    const producer = this.producer!;
    let bytes = 0;
    const byTopic = new Map<string, TopicRecords>();
    for (const entry of entries) {
      bytes += entry.bytes;
      const { topic, key, value, headers } = entry.record;
      let group = byTopic.get(topic);
      if (!group) byTopic.set(topic, (group = { topic, records: [] }));
      group.records.push({ key, value, headers });
    }
    const batch: Batch = { entries, bytes, startedAt: performance.now(), producer };
    this.sendsStarted++;
    this.inFlight.push(batch);
    this.inFlightEvents += entries.length;
    this.inFlightBytes += bytes;
    let sending: Promise<void>;
    try {
      sending = producer.send([...byTopic.values()]);
    } catch (err) {
      sending = Promise.reject(err);
    }
    sending.then(
      () => this.finish(batch, undefined),
      (err: unknown) => this.finish(batch, err ?? new Error('send failed')),
    );
  }

  private finish(batch: Batch, error: unknown): void {
    this.inFlight.splice(this.inFlight.indexOf(batch), 1);
    this.inFlightEvents -= batch.entries.length;
    this.inFlightBytes -= batch.bytes;
    const ok = error === undefined;
    this.opts.observer.batch?.({ events: batch.entries.length, bytes: batch.bytes, durationMs: performance.now() - batch.startedAt, ok, error });
    if (ok) {
      this.lastHeardAt = performance.now();
      for (const entry of batch.entries) settle(entry, null);
    } else {
      const failure = new MsgbridgeError('KAFKA_UNAVAILABLE', `Kafka did not acknowledge the batch: ${(error as Error)?.message ?? String(error)}`, { cause: error });
      for (const entry of batch.entries) settle(entry, failure);
      this.dropQueuedSharingKeys(batch.entries, 'KAFKA_UNAVAILABLE');
      this.replaceProducer(batch.producer, error);
    }
    this.flush();
    this.checkIdle();
  }

  /** Fails the queued events that share a topic and key with failed ones (see the order note). */
  private dropQueuedSharingKeys(failed: Entry[], code: ErrorCode): void {
    if (this.queuedEvents === 0 || failed.length === 0) return;
    const keys = new Set<string>();
    for (const entry of failed) keys.add(keyOf(entry.record));
    let error: MsgbridgeError | undefined;
    for (const entry of this.queue) {
      if (entry.dropped || !keys.has(keyOf(entry.record))) continue;
      error ??= new MsgbridgeError(code, 'an earlier event with the same key failed; refused to keep per-key order');
      this.drop(entry, error);
    }
  }

  private drop(entry: Entry, error: MsgbridgeError): void {
    entry.dropped = true;
    this.queuedEvents--;
    this.queuedBytes -= entry.bytes;
    // It may wait in the queue until it reaches the head: keep its topic and key (per-key
    // order), release its body and headers, which no longer count in queuedBytes.
    entry.record = { topic: entry.record.topic, key: entry.record.key, value: EMPTY, headers: {} };
    settle(entry, error);
  }

  private replaceProducer(failed: RecordProducer, error: unknown): void {
    if (this.producer !== failed || this.closed) return;
    this.connected = false;
    this.producer = undefined;
    this.opts.observer.connection?.(false, error);
    void failed.disconnect().catch(noop);
    void this.reconnect();
  }

  private async reconnect(): Promise<void> {
    if (this.reconnecting) return;
    this.reconnecting = true;
    let delay = this.opts.reconnectBackoffMs.initial;
    try {
      while (!this.closed) {
        const producer = this.opts.createProducer();
        try {
          await producer.connect();
          if (this.closed) {
            await producer.disconnect().catch(noop);
            return;
          }
          this.producer = producer;
          this.connected = true;
          this.lastHeardAt = performance.now();
          this.opts.observer.connection?.(true);
          this.flush();
          return;
        } catch (err) {
          this.opts.observer.connection?.(false, err);
          void producer.disconnect().catch(noop);
          await new Promise<void>((resolve) => {
            const timer = setTimeout(resolve, delay);
            this.cancelBackoff = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          this.cancelBackoff = undefined;
          delay = Math.min(this.opts.reconnectBackoffMs.max, delay * 2);
        }
      }
    } finally {
      this.reconnecting = false;
    }
  }

  /**
   * Idle probing (see `idleProbeIntervalMs`): when nothing has been heard from Kafka for an
   * interval and nothing is queued or in flight, one metadata round trip, bounded by
   * `probeTimeoutMs`. Called by a timer; public so that tests can drive it.
   */
  async probeIfIdle(now = performance.now()): Promise<void> {
    const producer = this.producer;
    if (!producer?.probe || this.opts.idleProbeIntervalMs <= 0 || !this.connected || this.closed || this.probing) return;
    if (this.inFlight.length > 0 || this.queuedEvents > 0 || now - this.lastHeardAt < this.opts.idleProbeIntervalMs) return;
    this.probing = true;
    const sendsBefore = this.sendsStarted;
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        producer.probe(this.opts.probeTopics),
        new Promise<never>((_resolve, reject) => {
          timer = setTimeout(() => reject(new Error(`no answer within ${this.opts.probeTimeoutMs} ms`)), this.opts.probeTimeoutMs);
        }),
      ]);
      this.lastHeardAt = performance.now();
    } catch (err) {
      // A send that started meanwhile settles the question itself (and replaces the producer if it fails).
      if (this.sendsStarted === sendsBefore) {
        this.replaceProducer(producer, new Error(`idle probe of ${this.opts.probeTopics.join(', ')} failed: ${(err as Error)?.message ?? String(err)}`, { cause: err }));
      }
    } finally {
      clearTimeout(timer);
      this.probing = false;
    }
  }

  /** Deadlines: queued events past theirs are dropped; in-flight ones are answered (and may still land). */
  sweep(now = performance.now()): void {
    const expired: Entry[] = [];
    let error: MsgbridgeError | undefined;
    // All events have the same timeout, so the queue is in deadline order.
    const q = this.queue;
    for (let entry = q.peek(); entry !== undefined; entry = q.peek()) {
      if (!entry.dropped) {
        if (entry.deadline > now) break;
        error ??= new MsgbridgeError('PUBLISH_TIMEOUT', `Kafka did not acknowledge within ${this.opts.publishTimeoutMs} ms`);
        this.drop(entry, error);
        expired.push(entry);
      }
      q.shift();
    }
    if (expired.length > 0) this.dropQueuedSharingKeys(expired, 'PUBLISH_TIMEOUT');
    for (const batch of this.inFlight) {
      // Entries of a batch are in deadline order too: nothing to do until its first is due.
      if (batch.entries[0]!.deadline > now) continue;
      for (const entry of batch.entries) {
        if (entry.cb !== null && entry.deadline <= now) {
          error ??= new MsgbridgeError('PUBLISH_TIMEOUT', `Kafka did not acknowledge within ${this.opts.publishTimeoutMs} ms`);
          settle(entry, error);
        }
      }
    }
    this.checkIdle();
  }

  private checkIdle(): void {
    if (this.idleWaiters.length === 0 || this.queuedEvents > 0 || this.inFlight.length > 0) return;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const resolve of waiters) resolve();
  }
}

function settle(entry: Entry, error: MsgbridgeError | null): void {
  const cb = entry.cb;
  if (cb === null) return;
  entry.cb = null;
  try {
    cb(error);
  } catch {
    // A caller's callback must not break the publisher's bookkeeping.
  }
}
