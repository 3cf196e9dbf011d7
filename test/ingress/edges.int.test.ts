import { afterEach, describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { createPlatformaticProducer } from '../../src/kafka/platformatic-producer.js';
import type { RecordProducer } from '../../src/kafka/port.js';
import { consumeRecords, countRecords, createTopics, kafkaBrokers } from '../helpers/kafka.js';
import { messageId, signedHeaders, statusEvent } from './fixtures.js';
import { chunk, rawConnection, startTestIngress, type TestIngress } from './harness.js';

const SECRET = 'edges-secret';
const ENV = { MSGBRIDGE_BUSINESS_ID: 'biz_1', MSGBRIDGE_SIGNING_SECRET: SECRET };

/**
 * The real producer, writing to the suite's Kafka, whose sends wait until the test opens the
 * gate: what a slow Kafka looks like from the ingress, without stopping the shared broker.
 */
function gatedProducer(): { create: () => RecordProducer; open(): void; sends: () => number } {
  const config = loadConfig({ env: { KAFKA_BROKERS: kafkaBrokers().join(',') } });
  let release!: () => void;
  const gate = new Promise<void>((resolve) => (release = resolve));
  let sends = 0;
  return {
    create() {
      const real = createPlatformaticProducer(config.kafka, { brokers: kafkaBrokers() });
      return {
        connect: () => real.connect(),
        disconnect: () => real.disconnect(),
        async send(batches) {
          sends++;
          await gate;
          await real.send(batches);
        },
      };
    },
    open: () => release(),
    sends: () => sends,
  };
}

function signedPost(path: string, body: string, extraHead = ''): string {
  return `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-service-hmac-sha256: ${signedHeaders(SECRET, body)['x-service-hmac-sha256']}\r\n${extraHead}\r\n${body}`;
}

let running: TestIngress[] = [];
afterEach(async () => {
  for (const t of running) {
    await t.stop().catch(() => {});
    // 503s, the drain, the DLQ: no path logs the secret or a full signature (Base64 of 32 bytes).
    const all = t.logs.join('\n');
    expect(all).not.toContain(SECRET);
    expect(all).not.toMatch(/[A-Za-z0-9+/]{43}=/);
  }
  running = [];
});

async function ingressWith(options: NonNullable<Parameters<typeof startTestIngress>[0]>): Promise<TestIngress> {
  const t = await startTestIngress({ env: ENV, ...options });
  running.push(t);
  // With its own producer the ingress leaves the topics to the caller.
  if (options.start?.createProducer)
    await createTopics([t.topics.messages, t.topics.deliveryStatus, t.topics.webhooksDlq], 3);
  return t;
}

describe('ingress edges (real Kafka behind a gate)', () => {
  it('a queue full by events answers 503 QUEUE_FULL with Retry-After, and /readyz is 503 until it drains', async () => {
    const gate = gatedProducer();
    const t = await ingressWith({
      overrides: { ingress: { queueMaxEvents: 3, publishTimeoutMs: 30_000, drainGraceMs: 40_000 } },
      start: { createProducer: gate.create },
    });
    const bodies = [0, 1, 2].map(() => statusEvent(messageId()));
    const admitted = bodies.map((b) => t.post('/webhooks/biz_1/delivery_status', b, signedHeaders(SECRET, b)));
    await vi.waitFor(() => expect(gate.sends()).toBe(1), { timeout: 5000 });
    await vi.waitFor(async () => expect((await t.admin('/readyz')).status).toBe(503), { timeout: 5000 });

    const extra = statusEvent(messageId());
    const refused = await t.post('/webhooks/biz_1/delivery_status', extra, signedHeaders(SECRET, extra));
    expect(refused.status).toBe(503);
    expect(refused.headers['retry-after']).toBe(String(t.config.ingress.retryAfterSeconds));
    expect(JSON.parse(refused.body).error.code).toBe('QUEUE_FULL');

    gate.open();
    expect((await Promise.all(admitted)).map((r) => r.status)).toEqual([200, 200, 200]);
    expect((await t.admin('/readyz')).status).toBe(200);
    expect(await countRecords(t.topics.deliveryStatus)).toBe(3);
  });

  it('while draining: new requests get 503 SHUTTING_DOWN and their connection closes, /readyz is 503, the pending answer still comes', async () => {
    const gate = gatedProducer();
    const t = await ingressWith({ start: { createProducer: gate.create } });
    const body = statusEvent(messageId());
    const pending = t.post('/webhooks/biz_1/delivery_status', body, signedHeaders(SECRET, body));
    await vi.waitFor(() => expect(gate.sends()).toBe(1), { timeout: 5000 });

    const draining = t.ingress.drain();
    const late = await rawConnection(t.ingress.port);
    late.socket.write(signedPost('/webhooks/biz_1/delivery_status', statusEvent(messageId())));
    await late.closedAfter;
    expect(late.received()).toMatch(/^HTTP\/1\.1 503 /);
    expect(late.received()).toMatch(/\r\nretry-after: /i);
    expect(late.received()).toContain('"SHUTTING_DOWN"');
    expect((await t.admin('/readyz')).status).toBe(503);

    gate.open();
    expect((await pending).status).toBe(200);
    await draining;
    expect(t.ingress.state).toBe('stopped');
    expect(await countRecords(t.topics.deliveryStatus)).toBe(1);
  });

  it('a client gone before its answer: the event is still written, nothing breaks, the next request is served', async () => {
    const gate = gatedProducer();
    const t = await ingressWith({ start: { createProducer: gate.create } });
    const gone = await rawConnection(t.ingress.port);
    const body = statusEvent(messageId());
    gone.socket.write(signedPost('/webhooks/biz_1/delivery_status', body));
    await vi.waitFor(() => expect(gate.sends()).toBe(1), { timeout: 5000 });
    gone.socket.destroy();
    await gone.closedAfter;

    gate.open();
    const next = statusEvent(messageId());
    expect((await t.post('/webhooks/biz_1/delivery_status', next, signedHeaders(SECRET, next))).status).toBe(200);
    // Written although nobody heard the 200: the provider will send it again (at least once).
    expect(await countRecords(t.topics.deliveryStatus)).toBe(2);
    expect(t.logs.some((l) => /"level":(50|60)/.test(l))).toBe(false);
  });
});

describe('ingress edges (bodies)', () => {
  it('an authentic empty body is kept in the DLQ; a chunked body under the limit is accepted like any other', async () => {
    const t = await ingressWith({});
    const empty = await t.post('/webhooks/biz_1/delivery_status', '', signedHeaders(SECRET, ''));
    expect(empty.status).toBe(200);
    const [dead] = await consumeRecords([t.topics.webhooksDlq], 1);
    expect(dead!.value).toEqual(Buffer.alloc(0));
    expect(dead!.headers['error-reason']).toMatch(/^not-json: /);

    const body = statusEvent(messageId());
    const chunked = await rawConnection(t.ingress.port);
    const half = Math.floor(body.length / 2);
    chunked.socket.write(
      `POST /webhooks/biz_1 HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\ncontent-type: application/json\r\nx-service-hmac-sha256: ${signedHeaders(SECRET, body)['x-service-hmac-sha256']}\r\n\r\n${chunk(body.slice(0, half))}`,
    );
    await new Promise((r) => setTimeout(r, 100));
    chunked.socket.write(`${chunk(body.slice(half))}0\r\n\r\n`);
    await vi.waitFor(() => expect(chunked.received()).toMatch(/^HTTP\/1\.1 200 /), { timeout: 10_000 });
    chunked.socket.destroy();
    const [record] = await consumeRecords([t.topics.deliveryStatus], 1);
    expect(record!.value.toString()).toBe(body);
  });
});
