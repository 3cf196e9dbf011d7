import { describe, expect, it } from 'vitest';
import type { HttpResponse } from 'uWebSockets.js';
import { MsgbridgeError, type ErrorCode } from '../../src/platform/errors.js';
import { Exchanges, type Exchange } from '../../src/ingress/exchanges.js';
import type { Refusable, Responder } from '../../src/ingress/responder.js';
import { silentLogger } from '../../src/platform/logger.js';

/** A responder that records refusals, and responses that record being closed. */
function setup(
  options: { budget?: number; held?: number; admission?: MsgbridgeError; perAddress?: number; maxBody?: number } = {},
) {
  const refusals: { code: ErrorCode; reason: string; close: boolean }[] = [];
  const responder = {
    refuse: (ex: Refusable, code: ErrorCode, reason: string, _message: string, extra: { close?: boolean } = {}) => {
      ex.answered = true;
      refusals.push({ code, reason, close: extra.close === true });
    },
  } as unknown as Responder;
  let held = options.held ?? 0;
  const exchanges = new Exchanges({
    publisher: { admission: () => options.admission, heldBytes: () => held },
    memoryBudgetBytes: options.budget ?? 1000,
    receiving: { maxTotal: 100, maxPerAddress: options.perAddress ?? 10, graceMs: 0 },
    bodyTimeoutMs: 60_000,
    maxBodyBytes: options.maxBody ?? 500,
    responder,
    logger: silentLogger,
    addressOf: (res) => (res as unknown as { address: string }).address,
  });
  let n = 0;
  const exchange = (address = '10.0.0.1'): Exchange & { closed: () => boolean } => {
    let closed = false;
    const res = { address, close: () => (closed = true) } as unknown as HttpResponse;
    return {
      res,
      businessId: 'b',
      pathTopic: 'messages',
      signature: '',
      contentType: '',
      contentEncoding: '',
      traceparent: '',
      receivedAt: 0,
      startedAt: performance.now() - ++n,
      chunks: undefined,
      received: 0,
      aborted: false,
      answered: false,
      active: false,
      closed: () => closed,
    };
  };
  return { exchanges, refusals, exchange, setHeld: (bytes: number) => (held = bytes) };
}

const bytes = (n: number) => new Uint8Array(n).buffer;

describe('Exchanges (admission, body, budget)', () => {
  it('admits, assembles a body from pieces, and counts it in flight until finished', async () => {
    const { exchanges, exchange } = setup();
    const ex = exchange();
    expect(exchanges.admit(ex)).toBe(true);
    expect(exchanges.inFlight).toBe(1);
    expect(exchanges.receive(ex, new TextEncoder().encode('ab').buffer, false)).toBeUndefined();
    expect(exchanges.receive(ex, new TextEncoder().encode('cd').buffer, true)?.toString()).toBe('abcd');
    let idle = false;
    void exchanges.whenIdle().then(() => (idle = true));
    exchanges.finish(ex);
    exchanges.finish(ex);
    await Promise.resolve();
    expect(idle).toBe(true);
    expect(exchanges.inFlight).toBe(0);
    exchanges.close();
  });

  it('charges bytes as they arrive: a declared length reserves nothing; the body that passes the budget is cut short', () => {
    const { exchanges, exchange, refusals } = setup({ budget: 1000, maxBody: 1000 });
    const slow = exchange();
    const other = exchange();
    expect(exchanges.admit(slow)).toBe(true);
    expect(exchanges.admit(other)).toBe(true);
    exchanges.receive(slow, bytes(400), false);
    expect(exchanges.hasRoom()).toBe(true);
    exchanges.receive(other, bytes(400), false);
    expect(exchanges.receive(other, bytes(300), false)).toBeUndefined();
    expect(refusals).toEqual([{ code: 'QUEUE_FULL', reason: 'memory-budget', close: true }]);
    // The one cut short no longer counts; the first goes on.
    expect(exchanges.inFlight).toBe(1);
    expect(exchanges.receive(slow, bytes(50), true)?.length).toBe(450);
    exchanges.close();
  });

  it('refuses at admission: draining, Kafka refusing, budget spent, no room among bodies in progress', () => {
    const busy = setup({ admission: new MsgbridgeError('KAFKA_UNAVAILABLE', 'down') });
    expect(busy.exchanges.admit(busy.exchange())).toBe(false);
    expect(busy.refusals[0]).toMatchObject({ code: 'KAFKA_UNAVAILABLE' });

    const full = setup({ held: 1000 });
    expect(full.exchanges.hasRoom()).toBe(false);
    expect(full.exchanges.admit(full.exchange())).toBe(false);
    expect(full.refusals[0]).toMatchObject({ code: 'QUEUE_FULL', reason: 'memory-budget' });
    full.setHeld(0);
    expect(full.exchanges.admit(full.exchange())).toBe(true);

    const draining = setup();
    draining.exchanges.stopAccepting();
    expect(draining.exchanges.admit(draining.exchange())).toBe(false);
    expect(draining.refusals[0]).toMatchObject({ code: 'SHUTTING_DOWN', close: true });
    for (const s of [busy, full, draining]) s.exchanges.close();
  });

  it("at the per-address bound, closes that address's slowest body to make room", () => {
    const { exchanges, exchange } = setup({ perAddress: 2 });
    const idle = exchange('10.0.0.9');
    const moving = exchange('10.0.0.9');
    exchanges.admit(idle);
    exchanges.admit(moving);
    exchanges.receive(moving, bytes(100), false);
    const next = exchange('10.0.0.9');
    expect(exchanges.admit(next)).toBe(true);
    expect(idle.closed()).toBe(true);
    expect(moving.closed()).toBe(false);
    exchanges.close();
  });

  it('refuses a body past maxBodyBytes as it arrives (no length declared)', () => {
    const { exchanges, exchange, refusals } = setup({ maxBody: 100 });
    const ex = exchange();
    exchanges.admit(ex);
    expect(exchanges.receive(ex, bytes(101), false)).toBeUndefined();
    expect(refusals).toEqual([{ code: 'BODY_TOO_LARGE', reason: 'body-too-large', close: true }]);
    exchanges.close();
  });
});
