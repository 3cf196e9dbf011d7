import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { watchIntervals } from '../helpers/intervals.js';
import {
  BatchingPublisher,
  type BatchingPublisherOptions,
  type PublishRecord,
} from '../../src/kafka/batching-publisher.js';
import type { MsgbridgeError } from '../../src/platform/errors.js';
import { javaCompatibleHash } from '../../src/kafka/partitioner.js';
import type { ClusterLayout, RecordProducer, TopicRecords } from '../../src/kafka/port.js';

/** An in-memory RecordProducer whose sends the test completes by hand. */
class FakeKafka {
  producers: FakeProducer[] = [];
  failConnects = 0;
  /** When set, connects wait for it (a replacement producer that is not there yet). */
  holdConnects: Promise<void> | undefined;
  /** When set, producers answer it as their metadata (lanes per leader); else they have none. */
  layout: ClusterLayout | undefined;
  create = (bootstrapFirst?: readonly string[]): RecordProducer => {
    const p = this.layout ? new LayoutFakeProducer(this) : new FakeProducer(this);
    p.bootstrapFirst = bootstrapFirst ?? [];
    this.producers.push(p);
    return p;
  };
  get sends() {
    return this.producers.flatMap((p) => p.sends);
  }
  get pending() {
    return this.sends.filter((s) => !s.done);
  }
  /** Values written so far, in write order. */
  written: string[] = [];
  /** How the next probes answer. */
  probeAnswer: 'ok' | 'fail' | 'hang' = 'ok';
  probes: string[][] = [];
}

interface Send {
  batches: TopicRecords[];
  values: string[];
  done: boolean;
  ack(): void;
  fail(err?: Error): void;
}

class FakeProducer implements RecordProducer {
  sends: Send[] = [];
  connected = false;
  bootstrapFirst: readonly string[] = [];
  constructor(private readonly kafka: FakeKafka) {}
  async connect() {
    await this.kafka.holdConnects;
    if (this.kafka.failConnects > 0) {
      this.kafka.failConnects--;
      throw new Error('connection refused');
    }
    this.connected = true;
  }
  async disconnect() {
    this.connected = false;
  }
  probe(topics: string[]): Promise<void> {
    this.kafka.probes.push(topics);
    if (this.kafka.probeAnswer === 'ok') return Promise.resolve();
    if (this.kafka.probeAnswer === 'fail') return Promise.reject(new Error('metadata request refused'));
    return new Promise(() => {});
  }
  send(batches: TopicRecords[]): Promise<void> {
    return new Promise((resolve, reject) => {
      const values = batches.flatMap((b) => b.records.map((r) => String(r.value)));
      const send: Send = {
        batches,
        values,
        done: false,
        ack: () => {
          send.done = true;
          this.kafka.written.push(...values);
          resolve();
        },
        fail: (err = new Error('broker gone')) => {
          send.done = true;
          reject(err);
        },
      };
      this.sends.push(send);
    });
  }
}

class LayoutFakeProducer extends FakeProducer {
  constructor(private readonly cluster: FakeKafka) {
    super(cluster);
  }
  layout(): Promise<ClusterLayout> {
    const layout = this.cluster.layout!;
    return Promise.resolve({ brokers: new Map(layout.brokers), partitions: layout.partitions.map((p) => ({ ...p })) });
  }
}

setFlagsFromString('--expose-gc');

