import { describe, expect, it } from 'vitest';
import type { ClusterLayout, RecordProducer, TopicRecords } from '../../src/kafka/port.js';
import { ResultPublisher } from '../../src/sender/result-publisher.js';

/**
 * Two brokers: broker 1 leads the even partitions of `results` and `ledger`, broker 2 the odd ones. Each producer's
 * sends wait until the test answers them; `hung` brokers never answer, `failing` ones fail their next send.
 */
function cluster() {
  const layout: ClusterLayout = {
    brokers: new Map([
      [1, 'b1:9092'],
      [2, 'b2:9092'],
    ]),
    partitions: ['results', 'ledger'].flatMap((topic) =>
      [0, 1, 2, 3].map((partition) => ({ topic, partition, leader: partition % 2 === 0 ? 1 : 2, isr: 2 })),
    ),
  };
  const hung = new Set<number>();
  const failing = new Set<number>();
  const sent: { producer: number; topic: string; partition: number | undefined; key: string }[] = [];
  const made: { disconnected: boolean }[] = [];
  const create = (): RecordProducer => {
    const id = made.length;
    const me = { disconnected: false };
    made.push(me);
    return {
      connect: async () => undefined,
      disconnect: async () => void (me.disconnected = true),
      layout: async () => layout,
      probe: async () => undefined,
      send: async (batches: TopicRecords[]) => {
        const partitions = batches.flatMap((b) => b.records.map((r) => r.partition ?? 0));
        const broker = partitions[0]! % 2 === 0 ? 1 : 2;
        if (hung.has(broker)) return new Promise<void>(() => undefined);
        if (failing.delete(broker)) throw new Error(`broker ${broker} refused`);
        for (const b of batches)
          for (const r of b.records)
            sent.push({ producer: id, topic: b.topic, partition: r.partition, key: String(r.key) });
      },
    };
  };
  return { create, hung, failing, sent, made };
}

function publisherOn(kafka: ReturnType<typeof cluster>) {
  return new ResultPublisher({
    createProducer: kafka.create,
    topics: ['results', 'ledger'],
    publishTimeoutMs: 5000,
    maxRecords: 100,
  });
}

const record = (key: string, partition?: number) => ({
  key,
  value: `v-${key}`,
  headers: {},
  ...(partition === undefined ? {} : { partition }),
});

describe('ResultPublisher', () => {
  it('a record naming its partition (a ledger record) is written to that partition', async () => {
    const kafka = cluster();
    const publisher = publisherOn(kafka);
    await publisher.start();
    await Promise.all([publisher.publish('ledger', record('a', 3)), publisher.publish('ledger', record('b', 0))]);
    expect(kafka.sent.map((s) => [s.topic, s.partition, s.key]).sort()).toEqual([
      ['ledger', 0, 'b'],
      ['ledger', 3, 'a'],
    ]);
    await publisher.close();
    await expect(publisher.publish('ledger', record('c', 1))).rejects.toThrow(/closed/);
  });

  it('a broker that does not answer holds only the records of the partitions it leads', async () => {
    const kafka = cluster();
    const publisher = publisherOn(kafka);
    await publisher.start();
    kafka.hung.add(2);
    let stuckSettled = false;
    const stuck = publisher.publish('ledger', record('stuck', 1)).finally(() => (stuckSettled = true));
    void stuck.catch(() => undefined);
    // A `done` record and a result on broker 1's partitions are acknowledged meanwhile.
    await publisher.publish('ledger', record('done', 2));
    await publisher.publish('results', record('result', 0));
    expect(kafka.sent.map((s) => s.key)).toEqual(['done', 'result']);
    expect(stuckSettled).toBe(false);
  });

  it('a failed produce rejects its records, and the next goes through a new producer', async () => {
    const kafka = cluster();
    const publisher = publisherOn(kafka);
    await publisher.start();
    const before = kafka.made.length;
    kafka.failing.add(1);
    await expect(publisher.publish('ledger', record('x', 0))).rejects.toThrow(/broker 1 refused/);
    await expect.poll(() => kafka.made.length, { timeout: 3000 }).toBeGreaterThan(before);
    expect(publisher.publishable).toBe(false);
    await publisher.publish('ledger', record('x', 0));
    expect(publisher.publishable).toBe(true);
    expect(kafka.sent.at(-1)).toMatchObject({ key: 'x', partition: 0 });
    expect(kafka.sent.at(-1)!.producer).toBeGreaterThanOrEqual(before);
  });
});
