import { performance } from 'node:perf_hooks';
import { Deque } from '../platform/deque.js';
import { WorkInterval } from '../platform/work-interval.js';
import { type ErrorCode, errorMessage, MsgbridgeError } from '../platform/errors.js';
import { javaCompatibleHash } from './partitioner.js';
import type { ClusterLayout, ProducerFactory, RecordProducer, RecordToWrite, TopicRecords } from './port.js';
import { bootstrapAddresses, PublisherLane, SINGLE_LANE, withTimeout, type LaneHost } from './publisher-lane.js';

/**
 * Batching without latency (docs/design.md, "Delivery semantics"), pipelined per partition leader, on the
 * RecordProducer port: one queue per partition, one lane (a producer, one request in flight) per leader
 * broker, at most one batch in flight per partition (per-key order). This file holds the
 * queues, batching, admission and answers; a lane's producer and health (replacement after a
 * failure, proof that it takes writes) are in publisher-lane.ts. A batch that fails or hangs
 * past the publish timeout costs its lane its producer. A producer without `layout` (tests'
 * fakes) is one lane for everything. The design argument is in src/kafka/README.md.
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
  /** `connected`: every lane the topics need has a producer; `broker` names the lane that changed. */
  connection?(connected: boolean, error?: unknown, broker?: number): void;
  /** A lane's partitions were found unable to take writes (`error`), or able again (undefined). */
  writable?(broker: number, error?: unknown): void;
}

export interface BatchingPublisherOptions {
  /** A new, unconnected producer: called per lane at start and after every failure of a lane. */
  createProducer: ProducerFactory;
  batchMaxEvents: number;
  batchMaxBytes: number;
  queueMaxEvents: number;
  queueMaxBytes: number;
  /** From admission to acknowledgement; past it the caller is told PUBLISH_TIMEOUT and the batch is given up. */
  publishTimeoutMs: number;
  reconnectBackoffMs?: { initial: number; max: number };
  /** How often deadlines are checked while events are pending (one timer for all events, not one per event). */
  sweepIntervalMs?: number;
  /**
   * An outage shows at the next send; with no traffic there is none. A lane that has heard
   * nothing from Kafka for this long while idle asks for the metadata of `probeTopics`; a probe
   * that fails, finds a partition it cannot write, or takes over `probeTimeoutMs` counts as a
   * failed send. 0 (the default) turns probing off.
   */
  idleProbeIntervalMs?: number;
  /** The topics written: their layout is read at start (producers with `layout`). */
  probeTopics?: string[];
  probeTimeoutMs?: number;
  /** min.insync.replicas per topic, when known: a partition with fewer in sync cannot take acks=all writes. */
  minInsyncReplicas?: ReadonlyMap<string, number>;
  /** While anything is unhealthy (a lane down, a partition without leader), the leaders are asked again this often. */
  layoutRefreshMs?: number;
  /**
   * After a lane fails, metadata saying all is well is not believed for this long unless it
   * changed since the failure: a dead broker stays in the metadata until its session expires
   * (broker.session.timeout.ms, 9 s by default). A successful batch proves the lane at once.
   */
  failureSuspicionMs?: number;
  observer?: PublisherObserver;
}

export interface PublisherStats {
  queuedEvents: number;
  queuedBytes: number;
  inFlightEvents: number;
  inFlightBytes: number;
  /** Every lane the topics need has a connected producer. */
  connected: boolean;
  /** A batch has been in flight for longer than the publish timeout (its lane is being replaced). */
  stalled: boolean;
  /**
   * Lanes the topics need (their leaders; a partition without leader counts as one that is never ready) and how many
   * are ready.
   */
  lanes: number;
  lanesReady: number;
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

/** One partition's queue; `partition` -1 stands for "the client decides" (a lane-less producer). */
interface PartitionQueue {
  topic: string;
  partition: number;
  queue: Deque<Entry>;
  /** Events not dropped in `queue`. */
  live: number;
  /** The batch carrying this partition's events, while in flight. */
  busy: boolean;
}

interface Batch {
  entries: Entry[];
  partitions: PartitionQueue[];
  bytes: number;
  startedAt: number;
  lane: Lane;
  producer: RecordProducer;
  /** Given up (past the publish timeout): its outcome no longer matters. */
  abandoned: boolean;
}

type Lane = PublisherLane<Batch>;

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
  private readonly opts: Required<Omit<BatchingPublisherOptions, 'observer' | 'minInsyncReplicas'>> &
    Pick<BatchingPublisherOptions, 'minInsyncReplicas'> & { observer: PublisherObserver };
  private accepting = true;
  private closed = false;
  private started = false;

