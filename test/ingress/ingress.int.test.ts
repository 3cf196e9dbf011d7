import { createHash } from 'node:crypto';
import { connect } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeRecords, countRecords } from '../helpers/kafka.js';
import { hmacBase64 } from '../helpers/signing.js';
import { inboundEvent, messageId, signedHeaders, statusEvent } from './fixtures.js';
import { KAFKA_CLIENTS, startTestIngress, type TestIngress } from './harness.js';

const SECRET = 'whsec-current-0123456789';
const OLD_SECRET = 'whsec-previous-9876543210';
const OTHER_SECRET = 'whsec-of-biz-2';

const sha256 = (body: string | Buffer) => createHash('sha256').update(body).digest('hex');

/** Raw HTTP/1.1 over a socket: what the client sees, including an early close. */
function raw(
  port: number,
  request: string | Buffer,
  trailing?: Buffer,
  waitMs = 1500,
): Promise<{ text: string; closed: boolean }> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    let text = '';
    let closed = false;
    socket.on('data', (d) => (text += d.toString('latin1')));
    socket.on('error', () => {});
    socket.on('close', () => {
      closed = true;
      clearTimeout(timer);
      resolve({ text, closed });
    });
    socket.write(request);
    if (trailing) socket.write(trailing, () => {});
    const timer = setTimeout(() => {
      socket.destroy();
      resolve({ text, closed });
    }, waitMs);
  });
}

