import { afterEach, describe, expect, it } from 'vitest';
import { sendResultSchema, type SendResult } from '../../src/contracts/index.js';
import { runCli } from '../helpers/cli.js';
import { createTopics } from '../helpers/kafka.js';
import { startFakeProvider, type FakeProvider } from './fake-provider.js';
import {
  BIZ,
  BIZ2,
  collect,
  fixture,
  produceRequests,
  textRequest,
  waitUntil,
  type Collector,
  type Fixture,
  type RequestSpec,
} from './harness.js';

/**
 * The sender against an independent fake provider on loopback that fails the way a real one
 * does: down for 20 s (connections refused), dropping connections after reading the request
 * (the message exists, the answer is lost), failing for one business only. What is counted is
 * what the provider created and what reached send-results.
 */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

async function setUp(
  options: Parameters<typeof fixture>[0] & { latencyMs?: number } = {},
): Promise<{ f: Fixture; provider: FakeProvider; results: Collector }> {
  const provider = await startFakeProvider({ latencyMs: options.latencyMs ?? 0 });
  cleanups.push(() => provider.close());
  const f = await fixture({ ...options, providerUrl: provider.url });
  cleanups.push(() => f.close());
  const results = await collect(f.topics.sendResults);
  cleanups.push(() => results.stop());
  return { f, provider, results };
}

/** `n` text requests over `recipients` recipients, request id in callbackData (the fake provider records it). */
function requests(
  prefix: string,
  n: number,
  recipients: number,
  extra: Record<string, unknown> = {},
  firstRecipient = 0,
): RequestSpec[] {
  return Array.from({ length: n }, (_, i) => {
    const to = `+1555${String(7_000_000 + firstRecipient + (i % recipients)).padStart(7, '0')}`;
    const id = `${prefix}-${i}`;
    return { key: to, value: textRequest(id, to, `message ${i}`, { callbackData: id, ...extra }) };
  });
}

