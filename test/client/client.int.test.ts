import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { sendRequestRecord, waitForRequest, ResultWaitError } from '../../src/client/index.js';
import { followSendResults, waitForResult } from '../../src/client/kafka.js';
import { startTracker } from '../../src/tracker/index.js';
import { kafkaBrokers, testKafka } from '../helpers/kafka.js';
import { BIZ, fixture } from '../sender/harness.js';
import { TEST_TOKENS, trackerConfig } from '../tracker/harness.js';

/**
 * msgbridge/client against the real thing: records made by sendRequestRecord, produced with an
 * ordinary kafkajs producer, sent by a real sender to the simulator; their results awaited from
 * send-results (msgbridge/client/kafka) and from a real tracker's GET /requests/{id}.
 */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

async function produce(records: ReturnType<typeof sendRequestRecord>[]): Promise<void> {
  const producer = testKafka('client-test-producer').producer({ allowAutoTopicCreation: false });
  await producer.connect();
  try {
    for (const { topic, ...message } of records) await producer.send({ topic, acks: -1, messages: [message] });
  } finally {
    await producer.disconnect();
  }
}

describe('msgbridge/client', () => {
  it('a record from sendRequestRecord is sent; waitForResult and a follower give its result, a tracker its message and outcome', async () => {
    const f = await fixture();
    cleanups.push(() => f.close());
    const sender = await f.start();
    await sender.ready;
    const id = randomUUID().slice(0, 8);
    // The tracker reads the sender's results (the env of trackerConfig names the topics).
    const config = trackerConfig(id, {}, { MSGBRIDGE__kafka__topics__sendResults: f.topics.sendResults });
    const tracker = await startTracker({ config });
    cleanups.push(async () => {
      await tracker.drain();
      rmSync(config.tracker.stateDir!, { recursive: true, force: true });
    });
    await tracker.ready;
    const brokers = kafkaBrokers();
    const topic = f.topics.sendResults;

    const since = Date.now();
    const follower = await followSendResults({ brokers, topic, since });
    cleanups.push(() => follower.close());
    const text = sendRequestRecord(
      {
        requestId: `client-text-${id}`,
        type: 'text',
        recipient: { channelType: 'whatsapp', id: '+15550004444' },
        message: { text: 'Your order shipped' },
      },
      { topic: f.topics.sendRequests },
    );
    const unknownBusiness = sendRequestRecord(
      {
        requestId: `client-unknown-${id}`,
        businessId: 'nobody',
        type: 'template',
        number: '+15550005555',
        templateName: 'welcome',
      },
      { topic: f.topics.sendRequests },
    );
    await produce([text, unknownBusiness]);

    const accepted = await waitForResult(`client-text-${id}`, { brokers, topic, since, timeoutMs: 30_000 });
    expect(accepted).toMatchObject({ outcome: 'accepted', businessId: BIZ.id, recipient: '+15550004444', attempts: 1 });
    const sent = f.simulator
      .sends()
      .find((s) => s.messageId === (accepted.outcome === 'accepted' ? accepted.messageId : ''));
    expect(sent?.body).toEqual({
      recipient: { channelType: 'whatsapp', id: '+15550004444' },
      message: { text: 'Your order shipped' },
    });

    // The follower has both (one waited while it came, or kept until asked).
    expect(await follower.wait(`client-text-${id}`, { timeoutMs: 30_000 })).toEqual(accepted);
    const rejected = await follower.wait(`client-unknown-${id}`, { timeoutMs: 30_000 });
    expect(rejected).toMatchObject({ outcome: 'rejected', attempts: 0, error: { code: 'RELAY_UNKNOWN_BUSINESS' } });
    const late = follower.wait(`never-${id}`, { timeoutMs: 300 });
    await expect(late).rejects.toMatchObject({ name: 'ResultWaitError', reason: 'timeout' });

    const trackerUrl = tracker.address!;
    const message = await waitForRequest(`client-text-${id}`, {
      trackerUrl,
      token: TEST_TOKENS.read,
      timeoutMs: 30_000,
      pollIntervalMs: 100,
    });
    expect(message.kind === 'message' && message.message.messageId).toBe(
      accepted.outcome === 'accepted' && accepted.messageId,
    );
    const outcome = await waitForRequest(`client-unknown-${id}`, {
      trackerUrl,
      token: TEST_TOKENS.read,
      timeoutMs: 30_000,
      pollIntervalMs: 100,
    });
    expect(outcome).toMatchObject({
      kind: 'outcome',
      outcome: { outcome: 'rejected', error: { code: 'RELAY_UNKNOWN_BUSINESS' } },
    });

    // A refusal ends the wait at once; an unknown request waits until the deadline.
    const started = Date.now();
    const refused = await waitForRequest(`client-text-${id}`, {
      trackerUrl,
      token: 'not-a-token',
      timeoutMs: 30_000,
    }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ResultWaitError);
    expect(refused).toMatchObject({ reason: 'refused', status: 401 });
    expect(Date.now() - started).toBeLessThan(5_000);
    // Long enough for an answer even on a loaded machine: the error names the last one.
    await expect(
      waitForRequest(`never-${id}`, { trackerUrl, token: TEST_TOKENS.read, timeoutMs: 10_000, pollIntervalMs: 100 }),
    ).rejects.toMatchObject({
      reason: 'timeout',
      message: expect.stringContaining('HTTP 404'),
    });
  });
});
