import { createHash } from 'node:crypto';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli.js';
import {
  canonicalCustomerId,
  deliveryStatusEventSchema,
  detectWebhookTopic,
  inboundMessageEventSchema,
} from '../../src/contracts/index.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { runWebhookLoad } from '../../src/simulator/load-generator.js';
import { hmacBase64 } from '../helpers/signing.js';
import { startReceiver, type Receiver } from './helpers.js';

const SECRET = 'load-secret';

describe('webhook load generator', () => {
  let receiver: Receiver | undefined;
  afterEach(async () => {
    await receiver?.close();
    receiver = undefined;
    vi.restoreAllMocks();
  });

  /** A receiver that checks signatures independently: 200 when valid, 403 otherwise. */
  const verifying = (extra?: (index: number) => number | undefined) =>
    startReceiver((request, index) => {
      const forced = extra?.(index);
      if (forced !== undefined) return { status: forced };
      return { status: request.headers['x-service-hmac-sha256'] === hmacBase64(SECRET, request.body) ? 200 : 403 };
    });

  it('sends a realistic signed mix: per inbound message, sent/delivered/read of one message id; bodies 300-600 bytes', async () => {
    receiver = await verifying();
    const report = await runWebhookLoad({
      url: `${receiver.url}/webhooks/biz_1`,
      signingSecret: SECRET,
      connections: 4,
      totalRequests: 80,
    });
    expect(report.sent).toBe(80);
    expect(report.answered).toEqual({ '200': 80 });
    expect(report.errors).toBe(0);
    expect(receiver.requests).toHaveLength(80);

    const byMessage = new Map<string, string[]>();
    let inbound = 0;
    for (const request of receiver.requests) {
      expect(request.url).toBe('/webhooks/biz_1');
      expect(request.headers['content-type']).toBe('text/plain; charset=utf-8');
      expect(request.headers['content-length']).toBe(String(request.body.length));
      expect(request.body.length).toBeGreaterThanOrEqual(300);
      expect(request.body.length).toBeLessThanOrEqual(600);
      const event = JSON.parse(request.body.toString('utf8')) as Record<string, unknown>;
      if (detectWebhookTopic(event) === 'messages') {
        inboundMessageEventSchema.parse(event);
        expect('topic' in event).toBe(false);
        inbound += 1;
      } else {
        const parsed = deliveryStatusEventSchema.parse(event);
        byMessage.set(parsed.statusUpdate.id, [
          ...(byMessage.get(parsed.statusUpdate.id) ?? []),
          parsed.statusUpdate.status,
        ]);
      }
    }
    expect(inbound).toBe(20);
    expect(byMessage.size).toBe(20);
    for (const statuses of byMessage.values()) expect(statuses.sort()).toEqual(['delivered', 'read', 'sent']);
    const sizes = receiver.requests.map((r) => r.body.length);
    expect(Math.max(...sizes) - Math.min(...sizes)).toBeGreaterThan(50);
  });

  it('lists every acknowledged event with its topic, Kafka key and event id (sha256 of the body)', async () => {
    receiver = await verifying((index) => (index % 5 === 0 ? 503 : undefined));
    const report = await runWebhookLoad({
      url: receiver.url,
      signingSecret: SECRET,
      connections: 2,
      totalRequests: 30,
      statusesPerInbound: 2,
    });
    expect(report.answered).toEqual({ '200': 24, '503': 6 });
    expect(report.acknowledged).toHaveLength(24);
    const acknowledgedBodies = receiver.requests.filter((_, index) => index % 5 !== 0);
    const expected = acknowledgedBodies.map((r) => {
      const event = JSON.parse(r.body.toString('utf8')) as { sender: { id: string }; statusUpdate?: { id: string } };
      const topic = detectWebhookTopic(event)!;
      // The ingress keys an inbound message by its canonical customer id (no leading +).
      return {
        topic,
        key: topic === 'messages' ? canonicalCustomerId(event.sender.id) : event.statusUpdate!.id,
        eventId: createHash('sha256').update(r.body).digest('hex'),
      };
    });
    const byId = (a: { eventId: string }, b: { eventId: string }) => a.eventId.localeCompare(b.eventId);
    expect([...report.acknowledged].sort(byId)).toEqual(expected.sort(byId));
  });

  it('posts to per-topic paths when asked', async () => {
    receiver = await verifying();
    await runWebhookLoad({
      url: `${receiver.url}/webhooks/biz_1/`,
      signingSecret: SECRET,
      connections: 1,
      totalRequests: 8,
      perTopicPaths: true,
    });
    const paths = receiver.requests.map((r) => r.url);
    expect(new Set(paths)).toEqual(new Set(['/webhooks/biz_1/messages', '/webhooks/biz_1/delivery_status']));
    for (const r of receiver.requests) {
      expect(r.url.endsWith(`/${detectWebhookTopic(JSON.parse(r.body.toString('utf8')))}`)).toBe(true);
    }
  });

  it('sends delivery statuses only when asked: sent/delivered/read of each message id', async () => {
    receiver = await verifying();
    const report = await runWebhookLoad({
      url: `${receiver.url}/webhooks/biz_1/delivery_status`,
      signingSecret: SECRET,
      connections: 2,
      totalRequests: 30,
      statusesOnly: true,
    });
    expect(report.answered).toEqual({ '200': 30 });
    const byMessage = new Map<string, string[]>();
    for (const r of receiver.requests) {
      expect(r.url).toBe('/webhooks/biz_1/delivery_status');
      const parsed = deliveryStatusEventSchema.parse(JSON.parse(r.body.toString('utf8')));
      byMessage.set(parsed.statusUpdate.id, [
        ...(byMessage.get(parsed.statusUpdate.id) ?? []),
        parsed.statusUpdate.status,
      ]);
    }
    expect(byMessage.size).toBe(10);
    for (const statuses of byMessage.values()) expect(statuses.sort()).toEqual(['delivered', 'read', 'sent']);
  });

  it('asks for gzip answers as the provider does, or not when told', async () => {
    receiver = await verifying();
    await runWebhookLoad({ url: receiver.url, signingSecret: SECRET, connections: 1, totalRequests: 3 });
    await runWebhookLoad({
      url: receiver.url,
      signingSecret: SECRET,
      connections: 1,
      totalRequests: 3,
      acceptEncoding: 'none',
    });
    expect(receiver.requests.map((r) => r.headers['accept-encoding'] ?? 'absent')).toEqual([
      'gzip',
      'gzip',
      'gzip',
      'absent',
      'absent',
      'absent',
    ]);
  });

  it('stops after the duration and reports latency percentiles in order', async () => {
    receiver = await verifying();
    const report = await runWebhookLoad({ url: receiver.url, signingSecret: SECRET, connections: 2, durationMs: 200 });
    expect(report.sent).toBeGreaterThan(0);
    expect(report.durationMs).toBeGreaterThanOrEqual(200);
    const { p50, p90, p99, p999, max } = report.latencyMs;
    expect(p50).toBeGreaterThan(0);
    expect(p50).toBeLessThanOrEqual(p90);
    expect(p90).toBeLessThanOrEqual(p99);
    expect(p99).toBeLessThanOrEqual(p999);
    expect(p999).toBeLessThanOrEqual(max);
    expect(receiver.requests).toHaveLength(report.sent);
  });

  it('keeps to the requested rate', async () => {
    receiver = await verifying();
    const report = await runWebhookLoad({
      url: receiver.url,
      signingSecret: SECRET,
      connections: 4,
      durationMs: 300,
      ratePerSecond: 50,
    });
    // Request i is due at i/rate: at most 15 fit in 300 ms (plus the one due at 0).
    expect(report.sent).toBeLessThanOrEqual(16);
    expect(report.sent).toBeGreaterThanOrEqual(2);
    const gaps = receiver.requests.slice(1).map((r, i) => r.at - receiver!.requests[i]!.at);
    expect(Math.max(...gaps)).toBeGreaterThanOrEqual(10);
  });

  it('counts requests that get no answer as errors', async () => {
    receiver = await verifying();
    const url = receiver.url;
    await receiver.close();
    receiver = undefined;
    const report = await runWebhookLoad({ url, signingSecret: SECRET, connections: 2, totalRequests: 4 });
    expect(report).toMatchObject({ sent: 4, errors: 4, answered: {}, acknowledged: [] });
    expect(report.errorSamples.length).toBeGreaterThan(0);
  });

  it('refuses bad options with a message naming them', async () => {
    const cases: [Parameters<typeof runWebhookLoad>[0], string][] = [
      [{ url: 'nope', signingSecret: SECRET, connections: 1, totalRequests: 1 }, 'url'],
      [{ url: 'http://127.0.0.1:9', signingSecret: SECRET, connections: 0, totalRequests: 1 }, 'connections'],
      [{ url: 'http://127.0.0.1:9', signingSecret: SECRET, connections: 1 }, 'durationMs or totalRequests'],
      [
        {
          url: 'http://127.0.0.1:9',
          signingSecret: SECRET,
          connections: 1,
          totalRequests: 1,
          bodyBytes: { min: 500, max: 100 },
        },
        'bodyBytes',
      ],
      [{ url: 'http://127.0.0.1:9', signingSecret: '', connections: 1, totalRequests: 1 }, 'signingSecret'],
      [
        {
          url: 'http://127.0.0.1:9',
          signingSecret: SECRET,
          connections: 1,
          totalRequests: 1,
          statusesOnly: true,
          statusesPerInbound: 0,
        },
        'statusesOnly',
      ],
      [
        {
          url: 'http://127.0.0.1:9',
          signingSecret: SECRET,
          connections: 1,
          totalRequests: 1,
          acceptEncoding: 'br' as 'gzip',
        },
        'acceptEncoding',
      ],
    ];
    for (const [options, name] of cases) {
      const error = await runWebhookLoad(options).catch((e: unknown) => e);
      expect(isMsgbridgeError(error, 'INVALID_ARGUMENT'), name).toBe(true);
      expect((error as Error).message).toContain(name);
    }
  });

  it('msgbridge load: runs and prints the report; bad arguments exit 2', async () => {
    receiver = await verifying();
    const out: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      out.push(String(chunk));
      return true;
    });
    vi.spyOn(process.stderr, 'write').mockImplementation(() => true);
    const code = await main([
      'node',
      'msgbridge',
      'load',
      '--url',
      `${receiver.url}/webhooks/biz_1`,
      '--secret',
      SECRET,
      '--total',
      '8',
      '--connections',
      '2',
      '--json',
    ]);
    expect(code).toBe(0);
    const report = JSON.parse(out.join('')) as { sent: number; answered: Record<string, number>; acknowledged: number };
    expect(report).toMatchObject({ sent: 8, answered: { '200': 8 }, acknowledged: 8 });
    expect(receiver.requests).toHaveLength(8);

    for (const args of [
      ['--url', 'not-a-url', '--secret', SECRET],
      ['--url', receiver.url, '--secret', SECRET, '--rate', '0'],
      ['--url', receiver.url, '--secret', SECRET, '--connections', 'many'],
      ['--url', receiver.url, '--secret', SECRET, '--duration', '-1'],
    ]) {
      expect(await main(['node', 'msgbridge', 'load', ...args]), args.join(' ')).toBe(2);
    }
    expect(receiver.requests).toHaveLength(8);
  });
});
