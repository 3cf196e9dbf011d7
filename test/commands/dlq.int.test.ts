import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { createWebhookHandler, rulesFromConfig } from '../../src/ingress/handle-webhook.js';
import type { Sender } from '../../src/sender/index.js';
import { deadLetter, fitDlqRecord } from '../../src/sender/result-records.js';
import { runCli } from '../helpers/cli.js';
import { consumeRecords, createTopics, kafkaBrokers, produce, uniqueTopic } from '../helpers/kafka.js';
import { hmacBase64 } from '../helpers/signing.js';
import {
  BIZ,
  BIZ2,
  collect,
  committedOffsets,
  endOffsets,
  fixture,
  produceRequests,
  sentRequestId,
  templateRequest,
  waitUntil,
  type Collector,
  type Fixture,
} from '../sender/harness.js';

/**
 * `msgbridge dlq` against the suite's Kafka, as an operator runs it (a real process): the issue's
 * proof (a request dead-lettered for an unknown business is sent once after the business is added
 * and the DLQ redriven; a second redrive produces nothing; a dry run writes nothing), webhooks
 * that fail again, golden records of 0.1.0, and list/stats with time seeks and pages.
 */

const FIXTURES = join(import.meta.dirname, '..', 'fixtures', 'contracts');
interface Golden {
  key: string | null;
  headers: Record<string, string>;
  value: string;
}
const golden = (version: string, topic: string): Golden[] =>
  (JSON.parse(readFileSync(join(FIXTURES, version, `${topic}.json`), 'utf8')) as { records: Golden[] }).records;
const GOLDEN_SECRET = 'golden-records-signing-secret';
/** util-linux `script` gives the command a terminal (for the confirmation prompt). */
const scriptCommand = spawnSync('script', ['--version']).status === 0;

function topicsEnv(topics: Record<string, string>): Record<string, string> {
  return { KAFKA_BROKERS: kafkaBrokers().join(','), MSGBRIDGE__kafka__topics: JSON.stringify(topics) };
}

