import { afterEach, describe, expect, it } from 'vitest';
import { parseWrkOutput, runWrk, wrkBinary, type WrkLoad } from '../../bench/wrk.js';
import { deliveryStatusEventSchema, detectWebhookTopic, inboundMessageEventSchema } from '../../src/contracts/index.js';
import { hmacBase64 } from '../helpers/signing.js';
import { startReceiver, type Receiver } from '../simulator/helpers.js';

const SECRET = 'wrk-secret';

describe('wrk output (bench/wrk.ts)', () => {
  it('reads the script\u2019s report and the CPU the shell saw', () => {
    const stdout = [
      'Running 1s test @ http://127.0.0.1:1',
      '{"requests":120,"durationUs":1002000,"status":7,"connect":1,"read":2,"write":0,"timeout":3,"latencyUs":{"p50":1500,"p90":2500,"p99":9000,"p999":12345,"max":20001}}',
      'wrk-cpu-ticks 37',
      '',
    ].join('\n');
    expect(parseWrkOutput(stdout)).toEqual({
      answered: 120,
      ok: 113,
      rejected: 7,
      errors: 6,
      latencyMs: { p50: 1.5, p90: 2.5, p99: 9, p999: 12.35, max: 20 },
      durationMs: 1002,
      cpuSeconds: 0.37,
    });
    expect(() => parseWrkOutput('wrk-cpu-ticks 3\n')).toThrow(/no report/);
  });
});

// The Lua script against a real HTTP server: what the targets would get.
describe.skipIf(wrkBinary() === undefined)('the wrk script (bench/wrk/signed-webhooks.lua)', () => {
  let receiver: Receiver | undefined;
  afterEach(async () => {
    await receiver?.close();
    receiver = undefined;
  });

  const base = {
    secret: SECRET,
    connections: 2,
    threads: 1,
    durationMs: 1000,
    bodyBytes: { min: 300, max: 600 },
  } as const;
  /** 200 for a valid signature (checked with node:crypto), 403 otherwise; every tenth request 503. */
  const verifying = () =>
    startReceiver((request, index) => ({
      status:
        index % 10 === 9
          ? 503
          : request.headers['x-service-hmac-sha256'] === hmacBase64(SECRET, request.body)
            ? 200
            : 403,
    }));

  it(
    'sends the signed mix: a new body each time, per-topic paths, three statuses per inbound message',
    { timeout: 30_000 },
    async () => {
      receiver = await verifying();
      const load: WrkLoad = {
        ...base,
        url: `${receiver.url}/webhooks/biz_1`,
        perTopicPaths: true,
        statusesOnly: false,
        acceptEncoding: 'gzip',
      };
      const report = await runWrk(wrkBinary()!, load);
      const requests = receiver.requests;
      expect(requests.length).toBeGreaterThan(20);
      // wrk leaves the requests still in flight at the end unanswered: at most one per connection.
      expect(report.answered).toBeGreaterThanOrEqual(requests.length - base.connections);
      expect(report.answered).toBeLessThanOrEqual(requests.length);
      expect(report.ok + report.rejected).toBe(report.answered);
      expect(Math.abs(report.rejected - Math.floor(requests.length / 10))).toBeLessThanOrEqual(base.connections);
      expect(report.latencyMs.p50).toBeGreaterThan(0);
      expect(report.latencyMs.p50).toBeLessThanOrEqual(report.latencyMs.max);
      expect(report.cpuSeconds).toBeGreaterThanOrEqual(0);

      const statuses = new Map<string, string[]>();
      let inbound = 0;
      for (const r of requests) {
        expect(r.headers['x-service-hmac-sha256']).toBe(hmacBase64(SECRET, r.body));
        expect(r.headers['content-type']).toBe('text/plain; charset=utf-8');
        expect(r.headers['accept-encoding']).toBe('gzip');
        expect(r.body.length).toBeGreaterThanOrEqual(300);
        expect(r.body.length).toBeLessThanOrEqual(600);
        const event = JSON.parse(r.body.toString('utf8')) as unknown;
        const topic = detectWebhookTopic(event);
        expect(r.url).toBe(`/webhooks/biz_1/${topic}`);
        if (topic === 'messages') {
          inboundMessageEventSchema.parse(event);
          inbound += 1;
        } else {
          const { statusUpdate } = deliveryStatusEventSchema.parse(event);
          statuses.set(statusUpdate.id, [...(statuses.get(statusUpdate.id) ?? []), statusUpdate.status]);
        }
      }
      expect(new Set(requests.map((r) => r.body.toString('utf8'))).size).toBe(requests.length);
      // One message id per inbound message; the last one or two may be cut short by the end of the run.
      expect(Math.abs(statuses.size - inbound)).toBeLessThanOrEqual(1);
      const whole = [...statuses.values()].filter((s) => s.length === 3);
      expect(whole.length).toBeGreaterThanOrEqual(statuses.size - 2);
      for (const s of whole) expect([...s].sort()).toEqual(['delivered', 'read', 'sent']);
    },
  );

  it('sends statuses only, to one path, without Accept-Encoding when told', { timeout: 30_000 }, async () => {
    receiver = await verifying();
    await runWrk(wrkBinary()!, {
      ...base,
      url: `${receiver.url}/webhooks/biz1/delivery_status`,
      perTopicPaths: false,
      statusesOnly: true,
      acceptEncoding: 'none',
    });
    expect(receiver.requests.length).toBeGreaterThan(20);
    for (const r of receiver.requests) {
      expect(r.url).toBe('/webhooks/biz1/delivery_status');
      expect(r.headers['accept-encoding']).toBeUndefined();
      expect(r.headers['x-service-hmac-sha256']).toBe(hmacBase64(SECRET, r.body));
      deliveryStatusEventSchema.parse(JSON.parse(r.body.toString('utf8')));
    }
  });
});
