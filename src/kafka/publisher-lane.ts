import { performance } from 'node:perf_hooks';
import {
  assertWritable,
  NotWritableError,
  type ClusterLayout,
  type ProducerFactory,
  type RecordProducer,
} from './port.js';
import { ReplaceableProducer } from './replaceable-producer.js';
import { errorMessage } from '../platform/errors.js';

/**
 * One lane of the batching publisher (batching-publisher.ts): one leader broker, its producer,
 * its one produce request in flight, and its health as a small state machine. A lane whose
 * producer fails throws it away (replaceable-producer.ts) and connects a new one (racing up to
 * three, with backoff); it counts as ready only once Kafka proved that its partitions take
 * writes. The states and why are in src/kafka/README.md.
 */

/**
 * - `down`: no producer, none being connected (a new lane, a failed one just before its
 *   replacement starts, or one that stopped connecting because the publisher closed);
 * - `connecting`: a producer being connected (the first at start, or the racing replacements
 *   after a failure, with backoff between rounds);
 * - `unproven`: connected, not yet proven since it connected (or since a proof failed) that its
 *   partitions take acks=all writes; events are still sent to it, and a success proves it;
 * - `ready`: connected and proven;
 * - `closed`: the publisher drained and closed its producer.
 */
export type LaneState = 'down' | 'connecting' | 'unproven' | 'ready' | 'closed';

/** What happens to a lane; a transition not listed for the current state leaves it unchanged. */
type LaneEvent = 'connect' | 'connected' | 'proved' | 'doubted' | 'failed' | 'gaveUp' | 'close';

const TRANSITIONS: Record<LaneEvent, Partial<Record<LaneState, LaneState>>> = {
  /** A producer starts connecting. */
  connect: { down: 'connecting' },
  /** It got its producer id. */
  connected: { connecting: 'unproven' },
  /** A batch was acknowledged, or the metadata shows its partitions writable (and believable). */
  proved: { unproven: 'ready' },
  /** A proof found its partitions unable to take writes (NOT_ENOUGH_REPLICAS, no leader). */
  doubted: { ready: 'unproven' },
  /** Its producer failed (a batch failed or was given up, a refresh or probe failed): thrown away. */
  failed: { connecting: 'down', unproven: 'down', ready: 'down' },
  /** Stopped connecting without a producer (the publisher closed). */
  gaveUp: { connecting: 'down' },
  /** The publisher drained. */
  close: { down: 'closed', connecting: 'closed', unproven: 'closed', ready: 'closed' },
};

/** Leader broker id of the single lane of a producer without `layout`. */
export const SINGLE_LANE = -1;

/** The observer callbacks a lane reports to (a subset of the publisher's observer). */
export interface LaneObserver {
  connection?(connected: boolean, error?: unknown, broker?: number): void;
  writable?(broker: number, error?: unknown): void;
}

export interface LaneOptions {
  createProducer: ProducerFactory;
  reconnectBackoffMs: { initial: number; max: number };
  probeTopics: string[];
  probeTimeoutMs: number;
  minInsyncReplicas?: ReadonlyMap<string, number> | undefined;
  failureSuspicionMs: number;
  observer: LaneObserver;
}

/** What a lane needs from the publisher that holds it. */
export interface LaneHost {
  /** The publisher drained: no more producers are connected. */
  closed(): boolean;
  /** The last metadata answer taken; undefined for a producer without `layout`. */
  layout(): ClusterLayout | undefined;
  /** Addresses a new producer for this broker tries first (see `bootstrapAddresses`). */
  addressesFor(broker: number, failed: boolean): string[];
  /** Every lane the topics need has a producer. */
  allConnected(): boolean;
  /** Takes a metadata answer that a lane's producer got. */
  applyLayout(layout: ClusterLayout): void;
  /** Asks where the partitions are now (a failure may mean a leader moved). */
  refreshLayout(): Promise<void>;
  /** Sends what waits for a lane that may now be free. */
  flush(): void;
}

const noop = () => {};

export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** Leaders and in-sync replica counts: what changes when the cluster reacts to a failure. */
function layoutSignature(layout: ClusterLayout): string {
  return layout.partitions
    .map((p) => `${p.topic}/${p.partition}:${p.leader}:${p.isr ?? ''}`)
    .sort()
    .join(',');
}

/** Addresses to try first for a lane's new producer: its own broker while it answers, else the others that do. */
export function bootstrapAddresses(
  layout: ClusterLayout | undefined,
  lanes: Iterable<PublisherLane<unknown>>,
  broker: number,
  failed: boolean,
): string[] {
  if (!layout) return [];
  const own = layout.brokers.get(broker);
  const answering = [...lanes].filter((l) => l.broker !== broker && l.isReady).map((l) => layout.brokers.get(l.broker));
  const others = [...layout.brokers].filter(([id]) => id !== broker).map(([, address]) => address);
  const list = failed ? [...answering, own, ...others] : [own, ...answering, ...others];
  return [...new Set(list.filter((a): a is string => a !== undefined))];
}

