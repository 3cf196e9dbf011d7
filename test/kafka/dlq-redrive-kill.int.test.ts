import { randomUUID } from 'node:crypto';
import { afterAll, describe, expect, it } from 'vitest';
import { runCli, startCli } from '../helpers/cli.js';
import { consumeRecords, createTopics, kafkaBrokers, testKafka, uniqueTopic, withAdmin } from '../helpers/kafka.js';
import { produceRequests } from '../sender/harness.js';

/**
 * A redrive is exactly once under kill -9: each chunk's records and the redrive group's offsets
 * are one Kafka transaction, so a rerun (same name, same transactional ids) fences the dead run,
 * aborts what it left open and resumes from the committed offsets. Every dead letter lands once
 * in the target topic, read_committed.
 */

const RECORDS = 10_000;

/** Every record in the topic, aborted ones included (a read_uncommitted reader, until 2 s pass without one). */
async function countUncommitted(topic: string): Promise<number> {
  const consumer = testKafka('dlq-kill-uncommitted').consumer({
    groupId: `uncommitted-${randomUUID()}`,
    readUncommitted: true,
    maxWaitTimeInMs: 100,
  });
  let count = 0;
  let last = Date.now();
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      eachBatch: async ({ batch }) => {
        count += batch.messages.length;
        last = Date.now();
      },
    });
    const started = Date.now();
    while (Date.now() - last < 2_000 || (count === 0 && Date.now() - started < 30_000))
      await new Promise((r) => setTimeout(r, 100));
    return count;
  } finally {
    await consumer.disconnect();
  }
}
const PARTITIONS = 3;

