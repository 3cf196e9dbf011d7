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
});
