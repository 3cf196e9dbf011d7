import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { providerErrorSchema } from '../../src/contracts/index.js';
import { NO_FAULTS, type DeliveryRecord, type RunningSimulator, type SendRecord } from '../../src/simulator/index.js';
import { hmacBase64 } from '../helpers/signing.js';
import {
  BIZ,
  call,
  inbound,
  register,
  sendText,
  sleep,
  startReceiver,
  withSimulator,
  type Receiver,
} from './helpers.js';

describe('simulator: /sim/faults', () => {
  let sim: RunningSimulator;
  beforeAll(async () => {
    sim = await withSimulator();
  });
  afterAll(() => sim.close());

  it('starts with no faults, merges partial updates, and resets', async () => {
    expect((await call(`${sim.url}/sim/faults`)).body).toEqual(NO_FAULTS);
    const first = await call(`${sim.url}/sim/faults`, {
      method: 'PUT',
      body: { send429Rate: 0.25, send429RetryAfterSeconds: null },
    });
    expect(first.status).toBe(200);
    expect(first.body).toEqual({ ...NO_FAULTS, send429Rate: 0.25, send429RetryAfterSeconds: null });
    const second = await call(`${sim.url}/sim/faults`, {
      method: 'PUT',
      body: { sendLatencyMs: { min: 1, max: 2 }, reorderDeliveries: true },
    });
    expect(second.body).toEqual({
      ...NO_FAULTS,
      send429Rate: 0.25,
      send429RetryAfterSeconds: null,
      sendLatencyMs: { min: 1, max: 2 },
      reorderDeliveries: true,
    });
    expect((await call(`${sim.url}/sim/faults`)).body).toEqual(second.body);
    const reset = await call(`${sim.url}/sim/faults`, { method: 'DELETE' });
    expect(reset.body).toEqual(NO_FAULTS);
    expect((await call(`${sim.url}/sim/faults`)).body).toEqual(NO_FAULTS);
  });

  it.each([
    [{ send429Rate: 1.5 }, 'send429Rate'],
    [{ send5xxRate: -0.1 }, 'send5xxRate'],
    [{ duplicateDeliveryRate: 'half' }, 'duplicateDeliveryRate'],
    [{ sendLatencyMs: { min: 10, max: 5 } }, 'sendLatencyMs'],
    [{ sendLatencyMs: { min: 10 } }, 'sendLatencyMs.max'],
    [{ send429RetryAfterSeconds: 1.5 }, 'send429RetryAfterSeconds'],
    [{ reorderDeliveries: 'yes' }, 'reorderDeliveries'],
    [{ deliveryDelayMs: -1 }, 'deliveryDelayMs'],
    [{ badSignatureRate: 2 }, 'badSignatureRate'],
    [{ sendLatencyMS: { min: 0, max: 0 } }, 'sendLatencyMS'],
  ])('refuses %j with 400 naming %s, changing nothing', async (body, field) => {
    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { send5xxRate: 0.1 } });
    const answer = await call<{ message: string; issues: { path: string }[] }>(`${sim.url}/sim/faults`, {
      method: 'PUT',
      body,
    });
    expect(answer.status).toBe(400);
    expect(answer.body.message).toContain(field);
    expect((await call(`${sim.url}/sim/faults`)).body).toEqual({ ...NO_FAULTS, send5xxRate: 0.1 });
    await call(`${sim.url}/sim/faults`, { method: 'DELETE' });
  });

  it('refuses a body that is not a JSON object', async () => {
    for (const rawBody of ['{', '[]', '3']) {
      const answer = await call(`${sim.url}/sim/faults`, { method: 'PUT', rawBody });
      expect(answer.status, rawBody).toBe(400);
    }
  });
});