const tick = () => new Promise((r) => setImmediate(r));
async function until(condition: () => boolean, timeoutMs = 2000) {
  const end = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

function rec(key: string, value: string, topic = 't'): PublishRecord {
  return { topic, key, value: Buffer.from(value), headers: { 'event-id': value } };
}

let publishers: BatchingPublisher[] = [];
afterEach(async () => {
  for (const p of publishers) void p.drain();
  publishers = [];
});

/** The bounds every test publisher shares (tests override what they are about). */
const BOUNDS = {
  batchMaxEvents: 100,
  batchMaxBytes: 1_000_000,
  queueMaxEvents: 1000,
  queueMaxBytes: 10_000_000,
  reconnectBackoffMs: { initial: 5, max: 20 },
};

async function setup(overrides: Partial<BatchingPublisherOptions> = {}) {
  const kafka = new FakeKafka();
  const publisher = new BatchingPublisher({
    createProducer: kafka.create,
    ...BOUNDS,
    publishTimeoutMs: 5000,
    ...overrides,
  });
  publishers.push(publisher);
  await publisher.start();
  const outcomes = new Map<string, string>();
  const publish = (key: string, value: string, topic = 't') => {
    const refused = publisher.publish(rec(key, value, topic), (err: MsgbridgeError | null) =>
      outcomes.set(value, err ? err.code : 'ok'),
    );
    if (refused) outcomes.set(value, `refused:${refused.code}`);
  };
  return { kafka, publisher, outcomes, publish };
}

describe('BatchingPublisher', () => {
  it('sends the first event at once, queues the rest while it is in flight, then sends them together', async () => {
    const { kafka, outcomes, publish } = await setup();
    publish('a', 'e1');
    await tick();
    expect(kafka.sends.map((s) => s.values)).toEqual([['e1']]);
    for (let i = 2; i <= 6; i++) publish(`k${i}`, `e${i}`);
    await tick();
    expect(kafka.sends).toHaveLength(1); // still one in flight
    expect(outcomes.size).toBe(0); // nobody answered before the acknowledgement
    kafka.sends[0]!.ack();
    await until(() => kafka.sends.length === 2);
    expect(outcomes.get('e1')).toBe('ok');
    expect(outcomes.has('e2')).toBe(false);
    expect(kafka.sends[1]!.values).toEqual(['e2', 'e3', 'e4', 'e5', 'e6']);
    kafka.sends[1]!.ack();
    await until(() => outcomes.size === 6);
    expect([...outcomes.values()].every((o) => o === 'ok')).toBe(true);
  });

  it('bounds a batch by events and by bytes, and groups records by topic', async () => {
    const { kafka, publish, outcomes } = await setup({ batchMaxEvents: 3, batchMaxBytes: 600 });
    publish('a', 'first');
    await tick();
    for (let i = 0; i < 5; i++) publish(`k${i}`, `m${i}`, i % 2 ? 'x' : 'y');
    publish('big', 'B'.repeat(500));
    const acker = setInterval(() => kafka.pending.forEach((s) => s.ack()), 2);
    await until(() => outcomes.size === 7);
    clearInterval(acker);
    for (const send of kafka.sends) {
      expect(send.values.length).toBeLessThanOrEqual(3);
      // A batch passes 600 bytes only when it is one event too big to share.
      if (send.values.length > 1) expect(send.values.some((v) => v.length >= 500)).toBe(false);
      const topics = send.batches.map((b) => b.topic);
      expect(new Set(topics).size).toBe(topics.length);
    }
    expect(kafka.sends.find((s) => s.values.includes('B'.repeat(500)))!.values).toHaveLength(1);
    expect(kafka.sends.length).toBeGreaterThanOrEqual(4); // first, 5 small ones in at least 2, the big one
    expect([...kafka.written].sort()).toEqual(['B'.repeat(500), 'first', 'm0', 'm1', 'm2', 'm3', 'm4'].sort());
  });

  it('refuses with QUEUE_FULL beyond the queue bound, counting events in flight', async () => {
    const { kafka, outcomes, publish, publisher } = await setup({ queueMaxEvents: 3 });
    publish('a', 'e1');
    await tick();
    publish('b', 'e2');
    publish('c', 'e3');
    publish('d', 'e4');
    expect(outcomes.get('e4')).toBe('refused:QUEUE_FULL');
    expect(publisher.ready).toBe(false);
    kafka.sends[0]!.ack();
    await until(() => outcomes.get('e1') === 'ok');
    expect(publisher.ready).toBe(true);
  });

  it('refuses by bytes too', async () => {
    const { outcomes, publish } = await setup({ queueMaxBytes: 400 });
    publish('a', 'x'.repeat(200));
    publish('b', 'y'.repeat(200));
    expect(outcomes.get('y'.repeat(200))).toBe('refused:QUEUE_FULL');
  });

  it('answers PUBLISH_TIMEOUT for queued and in-flight events past the deadline, and gives up the stuck batch', async () => {
    const { kafka, outcomes, publish, publisher } = await setup({ publishTimeoutMs: 60, sweepIntervalMs: 10 });
    // No replacement producer until both deadlines passed: the queued event can only time out,
    // however slowly this machine runs (it was sent on the replacement once, in a loaded CI run).
    let release: () => void = () => {};
    kafka.holdConnects = new Promise((resolve) => (release = resolve));
    publish('a', 'inflight');
    await tick();
    publish('b', 'queued');
    await until(() => outcomes.size === 2, 5000);
    release();
    expect(outcomes.get('inflight')).toBe('PUBLISH_TIMEOUT');
    expect(outcomes.get('queued')).toBe('PUBLISH_TIMEOUT');
    // The producer that holds the unanswered request is replaced, not waited for.
    await until(() => kafka.producers.length === 2 && publisher.ready);
    expect(kafka.producers[0]!.connected).toBe(false);
    // A late answer to the given-up request changes nothing; the queued event is never sent.
    kafka.sends[0]!.ack();
    await new Promise((r) => setTimeout(r, 30));
    expect(kafka.sends).toHaveLength(1);
    publish('c', 'later');
    await until(() => kafka.pending.length === 1);
    kafka.pending[0]!.ack();
    await until(() => outcomes.get('later') === 'ok');
  });

  it('checks deadlines only while events are pending: idle, no timer; the next event still times out', async () => {
    // The sweep interval (13 ms) tells the publisher's timer from any other.
    const sweeps = watchIntervals(13);
    try {
      const { kafka, outcomes, publish } = await setup({ publishTimeoutMs: 1000, sweepIntervalMs: 13 });
      expect(sweeps.live()).toBe(0);
      publish('a', 'acked');
      expect(sweeps.live()).toBe(1);
      await until(() => kafka.pending.length === 1);
      kafka.pending[0]!.ack();
      await until(() => outcomes.get('acked') === 'ok');
      await until(() => sweeps.live() === 0);
      // Idle now; the next event's deadline is checked again.
      kafka.holdConnects = new Promise(() => {});
      publish('b', 'unanswered');
      expect(sweeps.live()).toBe(1);
      await until(() => outcomes.get('unanswered') === 'PUBLISH_TIMEOUT', 5000);
    } finally {
      vi.restoreAllMocks();
    }
  });

  it('after a failed batch, fails queued events of the same keys (per-key order), keeps the others, reconnects', async () => {
    const { kafka, outcomes, publish, publisher } = await setup();
    publish('k1', 'a1');
    publish('k2', 'b1');
    await tick();
    publish('k1', 'a2'); // same key as a failed event: must not overtake it
    publish('k3', 'c1'); // unrelated key: still goes out
    publish('k1', 'a3');
    kafka.sends[0]!.fail();
    await until(() => outcomes.size >= 4);
    expect(outcomes.get('a1')).toBe('KAFKA_UNAVAILABLE');
    expect(outcomes.get('b1')).toBe('KAFKA_UNAVAILABLE');
    expect(outcomes.get('a2')).toBe('KAFKA_UNAVAILABLE');
    expect(outcomes.get('a3')).toBe('KAFKA_UNAVAILABLE');
    // A new producer replaces the failed one, and the unrelated event goes out on it.
    await until(() => kafka.sends.length === 2);
    expect(kafka.producers).toHaveLength(2);
    expect(kafka.producers[0]!.connected).toBe(false);
    expect(kafka.sends[1]!.values).toEqual(['c1']);
    kafka.sends[1]!.ack();
    await until(() => outcomes.get('c1') === 'ok');
    expect(publisher.ready).toBe(true);
    expect(kafka.written).toEqual(['c1']);
  });

  it('lets go of the bodies of events it dropped while they still wait in the queue', async () => {
    const gc = runInNewContext('gc') as () => void;
    const { kafka, outcomes, publisher } = await setup();
    publisher.publish(rec('k1', 'a1'), (err) => outcomes.set('a1', err ? err.code : 'ok'));
    await tick();
    // Queued behind the batch in flight; the failure of a1 drops the same-key event mid-queue.
    publisher.publish(rec('k2', 'b1'), (err) => outcomes.set('b1', err ? err.code : 'ok'));
    const bodies: WeakRef<Buffer>[] = [];
    (() => {
      const record = rec('k1', 'a2');
      record.value = Buffer.alloc(1 << 20, 1);
      bodies.push(new WeakRef(record.value));
      publisher.publish(record, (err) => outcomes.set('a2', err ? err.code : 'ok'));
    })();
    kafka.failConnects = 1_000_000; // no new producer: b1 stays queued ahead of the dropped a2
    kafka.sends[0]!.fail();
    await until(() => outcomes.get('a2') !== undefined);
    expect(outcomes.get('a2')).toBe('KAFKA_UNAVAILABLE');
    await tick();
    gc();
    expect(bodies[0]!.deref()).toBeUndefined();
    expect(outcomes.has('b1')).toBe(false); // still waiting, so a2 was still in the queue
  });

  it('refuses at once while no producer is connected, and recovers when Kafka answers again', async () => {
    const { kafka, outcomes, publish, publisher } = await setup();
    kafka.failConnects = 3;
    publish('k', 'e1');
    await tick();
    kafka.sends[0]!.fail();
    await until(() => outcomes.has('e1'));
    expect(publisher.ready).toBe(false);
    publish('k', 'e2');
    expect(outcomes.get('e2')).toBe('refused:KAFKA_UNAVAILABLE');
    await until(() => publisher.ready);
    expect(kafka.producers).toHaveLength(5); // the first, three refused connects, the one that worked
    publish('k', 'e3');
    await until(() => kafka.pending.length === 1);
    kafka.pending[0]!.ack();
    await until(() => outcomes.get('e3') === 'ok');
  });

  describe('idle probe', () => {
    const PROBING = { idleProbeIntervalMs: 1000, probeTopics: ['messages', 'delivery_status'], probeTimeoutMs: 50 };

    it('does not probe before an interval has passed without acknowledgements, nor while events are queued or in flight', async () => {
      const { kafka, publisher, publish } = await setup(PROBING);
      await publisher.probeIfIdle(performance.now() + 500);
      expect(kafka.probes).toHaveLength(0);
      publish('k', 'e1');
      await tick();
      await publisher.probeIfIdle(performance.now() + 5000); // a batch is in flight
      expect(kafka.probes).toHaveLength(0);
      kafka.sends[0]!.ack();
      await tick();
      await publisher.probeIfIdle(performance.now() + 500); // the acknowledgement counts as news from Kafka
      expect(kafka.probes).toHaveLength(0);
      await publisher.probeIfIdle(performance.now() + 1000);
      expect(kafka.probes).toEqual([['messages', 'delivery_status']]);
      expect(publisher.ready).toBe(true);
    });

    it('a failed probe makes the publisher not ready and refusing, then a new producer brings it back', async () => {
      const { kafka, publisher, publish, outcomes } = await setup(PROBING);
      kafka.probeAnswer = 'fail';
      kafka.failConnects = 2;
      await publisher.probeIfIdle(performance.now() + 1000);
      expect(publisher.ready).toBe(false);
      expect(publisher.stats().connected).toBe(false);
      publish('k', 'e1');
      expect(outcomes.get('e1')).toBe('refused:KAFKA_UNAVAILABLE');
      expect(kafka.producers[0]!.connected).toBe(false); // the failed producer was closed
      await until(() => publisher.ready);
      expect(kafka.producers).toHaveLength(4); // the first, two refused connects, the one that worked
      publish('k', 'e2');
      await until(() => kafka.pending.length === 1);
      kafka.pending[0]!.ack();
      await until(() => outcomes.get('e2') === 'ok');
    });

    it('a probe that does not answer in time counts as failed', async () => {
      const { kafka, publisher } = await setup(PROBING);
      kafka.probeAnswer = 'hang';
      const started = performance.now();
      await publisher.probeIfIdle(performance.now() + 1000);
      expect(performance.now() - started).toBeGreaterThanOrEqual(45);
      // Replaced: the first producer closed, a second one connected (Kafka "answers" again here).
      expect(kafka.producers[0]!.connected).toBe(false);
      await until(() => kafka.producers.length === 2 && publisher.ready);
    });

    it('a send that starts during the probe overrules the probe, and probing can be turned off', async () => {
      const { kafka, publisher, publish } = await setup(PROBING);
      kafka.probeAnswer = 'hang';
      const probing = publisher.probeIfIdle(performance.now() + 1000);
      publish('k', 'e1');
      await tick();
      expect(kafka.sends).toHaveLength(1);
      await probing;
      expect(publisher.stats().connected).toBe(true);
      kafka.sends[0]!.ack();

      const off = await setup({ ...PROBING, idleProbeIntervalMs: 0 });
      await off.publisher.probeIfIdle(performance.now() + 3_600_000);
      expect(off.kafka.probes).toHaveLength(0);
    });

    it('probes by itself when idle', async () => {
      const { kafka } = await setup({ ...PROBING, idleProbeIntervalMs: 100 });
      kafka.probeAnswer = 'fail';
      await until(() => kafka.producers.length >= 2, 2000);
      expect(kafka.probes.length).toBeGreaterThanOrEqual(1);
      expect(kafka.producers[0]!.connected).toBe(false);
    });
  });

  it('keeps per-key order across batches under load', async () => {
    const { kafka, outcomes, publish } = await setup({ batchMaxEvents: 7 });
    let n = 0;
    const acker = setInterval(() => kafka.pending.forEach((s) => s.ack()), 1);
    for (let round = 0; round < 20; round++) {
      for (let i = 0; i < 10; i++) publish(`k${i % 3}`, `${i % 3}:${n++}`);
      await tick();
    }
    await until(() => outcomes.size === n);
    clearInterval(acker);
    for (const key of ['0', '1', '2']) {
      const seq = kafka.written.filter((v) => v.startsWith(`${key}:`)).map((v) => Number(v.split(':')[1]));
      expect(seq).toEqual([...seq].sort((a, b) => a - b));
    }
    expect(kafka.written).toHaveLength(n);
  });

  it('drain: refuses new events, finishes admitted ones, then disconnects', async () => {
    const { kafka, outcomes, publish, publisher } = await setup();
    publish('a', 'e1');
    await tick();
    publish('b', 'e2');
    const drained = publisher.drain();
    publish('c', 'e3');
    expect(outcomes.get('e3')).toBe('refused:SHUTTING_DOWN');
    let done = false;
    void drained.then(() => (done = true));
    kafka.sends[0]!.ack();
    await until(() => kafka.sends.length === 2);
    expect(done).toBe(false);
    kafka.sends[1]!.ack();
    await drained;
    expect(outcomes.get('e1')).toBe('ok');
    expect(outcomes.get('e2')).toBe('ok');
    expect(kafka.producers[0]!.connected).toBe(false);
  });

  describe('lanes per partition leader', () => {
    const TOPIC = 't';
    const PARTITIONS = 4;
    const partitionOf = (key: string) => javaCompatibleHash(Buffer.from(key)) % PARTITIONS;
    /** A key on each partition. */
    const keys = Array.from({ length: PARTITIONS }, (_, p) => {
      for (let i = 0; ; i++) if (partitionOf(`key${i}`) === p) return `key${i}`;
    });
    const layout = (leaders: number[], isr = 3): ClusterLayout => ({
      brokers: new Map([
        [1, 'b1:9092'],
        [2, 'b2:9092'],
      ]),
      partitions: leaders.map((leader, partition) => ({ topic: TOPIC, partition, leader, isr })),
    });
    async function laneSetup(leaders: number[], overrides: Partial<BatchingPublisherOptions> = {}) {
      const kafka = new FakeKafka();
      kafka.layout = layout(leaders);
      const publisher = new BatchingPublisher({
        createProducer: kafka.create,
        ...BOUNDS,
        publishTimeoutMs: 200,
        sweepIntervalMs: 10,
        layoutRefreshMs: 20,
        probeTopics: [TOPIC],
        ...overrides,
      });
      publishers.push(publisher);
      await publisher.start();
      const outcomes = new Map<string, string>();
      const publish = (key: string, value: string) => {
        const refused = publisher.publish(rec(key, value, TOPIC), (err: MsgbridgeError | null) =>
          outcomes.set(value, err ? err.code : 'ok'),
        );
        if (refused) outcomes.set(value, `refused:${refused.code}`);
      };
      const pendingOn = (partition: number) =>
        kafka.pending.filter((s) => s.batches.some((b) => b.records.some((r) => r.partition === partition)));
      return { kafka, publisher, outcomes, publish, pendingOn };
    }

    it('one producer per leader, each sending only the partitions it leads, with explicit partitions', async () => {
      const { kafka, publish, outcomes, publisher } = await laneSetup([1, 2, 1, 2]);
      expect(publisher.stats()).toMatchObject({ lanes: 2, lanesReady: 2, connected: true });
      expect(publisher.ready).toBe(true);
      keys.forEach((key, p) => publish(key, `p${p}`));
      await tick();
      expect(kafka.sends).toHaveLength(2); // one request per leader, in flight together
      for (const send of kafka.sends) {
        const partitions = send.batches.flatMap((b) => b.records.map((r) => r.partition!)).sort();
        expect(partitions.every((p) => p % 2 === partitions[0]! % 2)).toBe(true);
      }
      kafka.pending.forEach((s) => s.ack());
      await until(() => outcomes.size === PARTITIONS);
      expect([...outcomes.values()].every((o) => o === 'ok')).toBe(true);
    });

    it('a hung broker holds only the partitions it leads; its replacement producer is steered to the broker that answers', async () => {
      const { kafka, publish, outcomes, pendingOn } = await laneSetup([1, 2, 1, 2]);
      publish(keys[0]!, 'stuck'); // broker 1 never answers
      publish(keys[1]!, 'ok-1');
      await tick();
      pendingOn(1).forEach((s) => s.ack());
      await until(() => outcomes.get('ok-1') === 'ok');
      // Broker 2's partitions keep flowing while broker 1's request hangs.
      for (let i = 0; i < 3; i++) {
        publish(keys[3]!, `ok-3-${i}`);
        await until(() => pendingOn(3).length === 1);
        pendingOn(3).forEach((s) => s.ack());
        await until(() => outcomes.get(`ok-3-${i}`) === 'ok');
      }
      expect(outcomes.has('stuck')).toBe(false);
      // Past the publish timeout the stuck batch is given up and its lane gets a new producer,
      // which tries broker 2 (answering) before broker 1.
      await until(() => outcomes.has('stuck'));
      expect(outcomes.get('stuck')).toBe('PUBLISH_TIMEOUT');
      await until(() =>
        kafka.producers.some(
          (p, i) => i > 1 && p.connected && p.bootstrapFirst[0] === 'b2:9092' && p.bootstrapFirst.at(-1) === 'b1:9092',
        ),
      );
    });

    it("partitions whose leader moved go to the new leader's lane at once, without waiting for the timeout", async () => {
      const { kafka, publish, outcomes, pendingOn, publisher } = await laneSetup([1, 2, 1, 2], {
        publishTimeoutMs: 60_000,
      });
      publish(keys[0]!, 'stuck');
      await until(() => pendingOn(0).length === 1);
      kafka.layout = layout([2, 2, 2, 2]); // broker 1 fenced: its partitions moved
      await until(() => outcomes.has('stuck'), 2000);
      expect(outcomes.get('stuck')).toBe('KAFKA_UNAVAILABLE');
      publish(keys[0]!, 'moved');
      await until(() => pendingOn(0).length === 2); // the old one still hangs, the new one is sent
      const send = pendingOn(0).find((s) => s.values.includes('moved'))!;
      send.ack();
      await until(() => outcomes.get('moved') === 'ok');
      expect(publisher.stats()).toMatchObject({ lanes: 1 });
    });

    it('is ready only while every leader can take acks=all writes: fewer in-sync replicas than min.insync.replicas means not ready', async () => {
      const { kafka, publisher, publish, outcomes } = await laneSetup([1, 2, 1, 2], {
        minInsyncReplicas: new Map([[TOPIC, 2]]),
        failureSuspicionMs: 300,
      });
      expect(publisher.ready).toBe(true);
      kafka.layout = {
        ...layout([1, 2, 1, 2]),
        partitions: layout([1, 2, 1, 2]).partitions.map((p) => ({ ...p, isr: p.leader === 2 ? 1 : 3 })),
      };
      publish(keys[1]!, 'refused-by-kafka');
      await tick();
      kafka.pending[0]!.fail(new Error('NOT_ENOUGH_REPLICAS'));
      await until(() => outcomes.has('refused-by-kafka'));
      // Reconnected, but the metadata shows the ISR short: not ready, although a producer connects.
      await until(() => kafka.producers.length >= 4);
      await new Promise((r) => setTimeout(r, 100));
      expect(publisher.stats().connected).toBe(true);
      expect(publisher.ready).toBe(false);
      kafka.layout = layout([1, 2, 1, 2]);
      await until(() => publisher.ready, 2000);
    });

    it('after a failure, metadata that has not changed is not believed until the suspicion has passed; a successful write is', async () => {
      const { publisher, publish, outcomes, pendingOn } = await laneSetup([1, 2, 1, 2], { failureSuspicionMs: 60_000 });
      publish(keys[1]!, 'lost');
      await tick();
      pendingOn(1)[0]!.fail(new Error('connection refused'));
      await until(() => outcomes.has('lost'));
      // Reconnected; the metadata (unchanged: a dead broker stays in it until its session ends) says all is well.
      await until(() => publisher.stats().connected);
      await new Promise((r) => setTimeout(r, 100));
      expect(publisher.ready).toBe(false);
      publish(keys[1]!, 'written');
      await until(() => pendingOn(1).length === 1);
      pendingOn(1)[0]!.ack();
      await until(() => outcomes.get('written') === 'ok');
      expect(publisher.ready).toBe(true);
    });

    it('keeps per-key order with lanes under load and failures', async () => {
      const { kafka, publish, outcomes } = await laneSetup([1, 2, 1, 2], { batchMaxEvents: 5 });
      let n = 0;
      let sends = 0;
      const acker = setInterval(() => {
        for (const s of kafka.pending) {
          if (sends++ % 7 === 3) s.fail();
          else s.ack();
        }
      }, 1);
      for (let round = 0; round < 30; round++) {
        for (let i = 0; i < 8; i++) publish(keys[i % PARTITIONS]!, `${i % PARTITIONS}:${n++}`);
        await tick();
      }
      await until(() => outcomes.size === n, 5000);
      clearInterval(acker);
      for (let p = 0; p < PARTITIONS; p++) {
        const seq = kafka.written.filter((v) => v.startsWith(`${p}:`)).map((v) => Number(v.split(':')[1]));
        expect(seq).toEqual([...seq].sort((a, b) => a - b));
      }
      const acknowledged = [...outcomes].filter(([, o]) => o === 'ok').map(([v]) => v);
      expect(acknowledged.length).toBeGreaterThan(0);
      for (const v of acknowledged) expect(kafka.written).toContain(v);
    });
  });
});
