import { describe, expect, it } from 'vitest';
import type { RecordProducer } from '../../src/kafka/port.js';
import { ReplaceableProducer } from '../../src/kafka/replaceable-producer.js';

/** A producer that only counts its connects and disconnects (pure logic under test: no Kafka). */
function fakeProducer(options: { failConnect?: boolean } = {}) {
  const counts = { connects: 0, disconnects: 0 };
  const producer = {
    async connect() {
      counts.connects += 1;
      if (options.failConnect) throw new Error('broker unreachable');
    },
    async disconnect() {
      counts.disconnects += 1;
    },
    async send() {},
    async probe() {},
    async layout() {
      return { brokers: new Map(), partitions: [] };
    },
  } as unknown as RecordProducer;
  return { producer, counts };
}

describe('ReplaceableProducer (a failed producer is never reused)', () => {
  it('hands out the one connected producer until it fails, then a new one', async () => {
    const holder = new ReplaceableProducer();
    const made: ReturnType<typeof fakeProducer>[] = [];
    const create = () => {
      made.push(fakeProducer());
      return made.at(-1)!.producer;
    };
    const first = await holder.connected(create);
    expect(await holder.connected(create)).toBe(first);
    expect(made).toHaveLength(1);
    expect(holder.discard(first!)).toBe(true);
    // A stale failure report for a producer no longer in use changes nothing.
    expect(holder.discard(first!)).toBe(false);
    const second = await holder.connected(create);
    expect(second).not.toBe(first);
    expect(made.map((m) => m.counts)).toEqual([
      { connects: 1, disconnects: 1 },
      { connects: 1, disconnects: 0 },
    ]);
  });

  it('disconnects a producer that could not connect, and one that connected after close', async () => {
    const holder = new ReplaceableProducer();
    const failing = fakeProducer({ failConnect: true });
    await expect(holder.connected(() => failing.producer)).rejects.toThrow('broker unreachable');
    expect(failing.counts).toEqual({ connects: 1, disconnects: 1 });
    expect(holder.current).toBeUndefined();

    const late = fakeProducer();
    const connecting = holder.connected(() => late.producer);
    expect(holder.close()).toBeUndefined();
    expect(await connecting).toBeUndefined();
    expect(late.counts).toEqual({ connects: 1, disconnects: 1 });
    expect(holder.closed).toBe(true);
  });
});
