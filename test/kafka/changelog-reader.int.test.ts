import { describe, expect, it } from 'vitest';
import { readChangelogPartition } from '../../src/kafka/changelog-reader.js';
import { createTopics, produce, testKafka, uniqueTopic } from '../helpers/kafka.js';

describe('reading a changelog', () => {
  it('a read that ends before it reached Kafka (a timeout, a cancel) rejects, and nothing goes unhandled', async () => {
    const topic = uniqueTopic('reader-early');
    await createTopics([topic]);
    await produce(topic, [{ key: 'k', value: 'v', partition: 0 }]);
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      // The deadline passes during the connect: the read's end is settled before anything awaits
      // it (a partition revoked mid-restore did this to a sender, which exited).
      const timedOut = await readChangelogPartition({
        kafka: testKafka('reader-early'),
        topic,
        partition: 0,
        timeoutMs: 1,
        onRecord: () => undefined,
      }).catch((error: unknown) => error);
      expect(timedOut).toMatchObject({ code: 'KAFKA_UNAVAILABLE' });
      const cancel = new AbortController();
      const reading = readChangelogPartition({
        kafka: testKafka('reader-early'),
        topic,
        partition: 0,
        timeoutMs: 15_000,
        signal: cancel.signal,
        onRecord: () => undefined,
      }).catch((error: unknown) => error);
      setTimeout(() => cancel.abort(), 20);
      const cancelled = await reading;
      // Cancelled, or read to its end first.
      if (cancelled instanceof Error) expect(cancelled).toMatchObject({ code: 'SHUTTING_DOWN' });
      const before = new AbortController();
      before.abort();
      await expect(
        readChangelogPartition({
          kafka: testKafka('reader-early'),
          topic,
          partition: 0,
          signal: before.signal,
          onRecord: () => undefined,
        }),
      ).rejects.toMatchObject({ code: 'SHUTTING_DOWN', message: `reading ${topic} was cancelled` });
      await new Promise((r) => setTimeout(r, 200));
      expect(unhandled).toEqual([]);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  });

  it('hands every record over in order before it resolves, batch after batch; a callback failing on the last batch fails the read', async () => {
    const topic = uniqueTopic('reader-order');
    await createTopics([topic]);
    const value = 'v'.repeat(1000);
    // 20 record batches; small fetches: about one a fetch, each handed over while kafkajs fetches the next.
    for (let part = 0; part < 20; part++)
      await produce(
        topic,
        Array.from({ length: 50 }, (_, i) => ({ key: `k${part * 50 + i}`, value, partition: 0 })),
      );
    const read = {
      kafka: testKafka('reader-order'),
      topic,
      partition: 0,
      timeoutMs: 30_000,
      maxBytesPerPartition: 16_384,
    };
    const keys: string[] = [];
    let batches = 0;
    let applying = false;
    const result = await readChangelogPartition({
      ...read,
      onRecord: (r) => {
        expect(applying).toBe(false);
        keys.push(r.key!.toString());
      },
      afterBatch: () => {
        batches++;
        // A caller that holds the read while its store catches up: no batch is handed over meanwhile.
        applying = true;
        return new Promise<void>((resolve) => setTimeout(() => ((applying = false), resolve()), 1));
      },
    });
    expect(result.delivered).toBe(1000);
    expect(keys).toEqual(Array.from({ length: 1000 }, (_, i) => `k${i}`));
    expect(batches).toBeGreaterThan(10);

    const failing = readChangelogPartition({
      ...read,
      onRecord: (r) => {
        if (r.key!.toString() === 'k999') throw new Error('the store refused k999');
      },
    });
    await expect(failing).rejects.toThrow('the store refused k999');
  });
  it("two producers' aborted transactions interleaved in a partition: none of their records, read from the start or from inside them", async () => {
    const topic = uniqueTopic('reader-aborts');
    await createTopics([topic]);
    const kafka = testKafka('reader-aborts');
    const a = kafka.producer({ transactionalId: `${topic}-a`, idempotent: true, maxInFlightRequests: 1 });
    const b = kafka.producer({ transactionalId: `${topic}-b`, idempotent: true, maxInFlightRequests: 1 });
    await Promise.all([a.connect(), b.connect()]);
    const one = (key: string) => ({ partition: 0, key, value: key });
    try {
      await produce(topic, [one('plain-before')]);
      // A's transaction begins first, B's second; B is aborted first: the broker lists them in that order.
      const txA = await a.transaction();
      await txA.send({ topic, messages: [one('a-1')] });
      const txB = await b.transaction();
      await txB.send({ topic, messages: [one('b-1')] });
      await txA.send({ topic, messages: [one('a-2')] });
      await txB.send({ topic, messages: [one('b-2')] });
      await txB.abort();
      await txA.abort();
      const committed = await b.transaction();
      await committed.send({ topic, messages: [one('b-committed')] });
      await committed.commit();
      await produce(topic, [one('plain-after')]);
    } finally {
      await Promise.all([a.disconnect(), b.disconnect()]);
    }
    const read = async (from?: number) => {
      const keys: string[] = [];
      await readChangelogPartition({
        kafka,
        topic,
        partition: 0,
        timeoutMs: 30_000,
        ...(from !== undefined ? { from: new Map([[0, from]]) } : {}),
        onRecord: (r) => void keys.push(r.key!.toString()),
      });
      return keys;
    };
    expect(await read()).toEqual(['plain-before', 'b-committed', 'plain-after']);
    // From b-1's offset (2): inside both aborted transactions.
    expect(await read(2)).toEqual(['b-committed', 'plain-after']);

    // A kafkajs consumer group (the sender's, the tracker's engine), read_committed: the same.
    const consumer = kafka.consumer({ groupId: `${topic}-group` });
    const consumed: string[] = [];
    try {
      await consumer.connect();
      await consumer.subscribe({ topics: [topic], fromBeginning: true });
      await new Promise<void>((resolve, reject) => {
        consumer
          .run({
            eachMessage: async ({ message }) => {
              consumed.push(message.key!.toString());
              if (message.key!.toString() === 'plain-after') resolve();
            },
          })
          .catch(reject);
      });
    } finally {
      await consumer.disconnect();
    }
    expect(consumed).toEqual(['plain-before', 'b-committed', 'plain-after']);
  });
});
