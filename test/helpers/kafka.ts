import { randomUUID } from 'node:crypto';
import { Kafka, logLevel, type Admin, type RetryOptions } from 'kafkajs';
import { inject } from 'vitest';
import { whileLeadersMove } from '../../src/kafka/changelog-reader.js';
import { withKafkajsAdmin as withClientAdmin } from '../../src/kafka/client.js';
import { headersToStrings as decodeHeaders } from '../../src/kafka/headers.js';
import { ensureTopics } from '../../src/kafka/topics.js';

/** Brokers of the Kafka the suite started (see test/global-setup.ts). */
export function kafkaBrokers(): string[] {
  return inject('kafkaBrokers').split(',');
}

/**
 * A client of the suite's Kafka, or of `brokers` (a test that runs its own broker); `retry`: the client's retry policy.
 */
export function testKafka(
  clientId = 'msgbridge-test',
  brokers = kafkaBrokers(),
  retry: RetryOptions = { retries: 3 },
): Kafka {
  return new Kafka({ clientId, brokers, logLevel: logLevel.NOTHING, retry });
}

/** A topic name no other test uses. */
export function uniqueTopic(prefix = 't'): string {
  return `${prefix}-${randomUUID().slice(0, 8)}`;
}

export function withAdmin<T>(fn: (admin: Admin) => Promise<T>, brokers?: string[]): Promise<T> {
  return withClientAdmin(testKafka('msgbridge-test-admin', brokers), fn);
}

export async function createTopics(topics: string[], partitions = 1): Promise<void> {
  // Through the project's bootstrap: it waits until every leader really hosts its partitions.
  await withAdmin((admin) =>
    ensureTopics(
      admin,
      topics.map((topic) => ({ topic, partitions, replicationFactor: 1 })),
    ),
  );
}

export interface TestRecord {
  key?: string | Buffer | null;
  value: string | Buffer;
  headers?: Record<string, string>;
  partition?: number;
}

export async function produce(topic: string, records: TestRecord[]): Promise<void> {
  // Idempotent: a send that kafkajs retries after an error on one partition (a topic being
  // auto-created has no leader yet) re-sends every partition of the request, and without it the
  // partitions already written get their records twice, which a test counting events then sees.
  const producer = testKafka('msgbridge-test-producer').producer({
    allowAutoTopicCreation: true,
    idempotent: true,
    maxInFlightRequests: 1,
    retry: { retries: 3 },
  });
  await producer.connect();
  try {
    await producer.send({
      topic,
      acks: -1,
      messages: records.map((r) => ({
        key: r.key ?? null,
        value: r.value,
        headers: r.headers,
        partition: r.partition,
      })),
    });
  } finally {
    await producer.disconnect();
  }
}

export interface ReadRecord {
  topic: string;
  partition: number;
  offset: string;
  key: string | null;
  value: Buffer;
  headers: Record<string, string>;
}

/**
 * Reads records from the beginning of the topics with a fresh consumer group until `count`
 * have arrived (resolves with them) or the timeout passes (rejects with what was seen).
 * With `settleMs`, keeps reading that long after the count is reached, to catch extras.
 * `brokers`: another Kafka than the suite's.
 */
export async function consumeRecords(
  topics: string | string[],
  count: number,
  options: { timeoutMs?: number; settleMs?: number; brokers?: string[] } = {},
): Promise<ReadRecord[]> {
  const consumer = testKafka('msgbridge-test-consumer', options.brokers).consumer({
    groupId: `test-${randomUUID()}`,
    maxWaitTimeInMs: 100,
  });
  const records: ReadRecord[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: Array.isArray(topics) ? topics : [topics], fromBeginning: true });
    let reached: () => void = () => {};
    const enough = new Promise<void>((resolve) => (reached = resolve));
    if (count === 0) reached();
    await consumer.run({
      eachMessage: async ({ topic, partition, message }) => {
        records.push({
          topic,
          partition,
          offset: message.offset,
          key: message.key?.toString() ?? null,
          value: message.value ?? Buffer.alloc(0),
          headers: decodeHeaders(message.headers),
        });
        if (records.length >= count) reached();
      },
    });
    const timeoutMs = options.timeoutMs ?? 20_000;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)));
    const outcome = await Promise.race([enough.then(() => 'ok' as const), timedOut]);
    clearTimeout(timer);
    if (outcome === 'timeout') {
      throw new Error(`expected ${count} records on ${String(topics)} within ${timeoutMs} ms, saw ${records.length}`);
    }
    if (options.settleMs) await new Promise((r) => setTimeout(r, options.settleMs));
    return records;
  } finally {
    await consumer.disconnect();
  }
}

/** Number of records in the topics (sums of high watermarks minus low), read through the admin API. */
export async function countRecords(topics: string | string[], brokers?: string[]): Promise<number> {
  return withAdmin(async (admin) => {
    let n = 0;
    for (const topic of Array.isArray(topics) ? topics : [topics])
      // Asked again while a restarted broker or a new topic elects its leaders (NOT_LEADER_OR_FOLLOWER).
      for (const p of await whileLeadersMove(() => admin.fetchTopicOffsets(topic))) n += Number(p.high) - Number(p.low);
    return n;
  }, brokers);
}

/** Java's String.hashCode, as Kafka places a group on a partition of __consumer_offsets. */
function javaStringHash(text: string): number {
  let h = 0;
  for (let i = 0; i < text.length; i++) h = (Math.imul(31, h) + text.charCodeAt(i)) | 0;
  return h;
}

/** The node id of a consumer group's coordinator: the leader of its __consumer_offsets partition. */
export async function groupCoordinator(admin: Admin, groupId: string): Promise<number> {
  const metadata = await admin.fetchTopicMetadata({ topics: ['__consumer_offsets'] });
  const partitions = metadata.topics[0]!.partitions;
  const wanted = (javaStringHash(groupId) & 0x7fffffff) % partitions.length;
  return partitions.find((p) => p.partitionId === wanted)!.leader;
}
