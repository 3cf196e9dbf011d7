import { afterAll, describe, expect, it } from 'vitest';
import { runCli, startCli } from '../helpers/cli.js';
import { consumeRecords, createTopics, kafkaBrokers, uniqueTopic, withAdmin } from '../helpers/kafka.js';
import { produceRequests } from '../sender/harness.js';

/**
 * A redrive is exactly once under kill -9: each chunk's records and the redrive group's offsets
 * are one Kafka transaction, so a rerun (same name, same transactional ids) fences the dead run,
 * aborts what it left open and resumes from the committed offsets. Every dead letter lands once
 * in the target topic, read_committed.
 */

const RECORDS = 10_000;
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
          value: { requestId: `kill-${i}`, businessId: 'biz_1', type: 'text', recipient: { channelType: 'whatsapp', id: recipient }, message: { text: `n${i}` } },
          headers: { schema: 'send-requests-dlq/v1', 'error-code': 'RELAY_UNKNOWN_BUSINESS', 'error-reason': 'unknown business "biz_1"', 'source-topic': topics.sendRequests, 'event-id': `e${i}` },
        };
      }),
    );
    const args = ['dlq', 'redrive', topics.sendRequestsDlq, '--yes', '--rate', '2000', '--name', 'kill-test'];

    const first = startCli(args, env);
    running.push(first);
    // Killed once it reported committed chunks, well before the end (2,000 a second: about 5 s of work).
    const deadline = Date.now() + 60_000;
    let producedAtKill = 0;
    for (;;) {
      const lines = [...first.output().stderr.matchAll(/· ([\d,]+) produced/g)];
      if (lines.length > 0) producedAtKill = Number(lines[lines.length - 1]![1]!.replace(/,/g, ''));
      if (producedAtKill > 0) break;
      if (first.child.exitCode !== null || Date.now() > deadline) throw new Error(`no progress before the kill:\n${first.output().stdout}\n${first.output().stderr}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    first.child.kill('SIGKILL');
    await new Promise<void>((resolve) => first.child.once('close', () => resolve()));
    const committedAtKill = await withAdmin(async (admin) => {
      const [entry] = await admin.fetchOffsets({ groupId: 'msgbridge-dlq-redrive.kill-test', topics: [topics.sendRequestsDlq] });
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
    console.log(
      `[dlq kill -9] killed after ${producedAtKill} reported produced (${committedAtKill} offsets committed); the rerun produced ${producedByRerun}; the target holds ${records.length} records (read_committed), ${origins.size} distinct origins`,
    );
    expect(records).toHaveLength(RECORDS);
    expect(origins.size).toBe(RECORDS);
    expect(requestIds.size).toBe(RECORDS);
    // The rerun did only what the dead run had not committed (a transaction the kill left open is aborted, so redone).
    expect(producedByRerun).toBeLessThanOrEqual(RECORDS - committedAtKill);
    expect(producedByRerun).toBeGreaterThan(0);
    // Keys and bytes as they were: partitioned by the recipient like the originals.
    expect(records.every((r) => r.key?.startsWith('+1555'))).toBe(true);
  }, 180_000);
});