/** One leader broker; `B` is the publisher's batch, of which the lane carries at most one. */
export class PublisherLane<B> {
  private current: LaneState = 'down';
  private readonly producers = new ReplaceableProducer();
  private inFlight: B | undefined;
  /** Its producer's metadata may predate the current layout: refreshed before its next batch. */
  private staleNow = false;
  private refreshingNow = false;
  private probingNow = false;
  /** Its last proof failed (reported to the observer once, until one succeeds). */
  private unwritable = false;
  /** When it last failed, and the layout it knew then (see failureSuspicionMs). */
  private failedAt = 0;
  private failedLayout = '';
  private heardAt = 0;
  private sendsStarted = 0;
  private cancelBackoff: (() => void) | undefined;

  constructor(
    /** Leader broker id; SINGLE_LANE for the single lane of a producer without layout. */
    readonly broker: number,
    private readonly opts: LaneOptions,
    private readonly host: LaneHost,
  ) {}

  get state(): LaneState {
    return this.current;
  }

  /** It has a connected producer (events for it are admitted). */
  get isConnected(): boolean {
    return this.current === 'unproven' || this.current === 'ready';
  }

  get isReady(): boolean {
    return this.current === 'ready';
  }

  get producer(): RecordProducer | undefined {
    return this.producers.current;
  }

  /** The batch in flight, if any. */
  get batch(): B | undefined {
    return this.inFlight;
  }

  get stale(): boolean {
    return this.staleNow;
  }

  get refreshing(): boolean {
    return this.refreshingNow;
  }

  get probing(): boolean {
    return this.probingNow;
  }

  /** When Kafka last answered this lane (a connection, a batch, a proof or a probe). */
  get lastHeardAt(): number {
    return this.heardAt;
  }

  private on(event: LaneEvent): void {
    this.current = TRANSITIONS[event][this.current] ?? this.current;
  }

  /** The leaders changed: its producer learns them before its next batch (its sends route by its own metadata). */
  markStale(): void {
    this.staleNow = true;
  }

  // ---- its one batch ----

  startBatch(batch: B): void {
    this.inFlight = batch;
    this.sendsStarted++;
  }

  /** The batch no longer holds the lane (answered or given up). */
  release(batch: B): void {
    if (this.inFlight === batch) this.inFlight = undefined;
  }

  /** A batch was acknowledged: proof that its partitions take writes, and the end of any suspicion. */
  acknowledged(): void {
    this.heardAt = performance.now();
    this.on('proved');
    this.failedAt = 0;
  }

  // ---- connecting ----

  /** Start: connects this lane's first producer and proves it; rejects when it cannot connect. */
  async start(producer: RecordProducer): Promise<void> {
    this.producers.use(producer);
    this.on('connect');
    await producer.connect();
    this.on('connected');
    this.heardAt = performance.now();
    // Connected but not writable (NOT_ENOUGH_REPLICAS) is not a start failure: not ready, and asked again.
    await this.prove(producer).catch(noop);
  }

  /** The publisher drained: stops connecting; returns the producer to close. */
  close(): RecordProducer | undefined {
    this.cancelBackoff?.();
    const producer = this.producers.close();
    this.on('close');
    return producer;
  }

  /** Throws a failed producer away (never reused, see README) and connects a new one. */
  replaceProducer(failed: RecordProducer, error: unknown): void {
    if (this.producers.current !== failed || this.host.closed()) return;
    this.on('failed');
    this.producers.discard(failed);
    this.failedAt = performance.now();
    const layout = this.host.layout();
    this.failedLayout = layout ? layoutSignature(layout) : '';
    this.opts.observer.connection?.(false, error, this.broker);
    void this.reconnect(true);
    // The failure may mean the leader moved: ask where the partitions are now.
    void this.host.refreshLayout();
  }