function byRequest(results: Collector): Map<string, SendResult[]> {
  const out = new Map<string, SendResult[]>();
  for (const value of results.values()) {
    const result = sendResultSchema.parse(value);
    out.set(result.requestId, [...(out.get(result.requestId) ?? []), result]);
  }
  return out;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('sender under provider failures', () => {
  it('a 20-second provider outage mid-stream: no request rejected, every one accepted once, /readyz ready throughout', async () => {
    const N = 600;
    const { f, provider, results } = await setUp({
      partitions: 6,
      sender: {
        ratePerSecond: 60,
        concurrency: 16,
        backoffInitialMs: 50,
        backoffMaxMs: 1000,
        circuitProbeMaxMs: 1000,
        callTimeoutMs: 2000,
      },
    });
    await produceRequests(f.topics.sendRequests, requests('out', N, 120));
    const sender = await f.start();
    await waitUntil(
      () => provider.created().length >= 100,
      30_000,
      () => 'the first sends',
    );
    await provider.stop();
    const createdBefore = provider.created().length;
    let readyThroughout = true;
    const watch = setInterval(() => (readyThroughout &&= sender.isReady()), 100);
    cleanups.push(async () => clearInterval(watch));
    await sleep(20_000);
    const metrics = await sender.metrics.metrics();
    expect(metrics).toMatch(/msgbridge_sender_circuit_open\{[^}]*business="biz_1"[^}]*\} 1/);
    expect(results.values().filter((v) => v.outcome !== 'accepted')).toEqual([]);
    await provider.start();
    await results.waitFor((r) => r.length >= N, 60_000, 'a result per request');
    clearInterval(watch);

    expect(readyThroughout).toBe(true);
    const per = byRequest(results);
    expect(per.size).toBe(N);
    for (const [id, list] of per) {
      expect(list, id).toHaveLength(1);
      expect(list[0], id).toMatchObject({ outcome: 'accepted' });
    }
    // Only a call written when the provider went away can be in doubt: at most the calls in flight (16).
    expect([...per.values()].filter((list) => list[0]!.maybeSent).length).toBeLessThanOrEqual(16);
    // Refused connections create nothing: every request created exactly one message.
    expect([...provider.createdPer().values()].every((n) => n === 1)).toBe(true);
    expect(provider.created()).toHaveLength(N);
    expect(createdBefore).toBeLessThan(N);
    expect(await sender.metrics.metrics()).toMatch(
      /msgbridge_sender_circuit_changes_total\{[^}]*business="biz_1"[^}]*state="closed"[^}]*\} [1-9]/,
    );
  }, 120_000);

  it('lost answers: results say maybeSent exactly when an attempt may have created the message; retryMaybeSent=false never creates two', async () => {
    const N = 300;
    /** N requests through a provider that drops 15% of connections after creating the message. */
    const lossyRun = async (prefix: string, retryMaybeSent: boolean) => {
      const run = await setUp({
        partitions: 3,
        sender: { ratePerSecond: 1000, backoffInitialMs: 20, backoffMaxMs: 100, retryMaybeSent },
      });
      run.provider.dropAfterReadRate = 0.15;
      await produceRequests(run.f.topics.sendRequests, requests(prefix, N, 60));
      await run.f.start();
      await run.results.waitFor((r) => r.length >= N, 60_000, 'a result per request');
      const dropped = new Set(
        run.provider
          .calls()
          .filter((c) => c.answer === 'dropped')
          .map((c) => c.requestId),
      );
      expect(dropped.size).toBeGreaterThan(10);
      return { ...run, dropped };
    };

    const atLeastOnce = await lossyRun('lost', true);
    for (const [id, list] of byRequest(atLeastOnce.results)) {
      expect(list, id).toHaveLength(1);
      expect(list[0], id).toMatchObject({ outcome: 'accepted', maybeSent: atLeastOnce.dropped.has(id) });
      // The accepted message id is one the provider created for that request.
      const created = atLeastOnce.provider.created().filter((m) => m.requestId === id);
      expect(created.map((m) => m.id)).toContain((list[0] as { messageId: string }).messageId);
      // Every attempt created a message (drops happen after creating): the result counts them all.
      expect(created.length, id).toBe(list[0]!.attempts);
    }

    const atMostOnce = await lossyRun('once', false);
    for (const [id, list] of byRequest(atMostOnce.results)) {
      expect(list, id).toHaveLength(1);
      if (atMostOnce.dropped.has(id)) {
        expect(list[0], id).toMatchObject({
          outcome: 'rejected',
          attempts: 1,
          maybeSent: true,
          error: { code: 'RELAY_NETWORK_ERROR', retriable: false, maybeSent: true },
        });
      } else {
        expect(list[0], id).toMatchObject({ outcome: 'accepted', maybeSent: false });
      }
    }
    expect([...atMostOnce.provider.createdPer().values()].every((n) => n === 1)).toBe(true);
  }, 120_000);

  it('the circuit isolates a failing business: the other keeps flowing, the failing one is probed, then sent in full', async () => {
    const { f, provider, results } = await setUp({
      partitions: 3,
      businesses: [BIZ, BIZ2],
      sender: {
        ratePerSecond: 1000,
        concurrency: 8,
        backoffInitialMs: 50,
        backoffMaxMs: 500,
        circuitProbeMaxMs: 500,
        circuitFailureThreshold: 5,
      },
    });
    provider.failing.set(BIZ.id, 503);
    // Different recipients: one recipient's requests stay in order whatever their business.
    const mixed = [
      ...requests('bad', 100, 20, { businessId: BIZ.id }),
      ...requests('good', 100, 20, { businessId: BIZ2.id }, 100),
    ].map((r, i, all) => all[(i % 2) * 100 + Math.floor(i / 2)]!);
    await produceRequests(f.topics.sendRequests, mixed);
    const sender = await f.start();
    await results.waitFor(
      (r) => r.filter((x) => x.headers['business-id'] === BIZ2.id).length >= 100,
      30_000,
      'every request of the healthy business',
    );
    // Let the open circuit show itself for a while: one probe at a time, spaced out.
    await sleep(2000);
    const failingCalls = provider.calls().filter((c) => c.businessId === BIZ.id).length;
    expect(failingCalls).toBeLessThan(40);
    expect(results.values().filter((v) => v.businessId === BIZ.id)).toEqual([]);
    expect(sender.isReady()).toBe(true);
    const metrics = await sender.metrics.metrics();
    expect(metrics).toMatch(/msgbridge_sender_circuit_open\{[^}]*business="biz_1"[^}]*\} 1/);
    expect(metrics).toMatch(/msgbridge_sender_circuit_open\{[^}]*business="biz_2"[^}]*\} 0/);

    provider.failing.delete(BIZ.id);
    await results.waitFor((r) => r.length >= 200, 30_000, 'every request');
    const per = byRequest(results);
    expect(per.size).toBe(200);
    expect([...per.values()].every((list) => list.length === 1 && list[0]!.outcome === 'accepted')).toBe(true);
  }, 90_000);

  it('expiry: a request past its expiresAt, ttlMs or the age limit is never sent and ends expired', async () => {
    const { f, provider, results } = await setUp({
      partitions: 1,
      sender: { backoffInitialMs: 50, backoffMaxMs: 200, circuitProbeMaxMs: 200, maxRequestAgeMs: 3_600_000 },
    });
    await provider.stop();
    const to = '+15557000001';
    await produceRequests(f.topics.sendRequests, [
      {
        key: 'a',
        value: textRequest('exp-past', to, 'x', {
          callbackData: 'exp-past',
          expiresAt: new Date(Date.now() - 1000).toISOString(),
        }),
      },
      {
        key: 'b',
        value: textRequest('exp-old', to, 'x', { callbackData: 'exp-old' }),
        timestamp: Date.now() - 2 * 3_600_000,
      },
      { key: 'c', value: textRequest('exp-ttl', to, 'x', { callbackData: 'exp-ttl', ttlMs: 1500 }) },
    ]);
    await f.start();
    await results.waitFor((r) => r.length >= 3, 20_000, 'three expired results');
    await provider.start();
    await produceRequests(f.topics.sendRequests, [
      { key: 'd', value: textRequest('exp-fresh', to, 'x', { callbackData: 'exp-fresh', ttlMs: 60_000 }) },
    ]);
    await results.waitFor((r) => r.length >= 4, 20_000, 'the fresh one');
    const per = byRequest(results);
    expect(per.get('exp-past')![0]).toMatchObject({
      outcome: 'expired',
      attempts: 0,
      maybeSent: false,
      expiredBy: 'expiresAt',
    });
    expect(per.get('exp-old')![0]).toMatchObject({ outcome: 'expired', attempts: 0, expiredBy: 'maxRequestAgeMs' });
    // Tried while the provider was down (refused: nothing created), then out of time.
    expect(per.get('exp-ttl')![0]).toMatchObject({ outcome: 'expired', maybeSent: false, expiredBy: 'ttlMs' });
    expect(per.get('exp-fresh')![0]).toMatchObject({ outcome: 'accepted' });
    expect(provider.created().map((m) => m.requestId)).toEqual(['exp-fresh']);
    // The relay's own fields never reach the provider.
    expect(provider.calls().every((c) => c.requestId === 'exp-fresh')).toBe(true);
  }, 60_000);

  it('msgbridge send stops following as soon as its request is dead-lettered, says why, and exits 1', async () => {
    const { f } = await setUp({ partitions: 1 });
    // `send` follows delivery_status too, which the ingress would have created.
    await createTopics([f.topics.deliveryStatus]);
    const sender = await f.start();
    await sender.ready;
    const started = Date.now();
    const env = f.env();
    const cli = await runCli(
      ['send', 'text', '--to', '+15557000002', '--text', 'hi', '--business', 'nope', '--timeout', '60'],
      {
        KAFKA_BROKERS: env.KAFKA_BROKERS!,
        MSGBRIDGE__kafka__topics: env.MSGBRIDGE__kafka__topics!,
      },
    );
    expect(cli.code, cli.stdout + cli.stderr).toBe(1);
    expect(cli.stdout).toMatch(
      /rejected without a send \(dead-lettered\): RELAY_UNKNOWN_BUSINESS .*unknown business "nope"/,
    );
    expect(Date.now() - started).toBeLessThan(30_000);
  }, 60_000);
});
