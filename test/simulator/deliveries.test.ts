import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { DeliveryRecord, RunningSimulator, SimulatorOptions } from '../../src/simulator/index.js';
import { retryDelayMs, withinBudget } from '../../src/simulator/retry-schedule.js';
import { hmacBase64 } from '../helpers/signing.js';
import {
  BIZ,
  call,
  inbound,
  register,
  sleep,
  startReceiver,
  withSimulator,
  type Receiver,
  type Reply,
} from './helpers.js';

describe('retry schedule', () => {
  it('grows exponentially with bounded jitter, up to the cap', () => {
    const policy = { initialMs: 100, maxMs: 1000 };
    expect([1, 2, 3, 4, 5].map((n) => retryDelayMs(n, policy, { random: () => 0.5 }))).toEqual([
      100, 200, 400, 800, 1000,
    ]);
    for (const random of [() => 0, () => 0.999]) {
      const delays = [1, 2, 3, 4].map((n) => retryDelayMs(n, policy, { random }));
      expect(delays[0]).toBeGreaterThanOrEqual(90);
      expect(delays[0]).toBeLessThanOrEqual(110);
      for (let i = 1; i < delays.length; i += 1) expect(delays[i]!).toBeGreaterThan(delays[i - 1]!);
    }
  });
  it('waits at least as long as Retry-After asks, but never beyond the cap', () => {
    const policy = { initialMs: 100, maxMs: 5000 };
    expect(retryDelayMs(1, policy, { retryAfterMs: 3000, random: () => 0.5 })).toBe(3000);
    expect(retryDelayMs(1, policy, { retryAfterMs: 60_000, random: () => 0.5 })).toBe(5000);
    expect(retryDelayMs(3, policy, { retryAfterMs: 10, random: () => 0.5 })).toBe(400);
  });
  it('stops at the attempt budget or the time budget', () => {
    const budget = { maxAttempts: 3, maxRetryWindowMs: 1000 };
    expect(withinBudget(2, 0, 500, budget)).toBe(true);
    expect(withinBudget(3, 0, 500, budget)).toBe(false);
    expect(withinBudget(1, 0, 1001, budget)).toBe(false);
  });
});