// Every behaviour holds with either Kafka client (kafka.client): both run here.
describe.each(KAFKA_CLIENTS)('ingress against real Kafka and real HTTP (%s)', (client) => {
  let t: TestIngress;

  beforeAll(async () => {
    // biz_1 through the single-business environment shorthand, mid-rotation (two secrets);
    // biz_2 from the configuration.
    t = await startTestIngress({
      env: { MSGBRIDGE_BUSINESS_ID: 'biz_1', MSGBRIDGE_SIGNING_SECRET: `${SECRET},${OLD_SECRET}` },
      overrides: {
        kafka: { client },
        businesses: [{ id: 'biz_2', signingSecrets: [OTHER_SECRET], apiKey: null }],
        ingress: { maxBodyBytes: 4096 },
      },
    });
  });
  afterAll(async () => {
    await t?.stop();
  });

  it('publishes a correctly signed delivery status: topic, key, exact bytes, every header; 200 only once it is in Kafka', async () => {
    const id = messageId();
    const body = statusEvent(id, 'delivered', { metadata: { note: 'kept byte for byte', emoji: '✓' } }).replace(
      '"sender"',
      '  "sender"',
    );
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const before = Date.now();
    const res = await t.post('/webhooks/biz_1/delivery_status', body, signedHeaders(SECRET, body, { traceparent }));
    expect(res.status).toBe(200);
    expect(JSON.parse(res.body)).toEqual({ status: 'accepted', eventId: sha256(body) });
    expect(t.logs.find((l) => l.includes('"msg":"ingress listening"'))).toContain(`"kafkaClient":"${client}"`);
    // Acknowledged means written: the record is countable right after the answer.
    expect(await countRecords(t.topics.deliveryStatus)).toBe(1);

    const [record] = await consumeRecords(t.topics.deliveryStatus, 1);
    expect(record!.key).toBe(id);
    expect(record!.value.equals(Buffer.from(body))).toBe(true);
    const { 'received-at': receivedAt, ...headers } = record!.headers;
    expect(Number(receivedAt)).toBeGreaterThanOrEqual(before);
    expect(Number(receivedAt)).toBeLessThanOrEqual(Date.now());
    expect(headers).toEqual({
      'event-id': sha256(body),
      'business-id': 'biz_1',
      'content-type': 'application/json',
      schema: 'delivery_status/v1',
      'x-service-hmac-sha256': hmacBase64(SECRET, body),
      traceparent,
    });
  });

  it('publishes inbound messages keyed by their customer (canonical id), on the per-topic and the per-business address, for any configured business', async () => {
    const a = inboundEvent('+15550003333', 'first');
    const b = inboundEvent('15550004444', 'second', {
      attachments: [{ type: 'image', url: 'https://example.com/x.png' }],
    });
    const s = statusEvent(messageId(), 'read');
    expect((await t.post('/webhooks/biz_1/messages', a, signedHeaders(SECRET, a))).status).toBe(200);
    expect((await t.post('/webhooks/biz_2', b, signedHeaders(OTHER_SECRET, b))).status).toBe(200);
    expect((await t.post('/webhooks/biz_2', s, signedHeaders(OTHER_SECRET, s))).status).toBe(200);
    const records = await consumeRecords(t.topics.messages, 2);
    const byKey = Object.fromEntries(records.map((r) => [r.key, r]));
    // The key is the digits without + whichever form the provider wrote; the value is its bytes.
    expect(byKey['15550003333']!.value.toString()).toBe(a);
    expect(byKey['15550003333']!.headers['business-id']).toBe('biz_1');
    expect(byKey['15550004444']!.value.toString()).toBe(b);
    expect(byKey['15550004444']!.headers).toMatchObject({
      'business-id': 'biz_2',
      schema: 'messages/v1',
      'event-id': sha256(b),
    });
    expect(await countRecords(t.topics.deliveryStatus)).toBe(2); // one from the first test, one now
  });

  it('accepts both secrets during a rotation and nothing else', async () => {
    const fresh = statusEvent(messageId(), 'sent');
    const old = statusEvent(messageId(), 'sent');
    const before = await countRecords(t.topics.deliveryStatus);
    expect((await t.post('/webhooks/biz_1/delivery_status', fresh, signedHeaders(SECRET, fresh))).status).toBe(200);
    expect((await t.post('/webhooks/biz_1/delivery_status', old, signedHeaders(OLD_SECRET, old))).status).toBe(200);
    const retired = statusEvent(messageId(), 'sent');
    expect(
      (await t.post('/webhooks/biz_1/delivery_status', retired, signedHeaders('whsec-retired', retired))).status,
    ).toBe(403);
    expect(await countRecords(t.topics.deliveryStatus)).toBe(before + 2);
  });

  it('refuses every bad request with its status, and nothing of them reaches Kafka', async () => {
    const counts = async () =>
      Promise.all([
        countRecords(t.topics.messages),
        countRecords(t.topics.deliveryStatus),
        countRecords(t.topics.webhooksDlq),
      ]);
    const before = await counts();
    const body = statusEvent(messageId());
    const cases: [string, Promise<{ status: number; headers: Record<string, string>; body: string }>, number][] = [
      ['unknown business', t.post('/webhooks/nobody/delivery_status', body, signedHeaders(SECRET, body)), 403],
      ['missing signature', t.post('/webhooks/biz_1/delivery_status', body, { 'content-type': 'text/plain' }), 403],
      ['wrong secret', t.post('/webhooks/biz_1/delivery_status', body, signedHeaders('nope', body)), 403],
      [
        'other business secret',
        t.post('/webhooks/biz_1/delivery_status', body, signedHeaders(OTHER_SECRET, body)),
        403,
      ],
      [
        'bytes changed after signing',
        t.post('/webhooks/biz_1/delivery_status', `${body} `, signedHeaders(SECRET, body)),
        403,
      ],
      [
        'sha256= prefix',
        t.post('/webhooks/biz_1/delivery_status', body, {
          'x-service-hmac-sha256': `sha256=${hmacBase64(SECRET, body)}`,
        }),
        403,
      ],
      [
        'unsigned garbage',
        t.post('/webhooks/biz_1/delivery_status', 'not json', { 'x-service-hmac-sha256': hmacBase64('x', 'y') }),
        403,
      ],
      [
        'body over the limit',
        t.post('/webhooks/biz_1/delivery_status', 'x'.repeat(5000), signedHeaders(SECRET, 'x'.repeat(5000))),
        413,
      ],
      [
        'gzip',
        t.post('/webhooks/biz_1/delivery_status', body, signedHeaders(SECRET, body, { 'content-encoding': 'gzip' })),
        415,
      ],
      ['unknown topic', t.post('/webhooks/biz_1/orders', body, signedHeaders(SECRET, body)), 404],
      ['unknown path', t.post('/hooks/biz_1', body, signedHeaders(SECRET, body)), 404],
      ['GET on a webhook address', t.get('/webhooks/biz_1/delivery_status'), 405],
      ['GET on the per-business address', t.get('/webhooks/biz_1'), 405],
      ['GET on an unknown topic', t.get('/webhooks/biz_1/orders'), 404],
    ];
    for (const [name, pending, status] of cases) {
      const res = await pending;
      expect({ name, status: res.status }).toEqual({ name, status });
      expect(JSON.parse(res.body).error.code).toMatch(/^[A-Z_]+$/);
      if (status === 405) expect(res.headers.allow).toBe('POST');
    }
    expect(await counts()).toEqual(before);
  });

  it('answers 413 at once while streaming, without reading the rest, and closes the connection', async () => {
    const before = await countRecords(t.topics.deliveryStatus);
    // Declared too large: answered before any body byte is sent.
    const declared = await raw(
      t.ingress.port,
      `POST /webhooks/biz_1/delivery_status HTTP/1.1\r\nhost: x\r\ncontent-length: 10000000\r\nx-service-hmac-sha256: ${hmacBase64(SECRET, 'x')}\r\n\r\n`,
    );
    expect(declared.text).toMatch(/^HTTP\/1\.1 413 /);
    expect(declared.closed).toBe(true);
    // Chunked, no length: cut off as soon as the streamed total passes the limit.
    const chunk = 'y'.repeat(3000);
    const chunked = await raw(
      t.ingress.port,
      `POST /webhooks/biz_1/delivery_status HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n${(3000).toString(16)}\r\n${chunk}\r\n${(3000).toString(16)}\r\n${chunk}\r\n`,
    );
    expect(chunked.text).toMatch(/^HTTP\/1\.1 413 /);
    expect(chunked.closed).toBe(true);
    expect(await countRecords(t.topics.deliveryStatus)).toBe(before);
  });

  it('dead-letters authentic but unusable bodies (200 once written), with the reason in a header', async () => {
    const notJson = '{"topic":"delivery_status",';
    const badShape = JSON.stringify({
      topic: 'delivery_status',
      timestamp: 'yesterday',
      statusUpdate: { id: 'x', status: 'sent', error: null },
    });
    const mismatch = statusEvent(messageId(), 'read');
    const cases = [
      ['/webhooks/biz_1/delivery_status', notJson, 'not-json'],
      ['/webhooks/biz_1/delivery_status', badShape, 'schema'],
      ['/webhooks/biz_1/messages', mismatch, 'topic-mismatch'],
    ] as const;
    const before = await countRecords(t.topics.messages);
    for (const [path, body] of cases) {
      const res = await t.post(path, body, signedHeaders(SECRET, body));
      expect(res.status).toBe(200);
      expect(JSON.parse(res.body).status).toBe('dead-lettered');
    }
    expect(await countRecords(t.topics.webhooksDlq)).toBe(3);
    expect(await countRecords(t.topics.messages)).toBe(before);
    const records = await consumeRecords(t.topics.webhooksDlq, 3);
    for (const [, body, reason] of cases) {
      const record = records.find((r) => r.headers['event-id'] === sha256(body))!;
      expect(record.key).toBe('biz_1');
      expect(record.value.equals(Buffer.from(body))).toBe(true);
      expect(record.headers['error-reason']).toMatch(new RegExp(`^${reason}: `));
      expect(record.headers).toMatchObject({
        schema: 'webhooks-dlq/v1',
        'business-id': 'biz_1',
        'x-service-hmac-sha256': hmacBase64(SECRET, body),
      });
    }
  });

  it('answers hundreds of concurrent requests, each only once its record is in Kafka', async () => {
    const before = await countRecords(t.topics.deliveryStatus);
    let acknowledged = 0;
    const ids = new Set<string>();
    for (let wave = 0; wave < 4; wave++) {
      const bodies = Array.from({ length: 100 }, (_, i) =>
        statusEvent(messageId(), ['sent', 'delivered', 'read'][i % 3]),
      );
      const answers = await Promise.all(
        bodies.map((b) => t.post('/webhooks/biz_1/delivery_status', b, signedHeaders(SECRET, b))),
      );
      for (const [i, a] of answers.entries()) {
        expect(a.status).toBe(200);
        ids.add(sha256(bodies[i]!));
      }
      acknowledged += answers.length;
      // Every answered event is already there: nothing is acknowledged ahead of Kafka.
      expect(await countRecords(t.topics.deliveryStatus)).toBe(before + acknowledged);
    }
    const records = await consumeRecords(t.topics.deliveryStatus, before + acknowledged);
    const seen = new Set(records.map((r) => r.headers['event-id']));
    for (const id of ids) expect(seen.has(id)).toBe(true);
    // They were batched: fewer produce requests than events.
    const metrics = (await t.admin('/metrics')).body;
    const batches = Number(/^msgbridge_ingress_batch_size_count\{[^}]*\} (\d+)/m.exec(metrics)?.[1]);
    const events = Number(/^msgbridge_ingress_batch_size_sum\{[^}]*\} (\d+)/m.exec(metrics)?.[1]);
    expect(events).toBeGreaterThan(400);
    expect(batches).toBeLessThan(events);
  });

  it('the webhook port serves webhooks only: /metrics, /healthz and /readyz are 404 there, on the admin port only', async () => {
    for (const path of ['/metrics', '/healthz', '/readyz']) {
      const answer = await t.get(path);
      expect(answer.status, path).toBe(404);
      expect(answer.body, path).not.toContain('msgbridge_');
    }
    const admin = new URL(t.ingress.adminAddress!);
    expect(admin.port).not.toBe(String(t.ingress.port));
    expect((await t.admin('/metrics')).body).toMatch(/^msgbridge_ingress_requests_total\{/m);
    // The admin port serves nothing else: no webhook is taken there.
    expect(
      (await fetch(`${t.ingress.adminAddress}/webhooks/biz_1/messages`, { method: 'POST', body: '{}' })).status,
    ).toBe(405);
    expect((await fetch(`${t.ingress.adminAddress}/webhooks/biz_1/messages`)).status).toBe(404);
  });

  it('serves /healthz, /readyz and /metrics on the admin port; logs one line per refusal and never a secret or full signature', async () => {
    expect((await t.admin('/healthz')).status).toBe(200);
    const ready = await t.admin('/readyz');
    expect(ready.status).toBe(200);
    expect(t.ingress.isReady()).toBe(true);
    const metrics = await t.admin('/metrics');
    expect(metrics.status).toBe(200);
    expect(metrics.headers['content-type']).toMatch(/^text\/plain/);
    expect(metrics.body).toMatch(
      /msgbridge_ingress_requests_total\{topic="delivery_status",outcome="published",role="ingress"\} \d+/,
    );
    expect(metrics.body).toMatch(
      /msgbridge_ingress_requests_total\{topic="delivery_status",outcome="forbidden",role="ingress"\} \d+/,
    );
    expect(metrics.body).toMatch(/msgbridge_ingress_dead_letters_total\{reason="not-json",role="ingress"\} 1/);
    expect(metrics.body).toMatch(/msgbridge_ingress_queue_depth\{state="queued",role="ingress"\} 0/);
    expect(metrics.body).toContain('msgbridge_ingress_publish_latency_seconds_bucket');

    const body = statusEvent(messageId());
    const signature = hmacBase64(OLD_SECRET, body);
    const linesBefore = t.logs.length;
    await t.post('/webhooks/biz_2/delivery_status', body, { 'x-service-hmac-sha256': signature });
    const refusal = t.logs
      .slice(linesBefore)
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .filter((l) => l.status === 403);
    expect(refusal).toHaveLength(1);
    expect(refusal[0]).toMatchObject({
      status: 403,
      reason: 'bad-signature',
      business: 'biz_2',
      signaturePrefix: `${signature.slice(0, 6)}…`,
    });
    const all = t.logs.join('\n');
    for (const secret of [SECRET, OLD_SECRET, OTHER_SECRET]) expect(all).not.toContain(secret);
    expect(all).not.toContain(signature);
    expect(all).not.toContain(hmacBase64(SECRET, statusEvent('x')));
  });
});