describe('simulator: send faults', () => {
  let sim: RunningSimulator;
  beforeAll(async () => {
    sim = await withSimulator();
    await inbound(sim, '+15550002222');
  });
  afterAll(() => sim.close());
  afterEach(async () => {
    await call(`${sim.url}/sim/faults`, { method: 'DELETE' });
    await call(`${sim.url}/sim/sends`, { method: 'DELETE' });
  });

  const sends = async () => (await call<SendRecord[]>(`${sim.url}/sim/sends`)).body;

  it('adds latency to the send endpoints', async () => {
    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { sendLatencyMs: { min: 80, max: 100 } } });
    const started = performance.now();
    const answer = await sendText(sim, '+15550002222');
    expect(answer.status).toBe(200);
    expect(performance.now() - started).toBeGreaterThanOrEqual(75);
    expect((await sends()).at(-1)).toMatchObject({ status: 200 });
  });

  it('answers 429 with Retry-After, or without it when asked, and creates nothing', async () => {
    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { send429Rate: 1, send429RetryAfterSeconds: 7 } });
    const limited = await sendText(sim, '+15550002222');
    expect(limited.status).toBe(429);
    expect(limited.headers.get('retry-after')).toBe('7');
    expect(providerErrorSchema.parse(limited.body)).toMatchObject({
      code: 'ERROR_CODE_BUSINESS_REACHED_LIMITS',
      type: 'ERROR_TYPE_RESOURCE_EXHAUSTED',
    });

    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { send429RetryAfterSeconds: null } });
    const bare = await sendText(sim, '+15550002222');
    expect(bare.status).toBe(429);
    expect(bare.headers.has('retry-after')).toBe(false);

    const recorded = await sends();
    expect(recorded.map((s) => [s.status, s.messageId, s.errorCode])).toEqual([
      [429, null, 'ERROR_CODE_BUSINESS_REACHED_LIMITS'],
      [429, null, 'ERROR_CODE_BUSINESS_REACHED_LIMITS'],
    ]);
    expect(recorded[0]!.body).toMatchObject({ message: { text: 'hello' } });
  });

  it('answers 5xx in the error shape', async () => {
    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { send5xxRate: 1 } });
    for (let i = 0; i < 12; i += 1) {
      const answer = await sendText(sim, '+15550002222');
      expect([500, 502, 503, 504]).toContain(answer.status);
      providerErrorSchema.parse(answer.body);
    }
    expect((await sends()).every((s) => s.status >= 500 && s.messageId === null)).toBe(true);
  });

  it('applies a fault rate to about that share of the calls', async () => {
    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { send429Rate: 0.5 } });
    const statuses = await Promise.all(
      Array.from({ length: 200 }, async () => (await sendText(sim, '+15550002222')).status),
    );
    const limited = statuses.filter((s) => s === 429).length;
    expect(limited).toBeGreaterThan(60);
    expect(limited).toBeLessThan(140);
    expect(statuses.filter((s) => s === 200).length).toBe(200 - limited);
  });

  it('enforces a per-business rate limit when one is set', async () => {
    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { sendRateLimitPerSecond: 5 } });
    const answers = await Promise.all(Array.from({ length: 12 }, () => sendText(sim, '+15550002222')));
    const ok = answers.filter((a) => a.status === 200).length;
    expect(ok).toBeGreaterThanOrEqual(5);
    expect(ok).toBeLessThanOrEqual(7);
    const limited = answers.filter((a) => a.status === 429);
    expect(limited.length).toBe(12 - ok);
    expect(limited[0]!.headers.get('retry-after')).toBe('1');
  });

  it('checks the API key before injecting send faults', async () => {
    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { send5xxRate: 1 } });
    const answer = await call(`${sim.url}/v1/businesses/${BIZ.id}/send/messages`, {
      headers: { 'content-type': 'application/json', 'x-api-key': 'wrong' },
      body: {},
    });
    expect(answer.status).toBe(401);
  });
});