describe('msgbridge dlq redrive: send requests, end to end with the sender', () => {
  let f: Fixture;
  let sender: Sender | undefined;
  let results: Collector | undefined;
  afterAll(async () => {
    await sender?.drain();
    await results?.stop();
    await f?.close();
  });

  it('a request dead-lettered for an unknown business is sent once after the business is added and the DLQ redriven; a dry run and a second redrive write nothing', async () => {
    f = await fixture({ businesses: [BIZ, BIZ2], partitions: 2 });
    const dir = mkdtempSync(join(tmpdir(), 'msgbridge-dlq-businesses-'));
    const file = join(dir, 'businesses.json');
    const write = (list: unknown) => {
      writeFileSync(`${file}.tmp`, JSON.stringify(list));
      renameSync(`${file}.tmp`, file);
    };
    const biz1 = { id: BIZ.id, signingSecrets: [], apiKey: BIZ.apiKey };
    write([biz1]);
    sender = await f.start({ config: { ...f.config, businessesFile: file, businesses: [biz1] } });
    await sender.ready;
    results = await collect(f.topics.sendResults);
    const resultsOf = (requestId: string) => results!.values().filter((v) => v.requestId === requestId);

    await produceRequests(f.topics.sendRequests, [
      {
        key: '+15550002222',
        value: templateRequest('redrive-me', '+15550002222', { businessId: BIZ2.id, callbackData: 'redrive-me' }),
        headers: { 'correlation-id': 'c-42' },
      },
    ]);
    await waitUntil(
      () => resultsOf('redrive-me').length === 1,
      30_000,
      () => 'the rejected result',
    );
    expect(resultsOf('redrive-me')[0]).toMatchObject({
      outcome: 'rejected',
      error: { code: 'RELAY_UNKNOWN_BUSINESS' },
    });
    const [dead] = await consumeRecords(f.topics.sendRequestsDlq, 1);
    expect(dead!.headers).toMatchObject({
      'error-code': 'RELAY_UNKNOWN_BUSINESS',
      'source-topic': f.topics.sendRequests,
      'correlation-id': 'c-42',
    });

    // The fix: the business is added to the live businesses file (the sender follows it).
    write([biz1, { id: BIZ2.id, signingSecrets: [], apiKey: BIZ2.apiKey }]);
    await new Promise((r) => setTimeout(r, 2500));
    const env = {
      ...topicsEnv(f.config.kafka.topics as unknown as Record<string, string>),
      MSGBRIDGE_BUSINESSES_FILE: file,
    };
    const args = ['dlq', 'redrive', f.topics.sendRequestsDlq, '--code', 'RELAY_UNKNOWN_BUSINESS'];
    const before = await endOffsets(f.topics.sendRequests);

    const dry = await runCli([...args, '--dry-run'], env);
    expect(dry.stderr).toBe('');
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(
      new RegExp(
        `redrive of ${f.topics.sendRequestsDlq} on Kafka ${kafkaBrokers().join(',')} \\(cluster [\\w-]{10,}\\)`,
      ),
    );
    expect(dry.stdout).toContain(`would produce 1: 1 → ${f.topics.sendRequests}`);
    expect(dry.stdout).toContain('dry run: nothing was written');
    const name = /name (\S+) \(consumer group and transactional ids (\S+)\)/.exec(dry.stdout)!;
    expect(await endOffsets(f.topics.sendRequests)).toEqual(before);
    expect(
      [...(await committedOffsets(name[2]!, f.topics.sendRequestsDlq)).values()].every((c) => c.offset === -1),
    ).toBe(true);

    const real = await runCli([...args, '--yes'], env);
    expect(real.code, real.stderr).toBe(0);
    expect(real.stdout).toMatch(new RegExp(`done: produced 1 \\(${f.topics.sendRequests} 1\\), 0 still failing`));
    await waitUntil(
      () => resultsOf('redrive-me').length === 2,
      30_000,
      () => 'the accepted result',
    );
    expect(resultsOf('redrive-me')[1]).toMatchObject({ outcome: 'accepted', businessId: BIZ2.id });
    const redriven = (await consumeRecords(f.topics.sendRequests, 2)).find((r) => r.headers['redriven-from']);
    expect(redriven!.headers).toMatchObject({
      'redriven-from': `${f.topics.sendRequestsDlq}/${dead!.partition}/${dead!.offset}`,
      'event-id': dead!.headers['event-id'],
      'correlation-id': 'c-42',
    });
    expect(redriven!.key).toBe('+15550002222');
    expect(redriven!.value.equals(dead!.value)).toBe(true);
    expect(Number(redriven!.headers['redriven-at'])).toBeGreaterThan(Date.now() - 60_000);

    // A second redrive (the same command) produces nothing.
    const afterRedrive = await endOffsets(f.topics.sendRequests);
    const again = await runCli([...args, '--yes'], env);
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain('resuming where it stopped');
    expect(again.stdout).toContain('nothing to produce: nothing was written.');
    await new Promise((r) => setTimeout(r, 1500));
    expect(f.simulator.sends().filter((s) => sentRequestId(s) === 'redrive-me')).toHaveLength(1);
    expect(resultsOf('redrive-me').filter((r) => r.outcome === 'accepted')).toHaveLength(1);

    // Under another name (all codes: a consumer group of its own, from the log start): the
    // topic's ledger says it was produced again already, so nothing is.
    const other = await runCli(['dlq', 'redrive', f.topics.sendRequestsDlq, '--yes'], env);
    expect(other.code, other.stderr).toBe(0);
    expect(other.stdout).not.toContain('resuming where it stopped');
    expect(other.stdout).toContain(`already redriven, skipped: 1 (ledger ${f.topics.sendRequestsDlq}.redriven)`);
    expect(other.stdout).toContain('nothing to produce: nothing was written.');
    expect(await endOffsets(f.topics.sendRequests)).toEqual(afterRedrive);

    const stats = await runCli(['dlq', 'stats', f.topics.sendRequestsDlq], env);
    expect(stats.code, stats.stderr).toBe(0);
    expect(stats.stdout).toMatch(/RELAY_UNKNOWN_BUSINESS\s+1\s+biz_2 1/);
    expect(stats.stdout).toContain(
      `already redriven: 1 of 1 (produced again once; every redrive skips them: ledger ${f.topics.sendRequestsDlq}.redriven)`,
    );
  }, 120_000);
});