  /** Partition counts and leaders; undefined = one lane for everything. */
  private layout: ClusterLayout | undefined;
  private leaders = new Map<string, number[]>();
  /** Every partition's queue, in the order they were made (flush, sweep). */
  private readonly queues: PartitionQueue[] = [];
  /** The same queues by topic and partition (`queueAt`). */
  private readonly queuesByTopic = new Map<string, Map<number, PartitionQueue>>();
  private readonly lanes = new Map<number, Lane>();
  private queuedEvents = 0;
  private queuedBytes = 0;
  private inFlightEvents = 0;
  private inFlightBytes = 0;

  private flushScheduled = false;
  /** Deadlines are checked only while events are pending: `publish` starts it, an idle tick ends it. */
  private readonly sweeper: WorkInterval;
  private probeTimer: NodeJS.Timeout | undefined;
  private refreshTimer: NodeJS.Timeout | undefined;
  private refreshingLayout = false;
  private idleWaiters: (() => void)[] = [];
  private readonly laneHost: LaneHost = {
    closed: () => this.closed,
    layout: () => this.layout,
    addressesFor: (broker, failed) => this.addressesFor(broker, failed),
    allConnected: () => this.stats().connected,
    applyLayout: (layout) => this.applyLayout(layout),
    refreshLayout: () => this.refreshLayout(),
    flush: () => this.flush(),
  };

  constructor(options: BatchingPublisherOptions) {
    this.opts = {
      reconnectBackoffMs: { initial: 100, max: 2000 },
      sweepIntervalMs: Math.max(10, Math.min(100, Math.floor(options.publishTimeoutMs / 10))),
      idleProbeIntervalMs: 0,
      probeTopics: [],
      probeTimeoutMs: 5000,
      layoutRefreshMs: 1000,
      failureSuspicionMs: 10_000,
      observer: {},
      ...options,
    };
    this.sweeper = new WorkInterval(this.opts.sweepIntervalMs, () => {
      this.sweep();
      return !this.idle();
    });
  }

  /**
   * Reads the leaders of the topics written and connects a producer per leader; rejects with
   * KAFKA_UNAVAILABLE when Kafka does not answer.
   */
  async start(): Promise<void> {
    if (this.started) return;
    this.started = true;
    const first = this.opts.createProducer();
    try {
      if (first.layout && this.opts.probeTopics.length > 0) {
        this.applyLayout(
          await withTimeout(
            first.layout(this.opts.probeTopics),
            this.opts.probeTimeoutMs,
            'reading the leaders of the topics written',
          ),
        );
      }
      await this.connectLanes(first);
    } catch (err) {
      for (const lane of this.lanes.values()) void lane.producer?.disconnect().catch(noop);
      this.lanes.clear();
      void first.disconnect().catch(noop);
      throw new MsgbridgeError('KAFKA_UNAVAILABLE', `cannot connect the Kafka producer: ${errorMessage(err)}`, {
        cause: err,
      });
    }
    this.refreshTimer = setInterval(() => void this.refreshIfUnhealthy(), this.opts.layoutRefreshMs);
    this.refreshTimer.unref();
    if (this.opts.idleProbeIntervalMs > 0) {
      // Checked at a fraction of the interval, so that an idle outage shows within about 1.25 intervals.
      this.probeTimer = setInterval(
        () => void this.probeIfIdle(),
        Math.max(50, Math.floor(this.opts.idleProbeIntervalMs / 4)),
      );
      this.probeTimer.unref();
    }
  }

