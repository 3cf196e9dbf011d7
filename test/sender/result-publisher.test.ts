import { describe, expect, it } from 'vitest';
import type { RecordProducer, TopicRecords } from '../../src/kafka/port.js';
import { ResultPublisher } from '../../src/sender/result-publisher.js';

/** Producers the test scripts: each fails the sends listed in `failing` (by its own send number). */
function producers(plan: { connectFails?: boolean; failing?: number[] }[]) {
  const made: { id: number; sent: TopicRecords[][]; disconnected: boolean }[] = [];
  const create = (): RecordProducer => {
    const id = made.length;
    const spec = plan[id] ?? {};
    const me = { id, sent: [] as TopicRecords[][], disconnected: false };
    made.push(me);
    let sends = 0;
    return {
      connect: async () => {
        if (spec.connectFails) throw new Error(`connect ${id} refused`);
      },
      send: async (batches) => {
        sends += 1;
        await new Promise((r) => setTimeout(r, 1));
        if (spec.failing?.includes(sends)) throw new Error(`producer ${id} send ${sends} failed`);
        me.sent.push(batches);
      },
      disconnect: async () => {
        me.disconnected = true;
      },
    };
  };
  return { made, create };
}

const record = (n: number) => ({ key: `k${n}`, value: `v${n}`, headers: {} });

describe('ResultPublisher', () => {
  it('batches what arrives while a produce is in flight (grouped by topic)', async () => {
    const p = producers([{}]);
    const publisher = new ResultPublisher({ createProducer: p.create });
    await publisher.start();
    await Promise.all([1, 2, 3, 4].map((n) => publisher.publish(n % 2 ? 'results' : 'dlq', record(n))));
    expect(p.made).toHaveLength(1);
    expect(p.made[0]!.sent.map((b) => b.flatMap((t) => t.records.map((r) => r.key)))).toEqual([
      ['k1'],
      ['k2', 'k4', 'k3'],
    ]);
  });

  it('with lingerMs, the first record after an idle moment waits for the others of that moment: one produce', async () => {
    const p = producers([{}]);
    const publisher = new ResultPublisher({ createProducer: p.create, lingerMs: 30 });
    await publisher.start();
    const first = publisher.publish('results', record(1));
    await new Promise((r) => setTimeout(r, 10));
    expect(p.made[0]!.sent).toHaveLength(0);
    await Promise.all([first, publisher.publish('results', record(2)), publisher.publish('dlq', record(3))]);
    expect(p.made[0]!.sent.map((b) => b.flatMap((t) => t.records.map((r) => r.key)))).toEqual([['k1', 'k2', 'k3']]);
    // Idle again: the next record lingers again, alone.
    await publisher.publish('results', record(4));
    expect(p.made[0]!.sent).toHaveLength(2);
  });

  it('never reuses a producer after a failed produce: the next batch goes through a new one', async () => {
    const p = producers([{ failing: [2] }, {}]);
    const replaced: unknown[] = [];
    const publisher = new ResultPublisher({ createProducer: p.create, onReplace: (e) => replaced.push(e) });
    await publisher.start();
    await publisher.publish('results', record(1));
    await expect(publisher.publish('results', record(2))).rejects.toThrow('producer 0 send 2 failed');
    expect(publisher.publishable).toBe(false);
    expect(p.made[0]!.disconnected).toBe(true);
    expect(replaced).toHaveLength(1);
    await publisher.publish('results', record(2));
    expect(publisher.publishable).toBe(true);
    expect(p.made).toHaveLength(2);
    expect(p.made[1]!.sent.flat().flatMap((t) => t.records.map((r) => r.key))).toEqual(['k2']);
  });

  it('a new producer that cannot connect fails the batch (the callers retry) and stays not publishable', async () => {
    const p = producers([{ failing: [1] }, { connectFails: true }, {}]);
    const publisher = new ResultPublisher({ createProducer: p.create });
    await publisher.start();
    await expect(publisher.publish('results', record(1))).rejects.toThrow('send 1 failed');
    await expect(publisher.publish('results', record(1))).rejects.toThrow('connect 1 refused');
    expect(publisher.publishable).toBe(false);
    await publisher.publish('results', record(1));
    expect(publisher.publishable).toBe(true);
    await publisher.close();
    await expect(publisher.publish('results', record(9))).rejects.toThrow(/closed/);
  });

  it('is not publishable while a produce hangs past stallMs', async () => {
    let release!: () => void;
    const hanging: RecordProducer = {
      connect: async () => undefined,
      send: () => new Promise<void>((r) => (release = r)),
      disconnect: async () => undefined,
    };
    const publisher = new ResultPublisher({ createProducer: () => hanging, stallMs: 50 });
    await publisher.start();
    const pending = publisher.publish('results', record(1));
    expect(publisher.publishable).toBe(true);
    await new Promise((r) => setTimeout(r, 80));
    expect(publisher.publishable).toBe(false);
    release();
    await pending;
    expect(publisher.publishable).toBe(true);
  });
});