describe('msgbridge dlq: webhooks, golden records of 0.1.0, list and stats', () => {
  const topics = {
    messages: uniqueTopic('messages'),
    deliveryStatus: uniqueTopic('status'),
    webhooksDlq: uniqueTopic('wdlq'),
    sendRequests: uniqueTopic('send-requests'),
    sendResults: uniqueTopic('send-results'),
    sendRequestsDlq: uniqueTopic('send-dlq'),
    messageState: uniqueTopic('message-state'),
    conversations: uniqueTopic('conversations'),
    requestOutcomes: uniqueTopic('request-outcomes'),
    inboundMessages: uniqueTopic('inbound-messages'),
    sendLedger: uniqueTopic('send-ledger'),
  };
  const businesses = JSON.stringify([
    { id: 'biz_1', signingSecrets: [GOLDEN_SECRET], apiKey: 'k1' },
    { id: 'biz_9', signingSecrets: ['s9'], apiKey: 'k9' },
  ]);
  const env = () => ({ ...topicsEnv(topics), MSGBRIDGE__businesses: businesses });

  it('a webhook dead-lettered for an invalid payload, redriven with no fix, is listed as still failing and not produced; one an upgrade now accepts is produced where the ingress would have written it', async () => {
    await createTopics(Object.values(topics), 2);
    const config = loadConfig({
      env: {},
      overrides: { businesses: JSON.parse(businesses), kafka: { topics } } as never,
    });
    const handler = createWebhookHandler(rulesFromConfig(config));
    const invalid = JSON.stringify({
      topic: 'delivery_status',
      timestamp: '1795168810',
      sender: { channelType: 'whatsapp', id: '+15550001111' },
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      statusUpdate: { id: '01JD0G7Q3V4M8X2K5N9P1R6T02', status: 'delivery_failed', error: null },
    });
    const decision = handler.handle({
      businessId: 'biz_1',
      pathTopic: 'delivery_status',
      body: Buffer.from(invalid),
      signature: hmacBase64(GOLDEN_SECRET, invalid),
      contentType: 'application/json',
      traceparent: undefined,
      receivedAt: Date.now(),
    });
    if (decision.kind !== 'publish' || decision.destination !== 'dlq') throw new Error('expected a dead letter');
    expect(decision.record.headers).toMatchObject({
      'original-topic': topics.deliveryStatus,
      'webhook-topic': 'delivery_status',
    });
    // One an older release refused (as if its schema lacked something): valid now.
    const valid = JSON.stringify({
      topic: 'delivery_status',
      timestamp: '1795168810',
      sender: { channelType: 'whatsapp', id: '+15550001111' },
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      statusUpdate: { id: '01JD0G7Q3V4M8X2K5N9P1R6T77', status: 'read' },
    });
    const olderHeaders = {
      ...decision.record.headers,
      'x-service-hmac-sha256': hmacBase64(GOLDEN_SECRET, valid),
      'error-reason': 'schema: statusUpdate.status: unknown in 0.1.0',
    };
    delete (olderHeaders as Record<string, string>)['original-topic'];
    await produce(topics.webhooksDlq, [
      { key: 'biz_1', value: invalid, headers: decision.record.headers, partition: 0 },
      { key: 'biz_1', value: valid, headers: olderHeaders, partition: 1 },
    ]);

    const result = await runCli(['dlq', 'redrive', topics.webhooksDlq, '--yes', '--name', 'webhooks-test'], env());
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('would fail again, not produced: 1 (schema 1)');
    expect(result.stdout).toMatch(
      /0\/0 {2}biz_1 {2}schema: statusUpdate\.error: a delivery_failed status must carry the error object/,
    );
    expect(result.stdout).toContain('target topic derived from webhook-topic');
    expect(result.stdout).toMatch(new RegExp(`done: produced 1 \\(${topics.deliveryStatus} 1\\), 1 still failing`));
    // Read committed: exactly one event (the end offsets also count the transaction's commit marker).
    const events = await consumeRecords(topics.deliveryStatus, 1, { settleMs: 1000 });
    expect(events).toHaveLength(1);
    const event = events[0];
    expect(event!.key).toBe('01JD0G7Q3V4M8X2K5N9P1R6T77');
    expect(event!.value.toString()).toBe(valid);
    expect(event!.headers).toMatchObject({
      schema: 'delivery_status/v1',
      'business-id': 'biz_1',
      'redriven-from': `${topics.webhooksDlq}/1/0`,
      'content-type': 'application/json',
    });
    expect([...(await endOffsets(topics.messages)).values()]).toEqual([0, 0]);
  }, 60_000);

  it('golden dead letters of 0.1.0 are redriven by rule (the unknown business, now configured) or refused with their reason', async () => {
    const records = [...golden('0.1.0', 'send-requests-dlq'), ...golden('0.1.0', 'webhooks-dlq')];
    await produce(
      topics.sendRequestsDlq,
      records.map((r) => ({ key: r.key, value: r.value, headers: r.headers, partition: 0 })),
    );
    // Their source-topic is the default send-requests: with this suite's topic names the sender
    // reads another one, so the one that would pass is refused (never sent where nobody reads)…
    const elsewhere = await runCli(['dlq', 'redrive', topics.sendRequestsDlq, '--dry-run'], env());
    expect(elsewhere.code, elsewhere.stderr).toBe(0);
    expect(elsewhere.stdout).toContain('would produce 0');
    expect(elsewhere.stdout).toContain(
      `topic-changed: it was taken from topic send-requests, but the sender now reads ${topics.sendRequests}`,
    );
    // …and with a configuration whose send-requests topic is the default, it is redriven.
    const result = await runCli(['dlq', 'redrive', topics.sendRequestsDlq, '--dry-run'], {
      ...env(),
      MSGBRIDGE__kafka__topics__sendRequests: 'send-requests',
    });
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toContain('selected 8 of 8 records');
    expect(result.stdout).toContain('would produce 1: 1 → send-requests');
    expect(result.stdout).toContain(
      'would fail again, not produced: 7 (RELAY_INVALID_JSON 1, RELAY_INVALID_FIELD 1, RELAY_UNKNOWN_TYPE 1, not-json 1, schema 1, topic-mismatch 1, topic-undetectable 1)',
    );
  }, 60_000);

  it('a dead letter too large for the DLQ (a reference) is redriven from its source record; one whose source is gone is refused; --allow-any-topic', async () => {
    const refDlq = uniqueTopic('ref-dlq');
    await createTopics([refDlq], 1);
    const big = JSON.stringify({
      requestId: 'big-1',
      businessId: 'biz_9',
      type: 'text',
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      message: { text: 'x'.repeat(5000) },
    });
    await produce(topics.sendRequests, [
      { key: '+15550002222', value: big, headers: { 'correlation-id': 'big' }, partition: 1 },
    ]);
    const [source] = await consumeRecords(topics.sendRequests, 1);
    const dead = (offset: string) => {
      const { record } = deadLetter(
        {
          topic: topics.sendRequests,
          partition: 1,
          offset,
          key: Buffer.from('+15550002222'),
          value: Buffer.from(big),
          headers: { 'correlation-id': 'big' },
        },
        'RELAY_UNKNOWN_BUSINESS',
        'unknown business "biz_9"',
        { requestId: 'big-1', businessId: 'biz_9' },
        true,
        Date.now(),
      );
      const fitted = fitDlqRecord(record, 0);
      return { key: fitted.key as Buffer, value: fitted.value, headers: fitted.headers as Record<string, string> };
    };
    const reference = dead(source!.offset);
    expect(reference.headers['dlq-value']).toBe('reference');
    await produce(refDlq, [reference, dead('999')]);

    const refused = await runCli(['dlq', 'redrive', refDlq, '--yes'], env());
    expect(refused.code).toBe(2);
    expect(refused.stderr).toMatch(/is not a configured DLQ topic .* pass --allow-any-topic/);
    const result = await runCli(['dlq', 'redrive', refDlq, '--yes', '--allow-any-topic'], env());
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).toMatch(
      /0\/1 {2}biz_9 {2}RELAY_DLQ_REFERENCE: .*source record .*\/1\/999 is no longer in its topic \(retention\)/,
    );
    expect(result.stdout).toMatch(new RegExp(`done: produced 1 \\(${topics.sendRequests} 1\\), 1 still failing`));
    const records = await consumeRecords(topics.sendRequests, 2, { settleMs: 500 });
    const redriven = records.find((r) => r.headers['redriven-from'])!;
    expect(redriven.value.toString()).toBe(big);
    expect(redriven.key).toBe('+15550002222');
    expect(redriven.headers).toMatchObject({
      'correlation-id': 'big',
      'event-id': reference.headers['event-id'],
      'redriven-from': `${refDlq}/0/0`,
    });
  }, 60_000);

  it.runIf(scriptCommand)(
    'asks before writing when stdin is a terminal: any answer but yes writes nothing (exit 1)',
    async () => {
      // The 0.1.0 records of the previous test are in this DLQ: one would be produced.
      const command = [
        'node',
        '--import',
        'tsx',
        'src/cli.ts',
        'dlq',
        'redrive',
        topics.sendRequestsDlq,
        '--name',
        'prompt-test',
      ].join(' ');
      const result = await new Promise<{ code: number | null; out: string }>((resolve) => {
        const child = spawn('script', ['-qec', command, '/dev/null'], {
          cwd: join(import.meta.dirname, '..', '..'),
          // The sender of this configuration reads the default send-requests, where the record came from.
          env: { ...process.env, ...env(), MSGBRIDGE__kafka__topics__sendRequests: 'send-requests' },
        });
        let out = '';
        child.stdout.on('data', (d: Buffer) => {
          out += d.toString();
          if (/Type yes to go on: /.test(out) && !child.stdin.writableEnded) child.stdin.end('no\n');
        });
        child.on('close', (code) => resolve({ code, out }));
      });
      expect(result.out).toMatch(/Produce 1 records to send-requests on \S+\? Type yes to go on: /);
      expect(result.out).toContain('not confirmed: nothing was written.');
      expect(result.code).toBe(1);
      expect(
        [...(await committedOffsets('msgbridge-dlq-redrive.prompt-test', topics.sendRequestsDlq)).values()].every(
          (c) => c.offset === -1,
        ),
      ).toBe(true);
    },
    60_000,
  );

  it('list: one line a record, --since found by timestamp, pages that join up; stats: counts by code and business', async () => {
    const dlq = uniqueTopic('list-dlq');
    await createTopics([dlq], 2);
    const old = Date.parse('2026-01-01T00:00:00Z');
    const records = golden('0.2.0', 'send-requests-dlq');
    await produceRequests(
      dlq,
      records.flatMap((r, i) =>
        [0, 1].map((partition) => ({
          key: r.key,
          value: r.value,
          headers: r.headers,
          partition,
          timestamp: i < 2 ? old + i * 1000 : Date.now(),
        })),
      ),
    );

    const all = await runCli(['dlq', 'list', dlq, '--json', '--max', '100'], env());
    expect(all.code, all.stderr).toBe(0);
    const lines = all.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(lines).toHaveLength(8);
    expect(lines[0]).toMatchObject({
      role: 'send-requests',
      code: 'RELAY_INVALID_JSON',
      headers: expect.objectContaining({ 'error-code': 'RELAY_INVALID_JSON' }),
    });
    expect(all.stderr).toContain(`8 shown; end of ${dlq}`);

    const recent = await runCli(
      ['dlq', 'list', dlq, '--since', '2026-06-01T00:00:00Z', '--code', 'RELAY_UNKNOWN_BUSINESS'],
      env(),
    );
    expect(recent.code, recent.stderr).toBe(0);
    const rows = recent.stdout.trim().split('\n');
    expect(rows[0]).toMatch(/^PART\/OFFSET\s+TIME\s+BUSINESS\s+CODE\s+EXCERPT$/);
    expect(rows.slice(1)).toHaveLength(2);
    for (const row of rows.slice(1))
      expect(row).toMatch(/^[01]\/3\s+\S+Z\s+biz_9\s+RELAY_UNKNOWN_BUSINESS\s+\{"requestId":"order-50"/);

    const first = await runCli(['dlq', 'list', dlq, '--max', '3', '--json'], env());
    const next = /next page: msgbridge dlq list \S+ --from (\S+)/.exec(first.stderr);
    expect(next, first.stderr).not.toBeNull();
    const second = await runCli(['dlq', 'list', dlq, '--max', '100', '--json', '--from', next![1]!], env());
    const seen = [...first.stdout.trim().split('\n'), ...second.stdout.trim().split('\n')].map((l) => {
      const r = JSON.parse(l) as { partition: number; offset: string };
      return `${r.partition}/${r.offset}`;
    });
    expect(new Set(seen).size).toBe(8);
    expect(seen).toHaveLength(8);

    const stats = await runCli(['dlq', 'stats', dlq, '--json'], env());
    expect(stats.code, stats.stderr).toBe(0);
    const s = JSON.parse(stats.stdout) as Record<string, unknown>;
    expect(s).toMatchObject({
      records: 8,
      partitions: 2,
      oldest: '2026-01-01T00:00:00.000Z',
      byCode: {
        RELAY_INVALID_JSON: { count: 2 },
        RELAY_INVALID_FIELD: { count: 2, businesses: { biz_1: 2 } },
        RELAY_UNKNOWN_TYPE: { count: 2 },
        RELAY_UNKNOWN_BUSINESS: { count: 2, businesses: { biz_9: 2 } },
      },
      redriven: 0,
      redrives: [],
    });
    const missing = await runCli(['dlq', 'stats', 'no-such-dlq'], env());
    expect(missing.code).toBe(2);
    expect(missing.stderr).toMatch(/topic "no-such-dlq" does not exist on .*; the configured DLQ topics there: /);
    // Seven CLI processes, each starting from the TypeScript sources: on a loaded machine (load 29
    // on 2 cores) they took over 60 s together.
  }, 180_000);
});