  /** Start: one lane per leader (the first producer serves the first lane), all connected and proven. */
  private async connectLanes(first: RecordProducer): Promise<void> {
    const brokers = this.layout ? [...new Set([...this.leaders.values()].flat().filter((b) => b >= 0))] : [SINGLE_LANE];
    if (brokers.length === 0) brokers.push(SINGLE_LANE);
    await Promise.all(
      brokers.map(async (broker, i) => {
        const lane = this.newLane(broker);
        await lane.start(i === 0 ? first : this.opts.createProducer(this.addressesFor(broker, false)));
      }),
    );
    this.opts.observer.connection?.(true);
  }

  /**
   * Admits one event, or returns why not (and then never calls `cb`). Once admitted, `cb` is
   * called exactly once, never synchronously.
   */
  publish(record: PublishRecord, cb: PublishCallback): MsgbridgeError | undefined {
    if (!this.accepting) return new MsgbridgeError('SHUTTING_DOWN', 'the publisher is draining');
    // The key is hashed once: the partition decides both the lane checked and the queue joined.
    const partition = this.partitionOf(record);
    const refused = this.laneRefusal(record.topic, partition);
    if (refused) return refused;
    const bytes = recordBytes(record);
    const pending = this.queuedEvents + this.inFlightEvents;
    if (
      pending > 0 &&
      (pending + 1 > this.opts.queueMaxEvents ||
        this.queuedBytes + this.inFlightBytes + bytes > this.opts.queueMaxBytes)
    ) {
      return new MsgbridgeError('QUEUE_FULL', 'the publish queue is full');
    }
    const pq = this.queueAt(record.topic, partition!);
    pq.queue.push({ record, bytes, deadline: performance.now() + this.opts.publishTimeoutMs, cb, dropped: false });
    pq.live++;
    this.queuedEvents++;
    this.queuedBytes += bytes;
    this.scheduleFlush();
    this.sweeper.start();
    return undefined;
  }

  /** Why an event would be refused right now, ignoring its size; undefined when it would be admitted. */
  admission(record?: PublishRecord): MsgbridgeError | undefined {
    if (!this.accepting) return new MsgbridgeError('SHUTTING_DOWN', 'the publisher is draining');
    if (record === undefined) {
      if (![...this.lanes.values()].some((l) => l.isConnected))
        return new MsgbridgeError('KAFKA_UNAVAILABLE', 'Kafka is not reachable');
      if (this.queuedEvents + this.inFlightEvents >= this.opts.queueMaxEvents)
        return new MsgbridgeError('QUEUE_FULL', 'the publish queue is full');
      return undefined;
    }
    return this.laneRefusal(record.topic, this.partitionOf(record));
  }

  /**
   * Why an event for this partition would be refused now: its topic unknown, or its leader's lane without a producer.
   */
  private laneRefusal(topic: string, partition: number | undefined): MsgbridgeError | undefined {
    if (partition === undefined)
      return new MsgbridgeError('KAFKA_UNAVAILABLE', `topic ${topic} is not known to this publisher`);
    const broker = this.leaderOf(topic, partition);
    if (this.lanes.get(broker)?.isConnected) return undefined;
    const where =
      broker === SINGLE_LANE
        ? 'Kafka'
        : broker < 0
          ? `partition ${topic}-${partition} (no leader)`
          : `Kafka broker ${broker} (leader of ${topic}-${partition})`;
    return new MsgbridgeError('KAFKA_UNAVAILABLE', `${where} is not reachable`);
  }

  /** Bytes of the events held: queued or in flight. */
  heldBytes(): number {
    return this.queuedBytes + this.inFlightBytes;
  }

  /**
   * A publish would succeed now: every lane the topics need is connected, has proven since its
   * last failure that its partitions take writes, and none is stuck; the queue is below its bounds.
   */
  get ready(): boolean {
    const s = this.stats();
    return (
      this.accepting &&
      s.connected &&
      !s.stalled &&
      s.lanesReady === s.lanes &&
      s.queuedEvents + s.inFlightEvents < this.opts.queueMaxEvents &&
      s.queuedBytes + s.inFlightBytes < this.opts.queueMaxBytes
    );
  }

