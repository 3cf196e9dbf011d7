import { describe, expect, it } from 'vitest';
import { readChangelogPartition } from '../../src/kafka/changelog-reader.js';
import { createTopics, produce, testKafka, uniqueTopic } from '../helpers/kafka.js';

describe('reading a changelog', () => {
  it('a read that ends while its consumer still joins (a timeout, a cancel) rejects, and nothing goes unhandled', async () => {
    const topic = uniqueTopic('reader-early');
    await createTopics([topic]);
    await produce(topic, [{ key: 'k', value: 'v', partition: 0 }]);
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown) => void unhandled.push(reason);
    process.on('unhandledRejection', onUnhandled);
    try {
      // The deadline passes during the consumer's connect: the read's end is settled before
      // anything awaits it (a partition revoked mid-restore did this to a sender, which exited).
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
      // Cancelled (before the consumer was made: the signal's own AbortError), or read to its end first.
      if (cancelled instanceof Error)
        expect([(cancelled as { code?: string }).code, cancelled.name]).toSatisfy(
          ([code, name]: [string | undefined, string]) => code === 'SHUTTING_DOWN' || name === 'AbortError',
        );
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
});
