import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import {
  followChangelog,
  type ChangelogFollower,
  type ChangelogFollowStatus,
} from '../../src/kafka/changelog-follower.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { silentLogger } from '../../src/platform/logger.js';
import type { ConsumedRecord } from '../../src/kafka/group-consumer.js';
import { createTopics, produce, testKafka, uniqueTopic } from '../helpers/kafka.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

async function waitUntil(condition: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A transactional producer of the suite's Kafka (closed after the test). */
async function transactionalProducer() {
  const producer = testKafka('changelog-follower-tx').producer({
    transactionalId: `follower-test-${randomUUID()}`,
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
  });
  await producer.connect();
  cleanups.push(() => producer.disconnect());
  return producer;
}

function start(topic: string, extra: Partial<Parameters<typeof followChangelog>[0]> = {}) {
  const seen: ConsumedRecord[] = [];
  const events: string[] = [];
  const follower: ChangelogFollower = followChangelog({
    kafka: testKafka('changelog-follower'),
    topic,
    groupIdPrefix: `${topic}-follower`,
    timeoutMs: 30_000,
    logger: silentLogger,
    onRecords: (records) => seen.push(...records),
    onWaitingForTopic: () => events.push('waiting'),
    onCaughtUp: ({ records }) => events.push(`caught up after ${records} (seen ${seen.length})`),
    ...extra,
  });
  cleanups.push(() => follower.stop());
  return { follower, seen, events };
}

describe('changelog follower (read to the end, then follow)', () => {
  it('waits for the topic, reads committed records to the end (a partition ending with an aborted transaction included), then follows', async () => {
    const topic = uniqueTopic('follow');
    const { follower, seen, events } = start(topic);
    await waitUntil(() => events.includes('waiting'), 10_000, 'the follower to wait for the topic');
    expect(follower.status()).toEqual({ stage: 'waiting-for-topic' });

    await createTopics([topic], 2);
    await produce(topic, [
      { key: 'a', value: 'a1', partition: 0 },
      { key: 'b', value: 'b1', partition: 1 },
      { key: 'a', value: 'a2', partition: 0 },
    ]);
    // Partition 1 ends with an aborted record and its marker: nothing of it reaches onRecords,
    // and the read must still see that partition at its end.
    const producer = await transactionalProducer();
    const aborted = await producer.transaction();
    await aborted.send({ topic, acks: -1, messages: [{ key: 'b', value: 'b-aborted', partition: 1 }] });
    await aborted.abort();

    const load = await follower.loaded;
    expect(load.records).toBe(3);
    expect(seen.map((r) => `${r.partition}:${r.key?.toString()}=${r.value?.toString()}`).sort()).toEqual([
      '0:a=a1',
      '0:a=a2',
      '1:b=b1',
    ]);
    expect(seen[0]).toMatchObject({ topic, offset: expect.any(String), timestamp: expect.any(String), headers: {} });
    expect(events).toEqual(['waiting', 'caught up after 3 (seen 3)']);
    expect(follower.status()).toEqual({ stage: 'following' });

    // Kept following with the same consumer.
    await produce(topic, [{ key: 'c', value: 'c1', partition: 1 }]);
    await waitUntil(() => seen.some((r) => r.value?.toString() === 'c1'), 20_000, 'a record written after the read');
    await follower.stop();
    expect(follower.status()).toEqual({ stage: 'following' });
  });

  it('an empty topic is read at once; a transaction left open holds the read until its timeout, saying where it stopped', async () => {
    const empty = uniqueTopic('follow-empty');
    await createTopics([empty], 1);
    const first = start(empty);
    expect((await first.follower.loaded).records).toBe(0);
    expect(first.follower.status()).toEqual({ stage: 'following' });

    const topic = uniqueTopic('follow-open');
    await createTopics([topic], 1);
    await produce(topic, [{ key: 'a', value: 'committed' }]);
    const producer = await transactionalProducer();
    const open = await producer.transaction();
    await open.send({ topic, acks: -1, messages: [{ key: 'a', value: 'open' }] });

    const statuses: ChangelogFollowStatus[] = [];
    const { follower, seen } = start(topic, {
      timeoutMs: 8_000,
      timeoutError: (status) => {
        statuses.push(status);
        return new Error('custom timeout');
      },
    });
    await waitUntil(() => seen.length > 0, 8_000, 'the committed record');
    const error = await follower.loaded.catch((e: unknown) => e);
    expect(seen.map((r) => r.value?.toString())).toEqual(['committed']);
    // A plain Error from the caller's timeoutError is wrapped like any other failure.
    expect(isMsgbridgeError(error) && error.code).toBe('KAFKA_UNAVAILABLE');
    expect((error as Error).message).toBe(`reading ${topic} failed: custom timeout`);
    expect(statuses).toEqual([{ stage: 'reading', offsets: 2, partitions: 1, progress: 'partition 0 at 1 of 2' }]);

    // Without timeoutError: the default message.
    const second = start(topic, { timeoutMs: 3_000 });
    const plain = await second.follower.loaded.catch((e: unknown) => e);
    expect((plain as Error).message).toMatch(
      new RegExp(`^reading ${topic} did not reach its end within 3000 ms \\(partition 0 at \\d of 2\\)`),
    );
    await open.abort();
  });

  it('stop() before the end rejects loaded with SHUTTING_DOWN', async () => {
    const topic = uniqueTopic('follow-stop');
    const { follower } = start(topic);
    await new Promise((r) => setTimeout(r, 300));
    await follower.stop();
    const error = await follower.loaded.catch((e: unknown) => e);
    expect(isMsgbridgeError(error) && error.code).toBe('SHUTTING_DOWN');
    expect((error as Error).message).toBe(`reading ${topic} was cancelled`);
  });
});