  stats(): PublisherStats {
    const now = performance.now();
    let lanesReady = 0;
    let stalled = false;
    const needed = this.neededBrokers();
    let connected = needed.length > 0;
    for (const broker of needed) {
      const lane = this.lanes.get(broker);
      if (lane?.isReady) lanesReady++;
      if (!lane?.isConnected) connected = false;
    }
    for (const lane of this.lanes.values()) {
      if (lane.batch && now - lane.batch.startedAt > this.opts.publishTimeoutMs) stalled = true;
    }
    return {
      queuedEvents: this.queuedEvents,
      queuedBytes: this.queuedBytes,
      inFlightEvents: this.inFlightEvents,
      inFlightBytes: this.inFlightBytes,
      connected,
      stalled,
      lanes: needed.length,
      lanesReady,
    };
  }

  /**
   * Stops admitting, lets everything admitted finish (acknowledged, or failed by its own
   * deadline: at most the publish timeout), then disconnects the producers.
   */
  async drain(): Promise<void> {
    this.accepting = false;
    if (!this.idle()) await new Promise<void>((resolve) => this.idleWaiters.push(resolve));
    this.closed = true;
    this.sweeper.stop();
    for (const timer of [this.probeTimer, this.refreshTimer]) if (timer) clearInterval(timer);
    const producers: RecordProducer[] = [];
    for (const lane of this.lanes.values()) {
      const producer = lane.close();
      if (producer) producers.push(producer);
    }
    await Promise.all(producers.map((p) => p.disconnect().catch(noop)));
  }

  // ---- routing ----

  private partitionOf(record: PublishRecord): number | undefined {
    if (!this.layout) return SINGLE_LANE;
    const leaders = this.leaders.get(record.topic);
    if (!leaders) return undefined;
    if (record.partition !== undefined) return record.partition < leaders.length ? record.partition : undefined;
    if (record.key === null) return 0;
    const key = typeof record.key === 'string' ? Buffer.from(record.key) : record.key;
    return javaCompatibleHash(key) % leaders.length;
  }

  private leaderOf(topic: string, partition: number): number {
    if (!this.layout) return SINGLE_LANE;
    return this.leaders.get(topic)?.[partition] ?? -1;
  }

  private queueAt(topic: string, partition: number): PartitionQueue {
    // By topic, then partition: no id string built per event.
    let byPartition = this.queuesByTopic.get(topic);
    if (!byPartition) this.queuesByTopic.set(topic, (byPartition = new Map()));
    let pq = byPartition.get(partition);
    if (!pq) {
      pq = { topic, partition, queue: new Deque(), live: 0, busy: false };
      byPartition.set(partition, pq);
      this.queues.push(pq);
    }
    return pq;
  }

  private neededBrokers(): number[] {
    return this.layout ? [...new Set([...this.leaders.values()].flat())] : [SINGLE_LANE];
  }

  /** Takes a metadata answer: new leaders get a lane (connected at once); lanes learn when theirs changed. */
  private applyLayout(layout: ClusterLayout): void {
    const leaders = new Map<string, number[]>();
    for (const p of layout.partitions) {
      let list = leaders.get(p.topic);
      if (!list) leaders.set(p.topic, (list = []));
      list[p.partition] = p.leader;
    }
    let moved = false;
    for (const [topic, list] of leaders) {
      const before = this.leaders.get(topic);
      if (before && before.length !== list.length) {
        // Keys would change partitions: keep the old count until a restart (as the Java client's metadata does not
        // re-key either).
        leaders.set(topic, before);
        continue;
      }
      if (!before || list.some((b, i) => b !== before[i])) moved = true;
    }
    this.layout = layout;
    this.leaders = leaders;
    if (!moved || !this.started) return;
    for (const lane of this.lanes.values()) lane.markStale();
    for (const broker of this.neededBrokers()) {
      if (broker >= 0 && !this.lanes.has(broker) && this.lanesStarted) void this.newLane(broker).reconnect();
    }
    this.scheduleFlush();
  }