  /** Connects a producer (with backoff between rounds) until one answers or the publisher closes. */
  async reconnect(failed = false): Promise<void> {
    if (this.current !== 'down') return;
    this.on('connect');
    let delay = this.opts.reconnectBackoffMs.initial;
    try {
      while (!this.host.closed()) {
        let producer: RecordProducer;
        try {
          producer = await this.connectFirst(failed);
          if (this.host.closed()) {
            await producer.disconnect().catch(noop);
            return;
          }
          this.producers.use(producer);
          this.on('connected');
          this.staleNow = false;
          this.heardAt = performance.now();
          this.opts.observer.connection?.(this.host.allConnected(), undefined, this.broker);
          // Connected is not writable (NOT_ENOUGH_REPLICAS, a leader elsewhere): proven by a probe or a batch.
          void this.prove(producer).catch(noop);
          this.host.flush();
          return;
        } catch (err) {
          this.opts.observer.connection?.(false, err, this.broker);
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
      this.on('gaveUp');
    }
  }

  /**
   * A new producer. After a failure nobody knows which broker hangs (acks=all makes every
   * leader wait for a frozen follower), and a client asks the first bootstrap broker that
   * accepts a connection, which a hung broker still does: so up to three producers connect at
   * once, each starting from another broker, and the first that gets its producer id wins.
   */
  private async connectFirst(failed: boolean): Promise<RecordProducer> {
    const addresses = this.host.addressesFor(this.broker, failed);
    const orders =
      failed && addresses.length > 1
        ? addresses.slice(0, 3).map((first) => [first, ...addresses.filter((a) => a !== first)])
        : [addresses];
    const producers = orders.map((order) => this.opts.createProducer(order));
    try {
      const winner = await Promise.any(producers.map((p) => p.connect().then(() => p)));
      for (const p of producers) if (p !== winner) void p.disconnect().catch(noop);
      return winner;
    } catch (err) {
      for (const p of producers) void p.disconnect().catch(noop);
      throw err instanceof AggregateError ? (err.errors[0] ?? err) : err;
    }
  }

  // ---- proof, refresh, probe ----

  /** Asks this producer for the layout: a fresh answer, and proof that the lane's partitions take writes. */
  private async prove(producer: RecordProducer): Promise<void> {
    const topics = this.opts.probeTopics;
    if (!producer.layout || topics.length === 0) {
      this.on('proved');
      return;
    }
    try {
      const layout = await withTimeout(
        producer.layout(topics),
        this.opts.probeTimeoutMs,
        `metadata of ${topics.join(', ')}`,
      );
      if (this.producers.current !== producer) return;
      this.host.applyLayout(layout);
      const own = layout.partitions.filter((p) => p.leader === this.broker || p.leader < 0);
      assertWritable(topics, own.length > 0 ? own : layout.partitions, this.opts.minInsyncReplicas);
      // Failure suspicion: a dead broker stays in the metadata until its session expires.
      const since = performance.now() - this.failedAt;
      if (this.failedAt > 0 && since < this.opts.failureSuspicionMs && layoutSignature(layout) === this.failedLayout) {
        throw new NotWritableError(
          `broker ${this.broker} failed ${Math.round(since)} ms ago and the cluster's metadata has not changed since: waiting for a write to succeed`,
        );
      }
    } catch (err) {
      if (this.producers.current === producer && !this.unwritable) {
        this.unwritable = true;
        this.opts.observer.writable?.(this.broker, err);
      }
      throw err;
    }
    this.on('proved');
    this.heardAt = performance.now();
    if (this.unwritable) {
      this.unwritable = false;
      this.opts.observer.writable?.(this.broker);
    }
  }

  /** Before it sends after the leaders changed, its producer learns them too. */
  async refresh(): Promise<void> {
    const producer = this.producers.current;
    if (!producer?.layout || this.refreshingNow) return;
    this.refreshingNow = true;
    try {
      this.host.applyLayout(
        await withTimeout(producer.layout(this.opts.probeTopics), this.opts.probeTimeoutMs, 'metadata refresh'),
      );
      if (this.producers.current === producer) this.staleNow = false;
    } catch (err) {
      this.replaceProducer(producer, new Error(`metadata refresh failed: ${errorMessage(err)}`, { cause: err }));
    } finally {
      this.refreshingNow = false;
      this.host.flush();
    }
  }

  /** Asks Kafka whether the lane still works (idle, or not yet proven); a producer that does not answer is replaced. */
  async probe(): Promise<void> {
    const producer = this.producers.current!;
    this.probingNow = true;
    const sendsBefore = this.sendsStarted;
    try {
      if (producer.layout) await this.prove(producer);
      else if (producer.probe) {
        await withTimeout(producer.probe(this.opts.probeTopics), this.opts.probeTimeoutMs, 'probe');
        this.heardAt = performance.now();
      }
    } catch (err) {
      // Kafka answered but cannot take writes: the lane stays, not ready, and asks again.
      if (err instanceof NotWritableError) {
        this.on('doubted');
        return;
      }
      // A send that started meanwhile settles the question itself (and replaces the producer if it fails).
      if (this.sendsStarted === sendsBefore) {
        this.replaceProducer(
          producer,
          new Error(`idle probe of ${this.opts.probeTopics.join(', ')} failed: ${errorMessage(err)}`, { cause: err }),
        );
      }
    } finally {
      this.probingNow = false;
    }
  }
}