describe('dlq redrive under kill -9', () => {
  const topics = {
    messages: uniqueTopic('messages'),
    deliveryStatus: uniqueTopic('status'),
    webhooksDlq: uniqueTopic('wdlq'),
    sendRequests: uniqueTopic('kill-send-requests'),
    sendResults: uniqueTopic('send-results'),
    sendRequestsDlq: uniqueTopic('kill-send-dlq'),
    messageState: uniqueTopic('message-state'),
    conversations: uniqueTopic('conversations'),
    requestOutcomes: uniqueTopic('request-outcomes'),
    inboundMessages: uniqueTopic('inbound-messages'),
    sendLedger: uniqueTopic('send-ledger'),
  };
  const env = {
    KAFKA_BROKERS: kafkaBrokers().join(','),
    MSGBRIDGE__kafka__topics: JSON.stringify(topics),
    MSGBRIDGE_BUSINESS_ID: 'biz_1',
    MSGBRIDGE_API_KEY: 'k',
    MSGBRIDGE_SIGNING_SECRET: 's',
  };
  const running: ReturnType<typeof startCli>[] = [];
  afterAll(() => {
    for (const r of running) if (r.child.exitCode === null) r.child.kill('SIGKILL');
  });

  it(`kill -9 during a redrive of ${RECORDS.toLocaleString('en-US')} records, then the same command again: every record produced exactly once`, async () => {
    await createTopics([topics.sendRequestsDlq, topics.sendRequests], PARTITIONS);
    await produceRequests(
      topics.sendRequestsDlq,
      Array.from({ length: RECORDS }, (_, i) => {
        const recipient = `+1555${String(i % 997).padStart(7, '0')}`;
        return {
          key: recipient,
          partition: i % PARTITIONS,
          value: {
            requestId: `kill-${i}`,
            businessId: 'biz_1',
            type: 'text',
            recipient: { channelType: 'whatsapp', id: recipient },
            message: { text: `n${i}` },
          },
          headers: {
            schema: 'send-requests-dlq/v1',
            'error-code': 'RELAY_UNKNOWN_BUSINESS',
            'error-reason': 'unknown business "biz_1"',
            'source-topic': topics.sendRequests,
            'event-id': `e${i}`,
          },
        };
      }),
    );
    // No --rate: chunks follow each other, so the process is inside a transaction most of the time.
    const args = ['dlq', 'redrive', topics.sendRequestsDlq, '--yes', '--name', 'kill-test'];

    const first = startCli(args, env);
    running.push(first);
    // Killed once it reported committed chunks (the first report comes after a second), before the end.
    const deadline = Date.now() + 60_000;
    let producedAtKill = 0;
    for (;;) {
      const lines = [...first.output().stderr.matchAll(/· ([\d,]+) produced/g)];
      if (lines.length > 0) producedAtKill = Number(lines[lines.length - 1]![1]!.replace(/,/g, ''));
      if (producedAtKill > 0) break;
      if (first.child.exitCode !== null || Date.now() > deadline)
        throw new Error(`no progress before the kill:\n${first.output().stdout}\n${first.output().stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    // A few ms after a commit: most likely within the next chunk's transaction.
    await new Promise((r) => setTimeout(r, 40));
    first.child.kill('SIGKILL');
    await new Promise<void>((resolve) => first.child.once('close', () => resolve()));
    const committedAtKill = await withAdmin(async (admin) => {
      const [entry] = await admin.fetchOffsets({
        groupId: 'msgbridge-dlq-redrive.kill-test',
        topics: [topics.sendRequestsDlq],
      });
      return (entry?.partitions ?? []).reduce((n, p) => n + Math.max(0, Number(p.offset)), 0);
    });
    expect(committedAtKill).toBeGreaterThan(0);
    expect(committedAtKill).toBeLessThan(RECORDS);

    const rerun = await runCli(args, env, 120_000);
    expect(rerun.code, `${rerun.stdout}\n${rerun.stderr}`).toBe(0);
    expect(rerun.stdout).toContain('resuming where it stopped');
    const producedByRerun = Number(/done: produced ([\d,]+)/.exec(rerun.stdout)![1]!.replace(/,/g, ''));

    const records = await consumeRecords(topics.sendRequests, RECORDS, { timeoutMs: 60_000, settleMs: 2_000 });
    const origins = new Set(records.map((r) => r.headers['redriven-from']));
    const requestIds = new Set(records.map((r) => (JSON.parse(r.value.toString()) as { requestId: string }).requestId));
    // Records of a transaction the kill left open are in the log, aborted: a read_uncommitted reader sees them.
    const uncommitted = await countUncommitted(topics.sendRequests);
    console.log(
      `[dlq kill -9] killed after ${producedAtKill} reported produced (${committedAtKill} offsets committed); the rerun produced ${producedByRerun}; the target holds ${records.length} records read_committed (${origins.size} distinct origins), ${uncommitted} read_uncommitted (${uncommitted - RECORDS} of an aborted transaction)`,
    );
    expect(uncommitted).toBeGreaterThanOrEqual(RECORDS);
    expect(records).toHaveLength(RECORDS);
    expect(origins.size).toBe(RECORDS);
    expect(requestIds.size).toBe(RECORDS);
    // The rerun did only what the dead run had not committed (a transaction the kill left open is aborted, so redone).
    expect(producedByRerun).toBeLessThanOrEqual(RECORDS - committedAtKill);
    expect(producedByRerun).toBeGreaterThan(0);
    // Keys and bytes as they were: partitioned by the recipient like the originals.
    expect(records.every((r) => r.key?.startsWith('+1555'))).toBe(true);
  }, 180_000);

  it('a transaction a dead run left open (records and offsets sent, no commit) is aborted by the next run, which redoes its chunk', async () => {
    const dlq = uniqueTopic('zombie-dlq');
    const target = uniqueTopic('zombie-target');
    await createTopics([dlq, target], 1);
    const count = 300;
    await produceRequests(
      dlq,
      Array.from({ length: count }, (_, i) => ({
        key: '+15550002222',
        value: {
          requestId: `zombie-${i}`,
          businessId: 'biz_1',
          type: 'text',
          recipient: { channelType: 'whatsapp', id: '+15550002222' },
          message: { text: 'hi' },
        },
        headers: {
          schema: 'send-requests-dlq/v1',
          'error-code': 'RELAY_UNKNOWN_BUSINESS',
          'error-reason': 'unknown business',
          'source-topic': target,
        },
      })),
    );
    // The dead run: the redrive's transactional id for partition 0, a chunk of 50 sent with its offsets, never
    // committed.
    const zombie = testKafka('dlq-zombie').producer({
      transactionalId: 'msgbridge-dlq-redrive.zombie-test-0',
      idempotent: true,
      maxInFlightRequests: 1,
    });
    await zombie.connect();
    const tx = await zombie.transaction();
    await tx.sendOffsets({
      consumerGroupId: 'msgbridge-dlq-redrive.zombie-test',
      topics: [{ topic: dlq, partitions: [{ partition: 0, offset: '50' }] }],
    });
    await tx.send({
      topic: target,
      messages: Array.from({ length: 50 }, (_, i) => ({
        key: '+15550002222',
        value: `{"requestId":"zombie-${i}"}`,
        headers: { 'redriven-from': `${dlq}/0/${i}` },
      })),
    });
    await zombie.disconnect();

    const result = await runCli(
      ['dlq', 'redrive', dlq, '--yes', '--allow-any-topic', '--name', 'zombie-test'],
      env,
      120_000,
    );
    expect(result.code, `${result.stdout}\n${result.stderr}`).toBe(0);
    expect(result.stdout).toContain(`done: produced ${count} (${target} ${count})`);
    const records = await consumeRecords(target, count, { timeoutMs: 30_000, settleMs: 1_000 });
    expect(records).toHaveLength(count);
    expect(new Set(records.map((r) => r.headers['redriven-from'])).size).toBe(count);
    const uncommitted = await countUncommitted(target);
    console.log(
      `[dlq zombie] the dead run's open transaction held 50 records; after the next run: ${records.length} read_committed, ${uncommitted} read_uncommitted (the 50 aborted)`,
    );
    expect(uncommitted).toBe(count + 50);
  }, 120_000);
});