  private get lanesStarted(): boolean {
    return this.lanes.size > 0;
  }

  /** Addresses to try first for a lane's new producer: its own broker while it answers, else the others that do. */
  private addressesFor(broker: number, failed: boolean): string[] {
    return bootstrapAddresses(this.layout, this.lanes.values(), broker, failed);
  }

  private newLane(broker: number): Lane {
    const lane: Lane = new PublisherLane(broker, this.opts, this.laneHost);
    this.lanes.set(broker, lane);
    return lane;
  }

  // ---- sending ----

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    // setImmediate rather than a microtask: every request the server read in this turn of the
    // event loop joins the first batch, at no added latency.
    setImmediate(() => {
      this.flushScheduled = false;
      this.flush();
    });
  }

  private flush(): void {
    if (this.queuedEvents === 0) return;
    const byLane = new Map<Lane, PartitionQueue[]>();
    for (const pq of this.queues) {
      if (pq.live === 0 || pq.busy) continue;
      const lane = this.lanes.get(this.leaderOf(pq.topic, pq.partition));
      if (!lane || !lane.isConnected || lane.batch || lane.refreshing) continue;
      if (lane.stale && lane.producer?.layout) {
        void lane.refresh();
        continue;
      }
      let list = byLane.get(lane);
      if (!list) byLane.set(lane, (list = []));
      list.push(pq);
    }
    for (const [lane, pqs] of byLane) this.send(lane, pqs);
  }

  private send(lane: Lane, pqs: PartitionQueue[]): void {
    const entries: Entry[] = [];
    const used: PartitionQueue[] = [];
    let bytes = 0;
    const byTopic = new Map<string, TopicRecords>();
    fill: for (const pq of pqs) {
      let took = false;
      for (let entry = pq.queue.peek(); entry !== undefined; entry = pq.queue.peek()) {
        if (!entry.dropped) {
          if (
            entries.length >= this.opts.batchMaxEvents ||
            (entries.length > 0 && bytes + entry.bytes > this.opts.batchMaxBytes)
          ) {
            if (took) used.push(pq);
            break fill;
          }
          entries.push(entry);
          bytes += entry.bytes;
          pq.live--;
          took = true;
          const { topic, key, value, headers } = entry.record;
          let group = byTopic.get(topic);
          if (!group) byTopic.set(topic, (group = { topic, records: [] }));
          // The single lane (no layout) leaves the partition to the client, unless the record named one.
          const partition = pq.partition >= 0 ? pq.partition : entry.record.partition;
          group.records.push(partition === undefined ? { key, value, headers } : { key, value, headers, partition });
        }
        pq.queue.shift();
      }
      if (took) used.push(pq);
    }
    if (entries.length === 0) return;
    this.queuedEvents -= entries.length;
    this.queuedBytes -= bytes;
    for (const pq of used) pq.busy = true;
    const producer = lane.producer!;
    const batch: Batch = {
      entries,
      partitions: used,
      bytes,
      startedAt: performance.now(),
      lane,
      producer,
      abandoned: false,
    };
    lane.startBatch(batch);
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
    if (batch.abandoned) return;
    this.release(batch);
    const ok = error === undefined;
    this.opts.observer.batch?.({
      events: batch.entries.length,
      bytes: batch.bytes,
      durationMs: performance.now() - batch.startedAt,
      ok,
      error,
    });
    if (ok) {
      batch.lane.acknowledged();
      for (const entry of batch.entries) settle(entry, null);
    } else {
      const failure = new MsgbridgeError(
        'KAFKA_UNAVAILABLE',
        `Kafka did not acknowledge the batch: ${errorMessage(error)}`,
        { cause: error },
      );
      for (const entry of batch.entries) settle(entry, failure);
      this.dropQueuedSharingKeys(batch.entries, batch.partitions, 'KAFKA_UNAVAILABLE');
      batch.lane.replaceProducer(batch.producer, error);
    }
    // The next batch leaves after this turn's reads, not in the middle of them: the requests
    // that arrived with this acknowledgement join it (twice the events per produce request at
    // 64 connections, docs/benchmarks.md "Per core": the write to the broker is the cost).
    this.scheduleFlush();
    this.checkIdle();
  }

  /** The batch no longer holds its lane, its partitions or the in-flight counts. */
  private release(batch: Batch): void {
    batch.lane.release(batch);
    for (const pq of batch.partitions) pq.busy = false;
    this.inFlightEvents -= batch.entries.length;
    this.inFlightBytes -= batch.bytes;
  }

  /** Fails the queued events that share a topic and key with failed ones (per-key order). */
  private dropQueuedSharingKeys(failed: Entry[], pqs: PartitionQueue[], code: ErrorCode): void {
    if (this.queuedEvents === 0 || failed.length === 0) return;
    const keys = new Set<string>();
    for (const entry of failed) keys.add(keyOf(entry.record));
    let error: MsgbridgeError | undefined;
    for (const pq of pqs) {
      for (const entry of pq.queue) {
        if (entry.dropped || !keys.has(keyOf(entry.record))) continue;
        error ??= new MsgbridgeError(code, 'an earlier event with the same key failed; refused to keep per-key order');
        this.drop(pq, entry, error);
      }
    }
  }

  private drop(pq: PartitionQueue, entry: Entry, error: MsgbridgeError): void {
    entry.dropped = true;
    pq.live--;
    this.queuedEvents--;
    this.queuedBytes -= entry.bytes;
    // It may wait in the queue until it reaches the head: keep its topic and key (per-key
    // order), release its body and headers, which no longer count in queuedBytes.
    entry.record = { topic: entry.record.topic, key: entry.record.key, value: EMPTY, headers: {} };
    settle(entry, error);
  }

  // ---- lanes: where the partitions are, slow batches, probes ----

  /** Asks where the partitions are now, through a new client steered to brokers that answer. */
  private async refreshLayout(): Promise<void> {
    if (!this.layout || this.refreshingLayout || this.closed) return;
    this.refreshingLayout = true;
    const answering = [...this.lanes.values()].filter((l) => l.isReady).map((l) => this.layout!.brokers.get(l.broker));
    const client = this.opts.createProducer(answering.filter((a): a is string => a !== undefined));
    try {
      if (client.layout)
        this.applyLayout(await withTimeout(client.layout(this.opts.probeTopics), this.opts.probeTimeoutMs, 'metadata'));
    } catch {
      // The next refresh tries again; lanes report their own failures.
    } finally {
      this.refreshingLayout = false;
      void client.disconnect().catch(noop);
    }
  }

  private async refreshIfUnhealthy(): Promise<void> {
    if (this.closed || !this.layout) return;
    const now = performance.now();
    const unhealthy = this.neededBrokers().some((b) => {
      const lane = this.lanes.get(b);
      return b < 0 || !lane || !lane.isReady;
    });
    const slow = [...this.lanes.values()].filter((l) => l.batch && now - l.batch.startedAt > this.opts.layoutRefreshMs);
    if (unhealthy || slow.length > 0) await this.refreshLayout();
    // A batch waiting on a broker that no longer leads its partitions can never be acknowledged
    // by it (the new leader's epoch fences it): give it up now rather than at its timeout.
    for (const lane of slow) {
      const batch = lane.batch;
      if (
        batch &&
        batch.partitions.some((pq) => pq.partition >= 0 && this.leaderOf(pq.topic, pq.partition) !== lane.broker)
      ) {
        this.abandon(
          batch,
          `the partitions of broker ${lane.broker} moved to another leader while a produce request to it was unanswered`,
        );
      }
    }
    // A lane that connected but could not prove itself (e.g. NOT_ENOUGH_REPLICAS) asks again.
    for (const lane of this.lanes.values()) {
      if (lane.state === 'unproven' && !lane.batch && !lane.probing && lane.producer) void lane.probe();
    }
  }

  /** Stops waiting for a batch (its events may still land): answered 503 now, its lane gets a new producer. */
  private abandon(batch: Batch, reason: string): void {
    if (batch.abandoned) return;
    batch.abandoned = true;
    this.release(batch);
    const error = new Error(reason);
    const failure = new MsgbridgeError('KAFKA_UNAVAILABLE', `Kafka did not acknowledge the batch: ${reason}`, {
      cause: error,
    });
    for (const entry of batch.entries) settle(entry, failure);
    this.dropQueuedSharingKeys(batch.entries, batch.partitions, 'KAFKA_UNAVAILABLE');
    this.opts.observer.batch?.({
      events: batch.entries.length,
      bytes: batch.bytes,
      durationMs: performance.now() - batch.startedAt,
      ok: false,
      error,
    });
    batch.lane.replaceProducer(batch.producer, error);
    this.flush();
    this.checkIdle();
  }

  /**
   * Idle probing (see `idleProbeIntervalMs`): every lane that has heard nothing from Kafka for
   * an interval and has nothing in flight asks for metadata, bounded by `probeTimeoutMs`.
   * Called by a timer; public so that tests can drive it.
   */
  async probeIfIdle(now = performance.now()): Promise<void> {
    if (this.opts.idleProbeIntervalMs <= 0 || this.closed) return;
    const probes: Promise<void>[] = [];
    for (const lane of this.lanes.values()) {
      if (!lane.isConnected || lane.probing || lane.batch || !lane.producer) continue;
      if (!lane.producer.probe && !lane.producer.layout) continue;
      if (now - lane.lastHeardAt < this.opts.idleProbeIntervalMs || this.hasQueued(lane)) continue;
      probes.push(lane.probe());
    }
    await Promise.all(probes);
  }

  private hasQueued(lane: Lane): boolean {
    for (const pq of this.queues) if (pq.live > 0 && this.leaderOf(pq.topic, pq.partition) === lane.broker) return true;
    return false;
  }

  /**
   * Deadlines: queued events past theirs are dropped; in-flight ones are answered, and a batch
   * in flight past the publish timeout is given up (its events may still land): its lane gets
   * a new producer, so a hung broker holds its partitions for one publish timeout at a time.
   */
  sweep(now = performance.now()): void {
    let error: MsgbridgeError | undefined;
    const timeout = () =>
      (error ??= new MsgbridgeError(
        'PUBLISH_TIMEOUT',
        `Kafka did not acknowledge within ${this.opts.publishTimeoutMs} ms`,
      ));
    for (const pq of this.queues) {
      const expired: Entry[] = [];
      // All events have the same timeout, so each queue is in deadline order.
      for (let entry = pq.queue.peek(); entry !== undefined; entry = pq.queue.peek()) {
        if (!entry.dropped) {
          if (entry.deadline > now) break;
          this.drop(pq, entry, timeout());
          expired.push(entry);
        }
        pq.queue.shift();
      }
      if (expired.length > 0) this.dropQueuedSharingKeys(expired, [pq], 'PUBLISH_TIMEOUT');
    }
    for (const lane of this.lanes.values()) {
      const batch = lane.batch;
      // Entries of a batch are in deadline order per partition: nothing to do until the earliest is due.
      if (!batch || batch.entries.every((e) => e.deadline > now)) continue;
      for (const entry of batch.entries) if (entry.cb !== null && entry.deadline <= now) settle(entry, timeout());
      if (now - batch.startedAt > this.opts.publishTimeoutMs) {
        this.abandon(
          batch,
          `${lane.broker === SINGLE_LANE ? 'Kafka' : `broker ${lane.broker}`} did not answer a produce request within ${this.opts.publishTimeoutMs} ms`,
        );
      }
    }
    this.checkIdle();
  }

  private idle(): boolean {
    if (this.queuedEvents > 0) return false;
    for (const lane of this.lanes.values()) if (lane.batch) return false;
    return true;
  }

  private checkIdle(): void {
    if (this.idleWaiters.length === 0 || !this.idle()) return;
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