describe('simulator: webhook delivery', () => {
  let sim: RunningSimulator | undefined;
  let receiver: Receiver | undefined;
  afterEach(async () => {
    await sim?.close();
    await receiver?.close();
    sim = undefined;
    receiver = undefined;
  });

  async function setup(reply: (index: number) => Reply, options: Partial<SimulatorOptions> = {}) {
    receiver = await startReceiver((_, index) => reply(index));
    sim = await withSimulator(options);
    await register(sim, 'messages', `${receiver.url}/hook`);
    return { sim, receiver };
  }

  const deliveryOf = async (s: RunningSimulator, eventId: string) => {
    const list = (await call<DeliveryRecord[]>(`${s.url}/sim/deliveries?eventId=${eventId}`)).body;
    expect(list).toHaveLength(1);
    return list[0]!;
  };

  it('retries a receiver answering 500 with growing waits until it answers 200; every attempt recorded and signed', async () => {
    const { sim, receiver } = await setup((i) => ({ status: i < 3 ? 500 : 200 }), {
      delivery: { backoffInitialMs: 100, backoffMaxMs: 2000, maxAttempts: 6 },
    });
    const { eventId } = (await inbound(sim, '+15550002222')).body as { eventId: string };
    await sim.idle();
    const requests = await receiver.waitFor(4);
    const bodies = new Set(requests.map((r) => r.body.toString('utf8')));
    expect(bodies.size).toBe(1);
    for (const r of requests) expect(r.headers['x-service-hmac-sha256']).toBe(hmacBase64(BIZ.signingSecret, r.body));

    const record = await deliveryOf(sim, eventId);
    expect(record).toMatchObject({
      state: 'delivered',
      topic: 'messages',
      businessId: BIZ.id,
      address: `${receiver.url}/hook`,
      duplicateOf: null,
    });
    expect(record.attempts.map((a) => [a.attempt, a.status, a.error])).toEqual([
      [1, 500, null],
      [2, 500, null],
      [3, 500, null],
      [4, 200, null],
    ]);
    for (const a of record.attempts) expect(a.latencyMs).toBeGreaterThanOrEqual(0);
    const started = record.attempts.map((a) => Date.parse(a.startedAt));
    const waits = started.slice(1).map((t, i) => t - started[i]!);
    // 100, 200, 400 ms ±10%: a loaded machine only ever adds to a wait, so lower bounds prove
    // the doubling without being fooled by scheduling noise.
    expect(waits[0]).toBeGreaterThanOrEqual(90);
    expect(waits[1]).toBeGreaterThanOrEqual(180);
    expect(waits[2]).toBeGreaterThanOrEqual(360);
    expect(record.body).toBe(requests[0]!.body.toString('utf8'));
  });

  it('acknowledges only a 200: other 2xx and 3xx answers are retried', async () => {
    const statuses = [201, 204, 302, 200];
    const { sim } = await setup((i) => ({ status: statuses[i] ?? 200 }));
    const { eventId } = (await inbound(sim, '+15550002222')).body as { eventId: string };
    await sim.idle();
    expect((await deliveryOf(sim, eventId)).attempts.map((a) => a.status)).toEqual(statuses);
  });

  it('gives up after the attempt budget and marks the delivery failed', async () => {
    const { sim, receiver } = await setup(() => ({ status: 503 }), {
      delivery: { maxAttempts: 3, backoffInitialMs: 10 },
    });
    const { eventId } = (await inbound(sim, '+15550002222')).body as { eventId: string };
    await sim.idle();
    await sleep(100);
    expect(receiver.requests).toHaveLength(3);
    const record = await deliveryOf(sim, eventId);
    expect(record.state).toBe('failed');
    expect(record.attempts.map((a) => a.status)).toEqual([503, 503, 503]);
    expect((await call<DeliveryRecord[]>(`${sim.url}/sim/deliveries?state=failed`)).body.map((d) => d.eventId)).toEqual(
      [eventId],
    );
  });

  it('gives up after the time budget, whatever attempts remain', async () => {
    const { sim } = await setup(() => ({ status: 500 }), {
      delivery: { maxAttempts: 50, backoffInitialMs: 20, backoffMaxMs: 1000, maxRetryWindowMs: 100 },
    });
    const { eventId } = (await inbound(sim, '+15550002222')).body as { eventId: string };
    await sim.idle();
    const record = await deliveryOf(sim, eventId);
    expect(record.state).toBe('failed');
    expect(record.attempts.length).toBeGreaterThanOrEqual(2);
    expect(record.attempts.length).toBeLessThan(6);
    const started = record.attempts.map((a) => Date.parse(a.startedAt));
    expect(started.at(-1)! - started[0]!).toBeLessThanOrEqual(100 + 20);
  });

  it('times out an attempt that gets no answer, and retries it', async () => {
    const { sim } = await setup((i) => (i === 0 ? 'hang' : { status: 200 }), { delivery: { timeoutMs: 150 } });
    const { eventId } = (await inbound(sim, '+15550002222')).body as { eventId: string };
    await sim.idle();
    const record = await deliveryOf(sim, eventId);
    expect(record.state).toBe('delivered');
    expect(record.attempts[0]).toMatchObject({ status: null, error: 'timeout after 150 ms' });
    expect(record.attempts[0]!.latencyMs).toBeGreaterThanOrEqual(145);
    expect(record.attempts.at(-1)).toMatchObject({ status: 200, error: null });
  });

  it('records a refused connection as an error and retries', async () => {
    const port = await freePort();
    sim = await withSimulator({ delivery: { maxAttempts: 2 } });
    await register(sim, 'messages', `http://127.0.0.1:${port}/nobody`);
    const { eventId } = (await inbound(sim, '+15550002222')).body as { eventId: string };
    await sim.idle();
    const record = await deliveryOf(sim, eventId);
    expect(record.state).toBe('failed');
    expect(record.attempts).toHaveLength(2);
    for (const a of record.attempts) {
      expect(a.status).toBeNull();
      expect(a.error).toContain('ECONNREFUSED');
    }
  });

  it('filters the deliveries it lists, and clears them', async () => {
    const { sim } = await setup(() => ({ status: 200 }));
    await register(sim, 'delivery_status', `${receiver!.url}/status`);
    await inbound(sim, '+15550002222');
    const { id } = (
      await call<{ id: string }>(`${sim.url}/v1/businesses/${BIZ.id}/send/messages`, {
        headers: { 'content-type': 'application/json', 'x-api-key': BIZ.apiKey },
        body: { recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hi' } },
      })
    ).body;
    await sim.idle();
    const forMessage = (await call<DeliveryRecord[]>(`${sim.url}/sim/deliveries?messageId=${id}`)).body;
    expect(forMessage.map((d) => d.status)).toEqual(['sent', 'delivered', 'read']);
    expect(forMessage.every((d) => d.topic === 'delivery_status' && d.state === 'delivered')).toBe(true);
    expect((await call<DeliveryRecord[]>(`${sim.url}/sim/deliveries?topic=messages`)).body).toHaveLength(1);
    expect((await call<DeliveryRecord[]>(`${sim.url}/sim/deliveries?limit=2`)).body.map((d) => d.status)).toEqual([
      'delivered',
      'read',
    ]);
    expect((await call(`${sim.url}/sim/deliveries?limit=x`)).status).toBe(400);
    expect((await call(`${sim.url}/sim/deliveries`, { method: 'DELETE' })).status).toBe(200);
    expect((await call<DeliveryRecord[]>(`${sim.url}/sim/deliveries`)).body).toEqual([]);
  });

  it('bounds the deliveries in progress: over queueMax they are dropped and recorded as such', async () => {
    const { sim, receiver } = await setup(() => ({ status: 200 }), {
      delivery: { queueMax: 2 },
      faults: { deliveryDelayMs: 50 },
    });
    for (let i = 0; i < 4; i += 1) await inbound(sim, `+1555000200${i}`);
    await sim.idle();
    const states = (await call<DeliveryRecord[]>(`${sim.url}/sim/deliveries`)).body.map((d) => d.state);
    expect(states).toEqual(['delivered', 'delivered', 'dropped', 'dropped']);
    expect(receiver.requests).toHaveLength(2);
  });

  it('close() cancels pending retries: nothing is sent afterwards', async () => {
    const { sim: running, receiver } = await setup(() => ({ status: 500 }), {
      delivery: { backoffInitialMs: 100, maxAttempts: 10 },
    });
    await inbound(running, '+15550002222');
    await receiver.waitFor(1);
    await running.close();
    const [record] = running.deliveries();
    expect(record!.state).toBe('cancelled');
    await sleep(250);
    expect(receiver.requests).toHaveLength(1);
  });
});

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
