import { afterEach, describe, expect, it } from 'vitest';
import { sendResultSchema } from '../../src/contracts/index.js';
import { loadConfig } from '../../src/config/load.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { startSender } from '../../src/sender/index.js';
import { kafkaBrokers } from '../helpers/kafka.js';
import {
  BIZ,
  BIZ2,
  collect,
  committedOffsets,
  endOffsets,
  fixture,
  produceRequests,
  spawnSender,
  templateRequest,
  textRequest,
  waitUntil,
  type Collector,
  type Fixture,
} from './harness.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

async function setUp(
  options: Parameters<typeof fixture>[0] = {},
): Promise<{ f: Fixture; results: Collector; dlq: Collector }> {
  const f = await fixture(options);
  cleanups.push(() => f.close());
  const results = await collect(f.topics.sendResults);
  cleanups.push(() => results.stop());
  const dlq = await collect(f.topics.sendRequestsDlq);
  cleanups.push(() => dlq.stop());
  return { f, results, dlq };
}

describe('sender against Kafka and the provider simulator', () => {
  it('sends text and template requests and publishes the created ids with the request headers', async () => {
    const { f, results } = await setUp();
    const sender = await f.start();
    await sender.ready;
    await produceRequests(f.topics.sendRequests, [
      {
        key: '+15550002222',
        value: textRequest('req-text-1', '+15550002222', 'Your order shipped', {
          callbackData: 'cb-1',
          campaignName: 'spring',
        }),
        headers: {
          traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
          'correlation-order': 'order-42',
        },
      },
      {
        key: '+15550003333',
        value: templateRequest('req-tpl-1', '+15550003333', { businessId: BIZ.id, language: 'en' }),
      },
    ]);
    await results.waitFor((r) => r.length >= 2);

    const sends = f.simulator.sends();
    expect(sends).toHaveLength(2);
    const text = sends.find((s) => s.operation === 'text')!;
    const template = sends.find((s) => s.operation === 'template')!;
    expect(text.status).toBe(200);
    // The relay's own fields are stripped; everything else reaches the provider.
    expect(text.body).toEqual({
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      message: { text: 'Your order shipped' },
      callbackData: 'cb-1',
      campaignName: 'spring',
    });
    expect(template.body).toEqual({
      number: '+15550003333',
      templateName: 'order_update',
      parameters: [{ name: 'order', value: '42' }],
      language: 'en',
    });

    const byRequest = new Map(results.records.map((r) => [JSON.parse(r.value.toString()).requestId as string, r]));
    const textResult = byRequest.get('req-text-1')!;
    const value = sendResultSchema.parse(JSON.parse(textResult.value.toString()));
    expect(value).toMatchObject({
      requestId: 'req-text-1',
      businessId: BIZ.id,
      outcome: 'accepted',
      type: 'text',
      recipient: '+15550002222',
      attempts: 1,
    });
    // Correlation: the result carries the id the provider created, and is keyed by it.
    expect(value.outcome === 'accepted' && value.messageId).toBe(text.messageId);
    expect(textResult.key).toBe(text.messageId);
    expect(textResult.headers).toMatchObject({
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      'correlation-order': 'order-42',
      'business-id': BIZ.id,
      'content-type': 'application/json',
      schema: 'send-result/v1',
    });
    expect(textResult.headers['event-id']).toMatch(/^[0-9a-f]{64}$/);
    expect(Number(textResult.headers['received-at'])).toBeGreaterThan(Date.now() - 60_000);

    const templateResult = byRequest.get('req-tpl-1')!;
    expect(JSON.parse(templateResult.value.toString())).toMatchObject({
      outcome: 'accepted',
      type: 'template',
      recipient: '+15550003333',
      messageId: template.messageId,
    });
    expect(templateResult.key).toBe(template.messageId);

    // Offsets commit up to the end once the results are out.
    const ends = await endOffsets(f.topics.sendRequests);
    await expectCommitted(f, ends);
    const metrics = await sender.metrics.metrics();
    expect(metrics).toMatch(/msgbridge_sender_requests_total\{outcome="accepted",business="biz_1",role="sender"\} 2/);
    expect(metrics).toMatch(
      /msgbridge_sender_provider_request_duration_seconds_count\{role="sender",operation="text",result="2xx"\} 1/,
    );
  });

  it('sends every request that cannot be sent to the DLQ with the reason, and commits past it', async () => {
    const { f, results, dlq } = await setUp({ businesses: [BIZ, BIZ2] });
    const sender = await f.start();
    await sender.ready;
    const invalid = [
      { key: 'k-json', value: '{"requestId": "r1", "type": "text", ', reason: /not valid JSON/ },
      {
        key: 'k-schema',
        value: JSON.stringify({
          type: 'text',
          recipient: { channelType: 'whatsapp', id: '+15550002222' },
          message: { text: 'hi' },
          businessId: BIZ.id,
        }),
        reason: /requestId/,
      },
      {
        key: 'k-type',
        value: JSON.stringify({ requestId: 'r3', type: 'video', businessId: BIZ.id }),
        reason: /not a valid send request/,
      },
      {
        key: 'k-empty',
        value: JSON.stringify(textRequest('r4', '+15550002222', '', { businessId: BIZ.id })),
        reason: /message text must not be empty/,
      },
      {
        key: 'k-unknown',
        value: JSON.stringify(textRequest('r5', '+15550002222', 'hi', { businessId: 'biz_nope' })),
        reason: /unknown business "biz_nope"/,
      },
      {
        key: 'k-ambiguous',
        value: JSON.stringify(textRequest('r6', '+15550002222', 'hi')),
        reason: /businessId is missing and 2 businesses are configured/,
      },
      { key: null, value: '', reason: /not valid JSON/ },
    ];
    await produceRequests(f.topics.sendRequests, [
      ...invalid.map((r) => ({ key: r.key, value: r.value, headers: { traceparent: `tp-${r.key}` } })),
      { key: '+15550004444', value: textRequest('ok-1', '+15550004444', 'valid one', { businessId: BIZ2.id }) },
    ]);
    await dlq.waitFor((r) => r.length >= invalid.length);
    // Every request whose id can be read gets its rejected result (r1 from the broken JSON too).
    await results.waitFor((r) => r.length >= 6);
    expect(dlq.records).toHaveLength(invalid.length);
    for (const expected of invalid) {
      const record = dlq.records.find((r) => r.key === expected.key)!;
      expect(record, String(expected.key)).toBeDefined();
      expect(record.value.toString()).toBe(expected.value);
      expect(record.headers['error-reason']).toMatch(expected.reason);
      expect(record.headers.schema).toBe('send-requests-dlq/v1');
      expect(record.headers.traceparent).toBe(`tp-${expected.key}`);
      expect(record.headers['event-id']).toMatch(/^[0-9a-f]{64}$/);
      expect(record.headers['received-at']).toMatch(/^\d+$/);
      expect(record.headers['source-topic']).toBe(f.topics.sendRequests);
    }
    expect(dlq.records.find((r) => r.key === 'k-unknown')!.headers['business-id']).toBe('biz_nope');
    expect(dlq.records.find((r) => r.key === 'k-json')!.headers['content-type']).toBe('application/octet-stream');
    // Nothing invalid reached the provider; the valid request did.
    expect(f.simulator.sends().map((s) => s.businessId)).toEqual([BIZ2.id]);
    const byId = new Map(results.values().map((v) => [v.requestId as string, v]));
    expect(byId.get('ok-1')).toMatchObject({ businessId: BIZ2.id, outcome: 'accepted' });
    const expectedCodes = {
      r1: 'RELAY_INVALID_JSON',
      r3: 'RELAY_UNKNOWN_TYPE',
      r4: 'RELAY_INVALID_FIELD',
      r5: 'RELAY_UNKNOWN_BUSINESS',
      r6: 'RELAY_AMBIGUOUS_BUSINESS',
    };
    for (const [id, code] of Object.entries(expectedCodes)) {
      expect(sendResultSchema.parse(byId.get(id)), id).toMatchObject({
        outcome: 'rejected',
        attempts: 0,
        maybeSent: false,
        error: { code, retriable: false },
      });
    }
    expect(byId.get('r5')).toMatchObject({ businessId: 'biz_nope' });
    expect(results.records.find((r) => r.key === 'r3')!.headers.traceparent).toBe('tp-k-type');
    expect(results.records).toHaveLength(6);
    await expectCommitted(f, await endOffsets(f.topics.sendRequests));
  });

  it('retries 429 (honouring Retry-After, and with backoff without it) and 5xx, then publishes the accepted result', async () => {
    const { f, results } = await setUp({ sender: { retryBudgetMs: 60_000, backoffInitialMs: 50, backoffMaxMs: 5000 } });
    const sender = await f.start();
    await sender.ready;

    // 429 with Retry-After: 1 second.
    f.simulator.setFaults({ send429Rate: 1, send429RetryAfterSeconds: 1 });
    await produceRequests(f.topics.sendRequests, [{ key: 'a', value: textRequest('r-429-ra', '+15550000001', 'hi') }]);
    await waitUntil(
      () => f.simulator.sends().length >= 2,
      20_000,
      () => 'two 429s',
    );
    f.simulator.resetFaults();
    await results.waitFor((r) => r.length >= 1);
    let sends = f.simulator.sends();
    expect(sends.slice(0, -1).every((s) => s.status === 429)).toBe(true);
    expect(sends.at(-1)!.status).toBe(200);
    const gaps = sends.slice(1).map((s, i) => Date.parse(s.receivedAt) - Date.parse(sends[i]!.receivedAt));
    // Retry-After 1 s is honoured (the first backoff alone would be 25-50 ms).
    for (const gap of gaps) expect(gap).toBeGreaterThanOrEqual(950);
    expect(JSON.parse(results.records[0]!.value.toString())).toMatchObject({
      outcome: 'accepted',
      attempts: sends.length,
      messageId: sends.at(-1)!.messageId,
    });

    // 429 without Retry-After, then 5xx: exponential backoff from 50 ms.
    for (const [faults, id] of [
      [{ send429Rate: 1, send429RetryAfterSeconds: null }, 'r-429'],
      [{ send5xxRate: 1 }, 'r-5xx'],
    ] as const) {
      const before = f.simulator.sends().length;
      f.simulator.setFaults(faults);
      await produceRequests(f.topics.sendRequests, [{ key: id, value: textRequest(id, '+15550000002', 'hi') }]);
      await waitUntil(
        () => f.simulator.sends().length >= before + 3,
        20_000,
        () => `three failures for ${id}`,
      );
      f.simulator.resetFaults();
      await results.waitFor(() => results.values().some((v) => v.requestId === id));
      sends = f.simulator.sends().slice(before);
      const result = results.values().find((v) => v.requestId === id)!;
      expect(result).toMatchObject({ outcome: 'accepted', attempts: sends.length });
      const failed = sends.slice(0, -1).map((s) => s.status);
      expect(failed.length).toBeGreaterThanOrEqual(3);
      for (const status of failed) {
        if ('send5xxRate' in faults) expect(status).toBeGreaterThanOrEqual(500);
        else expect(status).toBe(429);
      }
      expect(sends.at(-1)!.status).toBe(200);
      const firstWait = Date.parse(sends[1]!.receivedAt) - Date.parse(sends[0]!.receivedAt);
      expect(firstWait).toBeLessThan(950);
    }
    const metrics = await sender.metrics.metrics();
    expect(metrics).toMatch(/msgbridge_sender_retries_total\{reason="rate-limited",role="sender"\} [1-9]/);
    expect(metrics).toMatch(/msgbridge_sender_retries_total\{reason="server-error",role="sender"\} [1-9]/);
  });

  it('rejects once the retry budget is spent (retriable) and at once on permanent errors, with the provider error object', async () => {
    const { f, results } = await setUp({
      businesses: [BIZ, BIZ2],
      senderApiKeys: { [BIZ2.id]: 'wrong-key' },
      sender: {
        retryBudgetMs: 1000,
        callTimeoutMs: 400,
        backoffInitialMs: 20,
        backoffMaxMs: 50,
        circuitProbeMaxMs: 200,
      },
    });
    const sender = await f.start();
    await sender.ready;

    f.simulator.setFaults({ send5xxRate: 1 });
    await produceRequests(f.topics.sendRequests, [
      { key: 'x', value: textRequest('r-budget', '+15550000001', 'hi', { businessId: BIZ.id }) },
    ]);
    await results.waitFor((r) => r.length >= 1);
    const budget = results.values()[0]!;
    expect(sendResultSchema.parse(budget)).toMatchObject({
      requestId: 'r-budget',
      outcome: 'rejected',
      error: { retriable: true },
    });
    // A 504 (a gateway gave up waiting) may hide a created message; the other 5xx do not.
    expect(budget.maybeSent).toBe(f.simulator.sends().some((s) => s.status === 504));
    expect(budget.attempts as number).toBeGreaterThanOrEqual(2);
    expect((budget.error as { httpStatus: number }).httpStatus).toBeGreaterThanOrEqual(500);
    expect((budget.error as { code: string }).code).toMatch(/^ERROR_CODE_/);
    expect((budget.error as { cntTraceId: string }).cntTraceId).toMatch(/^\d+$/);
    expect(f.simulator.sends()).toHaveLength(budget.attempts as number);
    expect(results.records[0]!.key).toBe('r-budget');

    // Latency beyond the call timeout: every attempt times out (and the provider still saw it).
    f.simulator.setFaults({ send5xxRate: 0, sendLatencyMs: { min: 700, max: 700 } });
    await produceRequests(f.topics.sendRequests, [
      { key: 'y', value: textRequest('r-timeout', '+15550000001', 'hi', { businessId: BIZ.id }) },
    ]);
    await results.waitFor((r) => r.length >= 2, 30_000);
    // The provider got each attempt and never answered in time: the message may exist.
    expect(results.values()[1]).toMatchObject({
      requestId: 'r-timeout',
      outcome: 'rejected',
      maybeSent: true,
      error: { type: 'RELAY_TRANSPORT_ERROR', code: 'RELAY_TIMEOUT', retriable: true, maybeSent: true },
    });
    f.simulator.resetFaults();

    // Permanent: 400 from the provider (blank text), 401 (wrong API key) — one attempt each.
    await produceRequests(f.topics.sendRequests, [
      { key: 'z', value: textRequest('r-400', '+15550000001', '   ', { businessId: BIZ.id }) },
      { key: 'w', value: textRequest('r-401', '+15550000001', 'hi', { businessId: BIZ2.id }) },
    ]);
    await results.waitFor((r) => r.length >= 4);
    const r400 = results.values().find((v) => v.requestId === 'r-400')!;
    const r401 = results.values().find((v) => v.requestId === 'r-401')!;
    expect(r400).toMatchObject({
      outcome: 'rejected',
      attempts: 1,
      error: {
        httpStatus: 400,
        type: 'ERROR_TYPE_INVALID_REQUEST',
        code: 'ERROR_CODE_MESSAGE_TEXT_EMPTY',
        retriable: false,
      },
    });
    expect(r401).toMatchObject({
      outcome: 'rejected',
      attempts: 1,
      businessId: BIZ2.id,
      error: { httpStatus: 401, retriable: false },
    });
    for (const v of [r400, r401]) sendResultSchema.parse(v);
    await expectCommitted(f, await endOffsets(f.topics.sendRequests));
  });

  it('does not send the same requestId twice: the stored result is published again (without its content)', async () => {
    const { f, results } = await setUp();
    const sender = await f.start();
    await sender.ready;
    await produceRequests(f.topics.sendRequests, [
      { key: 'k', value: textRequest('dup-1', '+15550000001', 'first'), headers: { traceparent: 'first' } },
      { key: 'k', value: textRequest('dup-1', '+15550000001', 'again'), headers: { traceparent: 'second' } },
      { key: 'k', value: textRequest('dup-1', '+15550000001', 'and again') },
    ]);
    await results.waitFor((r) => r.length >= 3);
    expect(f.simulator.sends()).toHaveLength(1);
    const values = results.records.map((r) => JSON.parse(r.value.toString()) as Record<string, unknown>);
    // The first carries the request's content; the copies kept for repeats leave it out (src/sender/README.md).
    const { content, ...rest } = values.find((v) => v.content !== undefined)!;
    expect(content).toEqual({ text: 'first' });
    expect(values.filter((v) => v.content === undefined)).toEqual([rest, rest]);
    expect(new Set(results.records.map((r) => r.headers['event-id'])).size).toBe(1);
    expect(results.records.map((r) => r.headers.traceparent).sort()).toEqual(['first', 'second', undefined].sort());
    expect(await sender.metrics.metrics()).toMatch(
      /msgbridge_sender_requests_total\{outcome="duplicate",business="biz_1",role="sender"\} 2/,
    );
  });

  it('serves health, readiness and metrics, and reports not ready while draining', async () => {
    const { f } = await setUp();
    const sender = await f.start({ admin: { host: '127.0.0.1', port: 0 } });
    await sender.ready;
    const base = sender.adminAddress!;
    expect((await fetch(`${base}/healthz`)).status).toBe(200);
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ ready: true });
    const metrics = await fetch(`${base}/metrics`);
    expect(metrics.headers.get('content-type')).toMatch(/text\/plain/);
    const text = await metrics.text();
    for (const name of [
      'msgbridge_sender_buffered_requests',
      'msgbridge_sender_commit_lag',
      'msgbridge_sender_provider_in_flight',
      'msgbridge_process_resident_memory_bytes',
    ]) {
      expect(text).toContain(name);
    }
    expect((await fetch(`${base}/nope`)).status).toBe(404);
    expect((await fetch(`${base}/healthz`, { method: 'POST' })).status).toBe(405);
    // Slow the provider so the drain has something in flight, and watch readiness drop.
    f.simulator.setFaults({ sendLatencyMs: { min: 1500, max: 1500 } });
    await produceRequests(f.topics.sendRequests, [{ key: 'a', value: textRequest('slow-1', '+15550000001', 'hi') }]);
    // A provider call in flight (a call slot taken), not only a request recording that it calls:
    // a drain starts no new call, so one still writing its `calling` record would be released.
    await waitUntil(
      () => sender.stats().providerCalls > 0,
      20_000,
      () => 'a provider call in flight',
    );
    const draining = sender.drain();
    const during = await fetch(`${base}/readyz`);
    expect(during.status).toBe(503);
    expect(await during.json()).toEqual({ ready: false, reason: 'draining' });
    expect(await draining).toBe(true);
    // The request in flight finished during the drain, and its offset was committed.
    expect(f.simulator.sends()).toHaveLength(1);
    await expectCommitted(f, await endOffsets(f.topics.sendRequests));
  });

  it('fails at start with a clear error when a business has no API key or none is configured', async () => {
    const base = { kafka: { brokers: kafkaBrokers() }, provider: { url: 'http://127.0.0.1:9' } };
    const noKey = loadConfig({
      env: {},
      overrides: { ...base, businesses: [{ id: 'biz_x', signingSecrets: ['s'], apiKey: null }] },
    });
    const error = await startSender({ config: noKey }).catch((e: unknown) => e);
    expect(isMsgbridgeError(error, 'CONFIG_INVALID')).toBe(true);
    expect((error as Error).message).toMatch(/businesses\.0\.apiKey: business "biz_x" has no API key/);
    const none = loadConfig({ env: {}, overrides: base });
    await expect(startSender({ config: none })).rejects.toThrow(/at least one business with an API key/);
    // The environment shorthand is enough.
    const env = loadConfig({
      env: { MSGBRIDGE_BUSINESS_ID: 'biz_env', MSGBRIDGE_API_KEY: 'k', MSGBRIDGE_PROVIDER_URL: 'http://127.0.0.1:9' },
    });
    expect(env.businesses).toEqual([{ id: 'biz_env', signingSecrets: [], apiKey: 'k' }]);
    // `msgbridge sender` says so and exits 2, before touching Kafka.
    const cli = spawnSender({ KAFKA_BROKERS: kafkaBrokers().join(','), MSGBRIDGE_BUSINESS_ID: 'biz_env' });
    expect(await cli.exited).toBe(2);
    expect(cli.output()).toMatch(
      /msgbridge: invalid configuration:\n {2}- businesses\.0\.apiKey: business "biz_env" has no API key/,
    );
  });
});

async function expectCommitted(f: Fixture, ends: Map<number, number>): Promise<void> {
  let last = '';
  const deadline = Date.now() + 15_000;
  for (;;) {
    const committed = await committedOffsets(f.groupId, f.topics.sendRequests);
    const ok = [...ends].every(([p, end]) => end === 0 || committed.get(p)?.offset === end);
    last = JSON.stringify({ ends: [...ends], committed: [...committed] });
    if (ok) return;
    if (Date.now() > deadline) throw new Error(`offsets not committed to the end: ${last}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