describe('simulator: delivery faults', () => {
  let sim: RunningSimulator;
  let receiver: Receiver;
  beforeAll(async () => {
    // The receiver checks signatures the way an ingress does: 403 on a mismatch.
    receiver = await startReceiver((request) => ({
      status: request.headers['x-service-hmac-sha256'] === hmacBase64(BIZ.signingSecret, request.body) ? 200 : 403,
    }));
    // The reorder window holds the four inbound calls of its test: 60 ms was too short for them on a loaded machine.
    sim = await withSimulator({ delivery: { backoffInitialMs: 40, reorderWindowMs: 1000, maxAttempts: 8 } });
    await register(sim, 'messages', `${receiver.url}/hook`);
  });
  afterAll(async () => {
    await sim.close();
    await receiver.close();
  });
  afterEach(async () => {
    await call(`${sim.url}/sim/faults`, { method: 'DELETE' });
    await sim.idle();
    receiver.requests.length = 0;
    await call(`${sim.url}/sim/deliveries`, { method: 'DELETE' });
  });

  const texts = () => receiver.events().map((e) => (e.message as { text: string }).text);

  it('delivers an acknowledged event again (duplicate fault), byte for byte', async () => {
    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { duplicateDeliveryRate: 1 } });
    const { eventId } = (await inbound(sim, '+15550002222', 'twice')).body as { eventId: string };
    await sim.idle();
    const [first, second] = await receiver.waitFor(2);
    expect(second!.body.equals(first!.body)).toBe(true);
    expect(second!.headers['x-service-hmac-sha256']).toBe(hmacBase64(BIZ.signingSecret, second!.body));
    const records = (await call<DeliveryRecord[]>(`${sim.url}/sim/deliveries?eventId=${eventId}`)).body;
    expect(records).toHaveLength(2);
    expect(records[1]!.duplicateOf).toBe(records[0]!.id);
    expect(records.every((r) => r.state === 'delivered')).toBe(true);
    await sleep(50);
    expect(receiver.requests).toHaveLength(2);
  });

  it('sends deliveries in reverse order (reorder fault)', async () => {
    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { reorderDeliveries: true } });
    for (const text of ['one', 'two', 'three', 'four']) await inbound(sim, '+15550002222', text);
    await sim.idle();
    await receiver.waitFor(4);
    expect(texts()).toEqual(['four', 'three', 'two', 'one']);

    await call(`${sim.url}/sim/faults`, { method: 'DELETE' });
    receiver.requests.length = 0;
    for (const text of ['a', 'b']) await inbound(sim, '+15550002222', text);
    await sim.idle();
    expect(texts()).toEqual(['a', 'b']);
  });

  it('holds deliveries back (delay fault)', async () => {
    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { deliveryDelayMs: 150 } });
    const injected = Date.now();
    const { eventId } = (await inbound(sim, '+15550002222', 'later')).body as { eventId: string };
    const [record] = (await call<DeliveryRecord[]>(`${sim.url}/sim/deliveries?eventId=${eventId}`)).body;
    expect(record).toMatchObject({ state: 'scheduled', attempts: [] });
    expect(Date.parse(record!.nextAttemptAt!)).toBeGreaterThanOrEqual(injected + 140);
    const [request] = await receiver.waitFor(1);
    expect(request!.at - injected).toBeGreaterThanOrEqual(145);
  });

  it('signs with a wrong secret (bad signature fault): refused, recorded, retried', async () => {
    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { badSignatureRate: 1 } });
    const { eventId } = (await inbound(sim, '+15550002222', 'forged?')).body as { eventId: string };
    const [first] = await receiver.waitFor(1);
    const signature = first!.headers['x-service-hmac-sha256'] as string;
    expect(signature).toMatch(/^[A-Za-z0-9+/]{43}=$/);
    expect(signature).not.toBe(hmacBase64(BIZ.signingSecret, first!.body));

    await call(`${sim.url}/sim/faults`, { method: 'PUT', body: { badSignatureRate: 0 } });
    await sim.idle();
    const [record] = (await call<DeliveryRecord[]>(`${sim.url}/sim/deliveries?eventId=${eventId}`)).body;
    expect(record!.state).toBe('delivered');
    expect(record!.attempts[0]).toMatchObject({ status: 403, badSignature: true });
    expect(record!.attempts.at(-1)).toMatchObject({ status: 200, badSignature: false });
  });
});
