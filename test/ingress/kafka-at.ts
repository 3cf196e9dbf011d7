import { randomUUID } from 'node:crypto';
import { Kafka, logLevel } from 'kafkajs';

/**
 * Reading from a Kafka other than the suite's (the outage test runs its own broker): every
 * record's event-id header on the topics, read from the beginning until `count` are seen.
 */
export async function readEventIds(brokers: string[], topics: string[], count: number, timeoutMs = 30_000): Promise<string[]> {
  const kafka = new Kafka({ clientId: 'msgbridge-test-reader', brokers, logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: `test-${randomUUID()}`, maxWaitTimeInMs: 100 });
  const ids: string[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topics, fromBeginning: true });
    let reached: () => void = () => {};
    const enough = new Promise<void>((resolve) => (reached = resolve));
    if (count === 0) reached();
    await consumer.run({
      eachMessage: async ({ message }) => {
        ids.push(message.headers?.['event-id']?.toString() ?? '');
        if (ids.length >= count) reached();
      },
    });
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((resolve) => (timer = setTimeout(() => resolve('timeout'), timeoutMs)));
    const outcome = await Promise.race([enough.then(() => 'ok' as const), timedOut]);
    clearTimeout(timer);
    if (outcome === 'timeout') throw new Error(`expected ${count} records on ${topics.join(',')} within ${timeoutMs} ms, saw ${ids.length}`);
    return ids;
  } finally {
    await consumer.disconnect();
  }
}

export async function countAt(brokers: string[], topics: string[]): Promise<number> {
  const admin = new Kafka({ clientId: 'msgbridge-test-admin', brokers, logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    let n = 0;
    for (const topic of topics) for (const p of await admin.fetchTopicOffsets(topic)) n += Number(p.high) - Number(p.low);
    return n;
  } finally {
    await admin.disconnect();
  }
}
