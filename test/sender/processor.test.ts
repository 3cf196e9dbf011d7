import { describe, expect, it } from 'vitest';
import { RecordTooLargeError, type RecordToWrite } from '../../src/kafka/port.js';
import { CircuitBreaker } from '../../src/sender/circuit-breaker.js';
import { RateLimiter } from '../../src/sender/rate-limiter.js';
import { Semaphore } from '../../src/sender/semaphore.js';
import pino from 'pino';
import { silentLogger } from '../../src/platform/logger.js';
import type { WorkContext } from '../../src/sender/keyed-runner.js';
import { noopSenderMetrics } from '../../src/sender/metrics.js';
import { memoryLedger } from './memory-ledger.js';
import { ledgerKey } from '../../src/sender/ledger-records.js';
import { createProcessor, type ProcessorOptions } from '../../src/sender/processor.js';
import { prepareJob, type Job } from '../../src/sender/requests.js';
import type { AttemptOutcome } from '../../src/sender/retry-policy.js';

function job(requestId: string, text = 'hi', extra: Record<string, unknown> = {}, producedAt = Date.now()): Job {
  const value = {
    requestId,
    type: 'text',
    recipient: { channelType: 'whatsapp', id: '+15550002222' },
    message: { text },
    ...extra,
  };
  return prepareJob(
    { topic: 't', partition: 0, offset: '0', key: null, value: Buffer.from(JSON.stringify(value)), headers: {} },
    new Map([['biz', 'key']]),
    {
      receivedAt: Date.now(),
      producedAt,
      maxRequestAgeMs: 86_400_000,
    },
  );
}

const dropped = {
  kind: 'network',
  code: 'UND_ERR_SOCKET',
  message: 'other side closed',
  requestWritten: true,
} as const;
const refused = { kind: 'network', code: 'ECONNREFUSED', message: 'refused', requestWritten: false } as const;

/** A record's context: `offset` tells a resubmission (another record) from the same record read again. */
function context(offset = 0): WorkContext & { stopNow: () => void; abortNow: () => void } {
  const stop = new AbortController();
  const abort = new AbortController();
  return {
    partition: '0',
    offset,
    stop: stop.signal,
    abort: abort.signal,
    releaseKey: () => undefined,
    stopNow: () => stop.abort(),
    abortNow: () => abort.abort(),
  };
}

/** A provider whose answers the test scripts; each call waits for `release()` when `gated`. */
function harness(answers: AttemptOutcome[], overrides: Partial<ProcessorOptions> = {}, ledger = memoryLedger()) {
  const calls: unknown[] = [];
  const published: { topic: string; record: RecordToWrite }[] = [];
  const slowedDown: string[] = [];
  let gate: (() => void) | undefined;
  let gated = false;
  let concurrent = 0;
  let maxConcurrent = 0;
  const processor = createProcessor({
    client: {
      send: async (_op, _biz, apiKey, body) => {
        expect(apiKey).toBe('key');
        calls.push(body);
        concurrent += 1;
        maxConcurrent = Math.max(maxConcurrent, concurrent);
        try {
          if (gated) await new Promise<void>((r) => (gate = r));
          else await tick();
          return answers.shift() ?? { kind: 'accepted', status: 200, messageId: `m${calls.length}` };
        } finally {
          concurrent -= 1;
        }
      },
    },
    publish: async (topic, record) => {
      published.push({ topic, record });
    },
    limiter: { acquire: async () => undefined, slowDown: (key) => void slowedDown.push(key) },
    circuits: new CircuitBreaker({ failureThreshold: 1000, probeInitialMs: 5, probeMaxMs: 10 }),
    callSlots: new Semaphore(64),
    apiKeys: new Map([['biz', 'key']]),
    topics: { results: 'results', dlq: 'dlq' },
    policy: { budgetMs: 60_000, backoffInitialMs: 5, backoffMaxMs: 10 },
    retryMaybeSent: true,
    dlqMaxBytes: 1_000_000,
    ledger: ledger.port,
    metrics: noopSenderMetrics,
    logger: silentLogger,
    random: () => 0.5,
    ...overrides,
  });
  return {
    processor,
    ledger,
    calls,
    published,
    slowedDown,
    maxConcurrent: () => maxConcurrent,
    gate: () => (gated = true),
    release: () => gate?.(),
    results: () =>
      published
        .filter((p) => p.topic === 'results')
        .map((p) => JSON.parse(p.record.value.toString()) as Record<string, unknown>),
  };
}

const tick = () => new Promise((r) => setTimeout(r, 1));

/**
 * r-a calling (held), r-b with its `calling` record waiting for the one unrecorded slot r-a
 * holds, and a rejoin whose pause ran out with both unrecorded.
 */
async function waitingAcrossRejoin() {
  const h = harness([], { unrecordedSlots: new Semaphore(1) });
  h.gate();
  const first = h.processor.work(job('r-a'), context(0));
  await expect.poll(() => h.calls.length).toBe(1);
  const second = h.processor.work(job('r-b'), context(1));
  await expect.poll(() => h.ledger.entries.get(ledgerKey('biz', 'r-b'))?.state).toBe('calling');
  expect(await h.processor.pauseCalls(30)).toBe(false);
  return { h, first, second };
}

describe('processor', () => {
  it('a call holds one of unrecordedSlots until its outcome is in the ledger: no more calls while outcomes wait', async () => {
    // The ledger's `done` records wait until the test lets them through (Kafka slow to take them).
    const heldDone: (() => void)[] = [];
    const h = harness([], {
      unrecordedSlots: new Semaphore(2),
      publish: (topic, record) =>
        topic === 'ledger' && String(record.value).includes('"done"')
          ? new Promise<void>((resolve) => heldDone.push(resolve))
          : Promise.resolve(),
    });
    const keys = ['a', 'b', 'c', 'd'];
    const work = keys.map((k, i) => h.processor.work(job(`r-${k}`), context(i)));
    await expect.poll(() => heldDone.length).toBe(2);
    await new Promise((r) => setTimeout(r, 30));
    // Two calls made, answered, their outcomes unrecorded: the other two wait, uncalled.
    expect(h.calls).toHaveLength(2);
    // Each outcome recorded lets one more call start.
    heldDone.shift()!();
    await expect.poll(() => h.calls.length).toBe(3);
    await expect.poll(() => heldDone.length).toBe(2);
    heldDone.splice(0).forEach((release) => release());
    await expect.poll(() => heldDone.length).toBe(1);
    heldDone.splice(0).forEach((release) => release());
    expect(await Promise.all(work)).toEqual(['done', 'done', 'done', 'done']);
    expect(h.calls).toHaveLength(4);
  });

  it('retries transient failures and publishes the accepted result', async () => {
    const h = harness([refused, { kind: 'http-error', status: 503 }]);
    expect(await h.processor.work(job('r1'), context())).toBe('done');
    expect(h.calls).toHaveLength(3);
    expect(h.results()).toEqual([
      expect.objectContaining({ requestId: 'r1', outcome: 'accepted', attempts: 3, messageId: 'm3', maybeSent: false }),
    ]);
  });

  it('publishes a DLQ job to the DLQ topic, with its rejected result when the request id is readable', async () => {
    const h = harness([]);
    const prepare = (value: string) =>
      prepareJob(
        { topic: 't', partition: 0, offset: '5', key: null, value: Buffer.from(value), headers: {} },
        new Map([['biz', 'key']]),
        { receivedAt: 1, maxRequestAgeMs: 1000 },
      );
    expect(await h.processor.work(prepare('nope'), context())).toBe('done');
    expect(h.published.map((p) => p.topic)).toEqual(['dlq']);
    expect(
      await h.processor.work(
        prepare(
          JSON.stringify({
            requestId: 'r-dlq',
            businessId: 'other',
            type: 'text',
            recipient: { channelType: 'whatsapp', id: '+15550002222' },
            message: { text: 'hi' },
          }),
        ),
        context(),
      ),
    ).toBe('done');
    expect(h.published.map((p) => p.topic)).toEqual(['dlq', 'dlq', 'results']);
    expect(h.results()).toEqual([
      expect.objectContaining({
        requestId: 'r-dlq',
        outcome: 'rejected',
        attempts: 0,
        maybeSent: false,
        error: expect.objectContaining({ code: 'RELAY_UNKNOWN_BUSINESS' }),
      }),
    ]);
    expect(h.calls).toHaveLength(0);
  });

  it('replaces a DLQ copy the topic refuses as too large by a reference, instead of retrying it for ever', async () => {
    const published: RecordToWrite[] = [];
    const h = harness([], {
      publish: async (_topic, record) => {
        if (record.value.length > 1000)
          throw new Error('batch failed', { cause: new RecordTooLargeError('too large') });
        published.push(record);
      },
    });
    const value = JSON.stringify({ requestId: 'r-big', type: 'text', padding: 'x'.repeat(5000) });
    const big = prepareJob(
      { topic: 't', partition: 1, offset: '7', key: null, value: Buffer.from(value), headers: {} },
      new Map([['biz', 'key']]),
      { receivedAt: 1, maxRequestAgeMs: 1000 },
    );
    expect(await h.processor.work(big, context())).toBe('done');
    const dlq = published.find((r) => r.headers['dlq-value'] === 'reference')!;
    expect(JSON.parse(dlq.value.toString())).toMatchObject({
      truncated: true,
      originalBytes: value.length,
      sourcePartition: 1,
      sourceOffset: '7',
    });
  });

  it('says maybeSent when an attempt was written without an answer, and resends only when configured to', async () => {
    const h = harness([dropped]);
    await h.processor.work(job('r1'), context());
    expect(h.calls).toHaveLength(2);
    expect(h.results()).toEqual([expect.objectContaining({ outcome: 'accepted', attempts: 2, maybeSent: true })]);

    const atMostOnce = harness([dropped], { retryMaybeSent: false });
    await atMostOnce.processor.work(job('r1'), context());
    expect(atMostOnce.calls).toHaveLength(1);
    expect(atMostOnce.results()).toEqual([
      expect.objectContaining({
        outcome: 'rejected',
        attempts: 1,
        maybeSent: true,
        error: expect.objectContaining({ code: 'RELAY_NETWORK_ERROR', retriable: false, maybeSent: true }),
      }),
    ]);
    // A connection refused never reached the provider: resent whatever the setting.
    const refusedOnce = harness([refused], { retryMaybeSent: false });
    await refusedOnce.processor.work(job('r1'), context());
    expect(refusedOnce.results()).toEqual([
      expect.objectContaining({ outcome: 'accepted', attempts: 2, maybeSent: false }),
    ]);
  });

  it('rejects as retriable once the time budget is spent, and does not remember it: a resubmission is sent', async () => {
    const failures = Array.from({ length: 1000 }, () => ({ kind: 'http-error', status: 503 }) as const);
    // The budget runs on a clock of the calls made (25 ms each), not on the machine's speed.
    let made: unknown[] = [];
    const h = harness(failures, {
      policy: { budgetMs: 60, backoffInitialMs: 5, backoffMaxMs: 10 },
      now: () => made.length * 25,
    });
    made = h.calls;
    await h.processor.work(job('r1'), context());
    const [rejected] = h.results();
    expect(rejected).toMatchObject({
      outcome: 'rejected',
      maybeSent: false,
      error: { retriable: true, httpStatus: 503 },
    });
    expect(rejected!.attempts as number).toBeGreaterThan(2);
    failures.length = 0;
    const before = h.calls.length;
    await h.processor.work(job('r1'), context(1));
    expect(h.calls.length).toBe(before + 1);
    expect(h.results()[1]).toMatchObject({ outcome: 'accepted' });
    // A permanent rejection is remembered: a resubmission gets the same result, unsent.
    const levels: string[] = [];
    const capture = pino(
      { level: 'debug' },
      {
        write: (line: string) =>
          void levels.push(`${pino.levels.labels[JSON.parse(line).level as number]} ${JSON.parse(line).msg as string}`),
      },
    );
    const permanent = harness([{ kind: 'http-error', status: 400 }], { logger: capture });
    await permanent.processor.work(job('r2'), context());
    await permanent.processor.work(job('r2'), context(1));
    expect(permanent.calls).toHaveLength(1);
    expect(permanent.results().map((r) => r.outcome)).toEqual(['rejected', 'rejected']);
    // An ordinary outcome: info, not warn (a rejection that may have sent the message is a warning).
    expect(levels).toContain('info send rejected');
    expect(levels.filter((l) => l.startsWith('warn'))).toEqual([]);
  });

  it('never sends an expired request: before the first attempt and between retries', async () => {
    const h = harness([]);
    await h.processor.work(job('old', 'hi', {}, Date.now() - 86_400_001), context());
    await h.processor.work(job('past', 'hi', { expiresAt: new Date(Date.now() - 1).toISOString() }), context());
    expect(h.calls).toHaveLength(0);
    expect(h.results()).toEqual([
      expect.objectContaining({
        requestId: 'old',
        outcome: 'expired',
        attempts: 0,
        maybeSent: false,
        expiredBy: 'maxRequestAgeMs',
      }),
      expect.objectContaining({ requestId: 'past', outcome: 'expired', attempts: 0, expiredBy: 'expiresAt' }),
    ]);
    const retrying = harness(Array.from({ length: 1000 }, () => dropped));
    await retrying.processor.work(job('soon', 'hi', { ttlMs: 80 }), context());
    const [expired] = retrying.results();
    expect(expired).toMatchObject({ requestId: 'soon', outcome: 'expired', maybeSent: true, expiredBy: 'ttlMs' });
    expect(expired!.attempts as number).toBeGreaterThan(0);
  });

  it('lowers the business rate on a 429', async () => {
    const h = harness([{ kind: 'http-error', status: 429 }]);
    await h.processor.work(job('r1'), context());
    expect(h.slowedDown).toEqual(['biz']);
    expect(h.results()).toEqual([expect.objectContaining({ outcome: 'accepted', attempts: 2 })]);
  });

  it('with the circuit open, sends one probe at a time while many requests wait', async () => {
    const answers = Array.from({ length: 12 }, () => refused);
    const h = harness(answers, {
      circuits: new CircuitBreaker({ failureThreshold: 3, probeInitialMs: 5, probeMaxMs: 10 }),
    });
    const all = await Promise.all(Array.from({ length: 20 }, (_, i) => h.processor.work(job(`r${i}`), context())));
    expect(all.every((o) => o === 'done')).toBe(true);
    expect(h.results().every((r) => r.outcome === 'accepted')).toBe(true);
    // 3 failures opened it (up to 20 calls were already in flight); afterwards every failed call was a lone probe.
    expect(h.calls.length).toBe(20 + 12);
  });

  it('never sends a completed requestId again: the stored result is published once more, without its content', async () => {
    const h = harness([]);
    await h.processor.work(job('r1'), context());
    await h.processor.work(job('r1', 'different text, same id'), context(1));
    expect(h.calls).toHaveLength(1);
    const [first, second] = h.published.filter((p) => p.topic === 'results');
    const { content, ...rest } = JSON.parse(first!.record.value.toString()) as Record<string, unknown>;
    expect(content).toEqual({ text: 'hi' });
    expect(JSON.parse(second!.record.value.toString())).toEqual(rest);
    expect(second!.record.headers['event-id']).toBe(first!.record.headers['event-id']);
  });

  it('a duplicate arriving while the first is in flight waits for it instead of sending', async () => {
    const h = harness([]);
    h.gate();
    const first = h.processor.work(job('r1'), context());
    await tick();
    const second = h.processor.work(job('r1'), context());
    await tick();
    expect(h.calls).toHaveLength(1);
    h.release();
    expect(await first).toBe('done');
    expect(await second).toBe('done');
    expect(h.calls).toHaveLength(1);
    expect(h.results()).toHaveLength(2);
  });

  it('told to stop: abandons a request waiting to retry, but publishes one whose call succeeds', async () => {
    const slow = harness([{ kind: 'http-error', status: 500 }], {
      policy: { budgetMs: 600_000, backoffInitialMs: 60_000, backoffMaxMs: 60_000 },
    });
    const ctx = context();
    const pending = slow.processor.work(job('r1'), ctx);
    await tick();
    ctx.stopNow();
    expect(await pending).toBe('abandoned');
    expect(slow.results()).toHaveLength(0);
    // It called once: the next owner learns how far it got instead of waiting for the call's deadline.
    expect(slow.ledger.written.map((e) => e.state)).toEqual(['calling', 'released']);
    expect(slow.ledger.written[1]).toMatchObject({ attempts: 1, maybeSent: false });

    const h = harness([]);
    h.gate();
    const ctx2 = context();
    const inCall = h.processor.work(job('r2'), ctx2);
    await tick();
    ctx2.stopNow();
    h.release();
    expect(await inCall).toBe('done');
    expect(h.results()).toEqual([expect.objectContaining({ requestId: 'r2', outcome: 'accepted' })]);
  });

  it('retries publishing until Kafka takes it, and gives up only at the hard deadline', async () => {
    let failures = 2;
    const published: { topic: string; record: RecordToWrite }[] = [];
    const h = harness([], {
      publish: async (topic, record) => {
        if (failures-- > 0) throw new Error('kafka down');
        published.push({ topic, record });
      },
    });
    expect(await h.processor.work(job('r1'), context())).toBe('done');
    expect(published.map((p) => p.topic).sort()).toEqual(['ledger', 'ledger', 'results']);

    const never = harness([], {
      publish: async () => {
        throw new Error('kafka down');
      },
    });
    const ctx = context();
    const pending = never.processor.work(job('r2'), ctx);
    await new Promise((r) => setTimeout(r, 300));
    ctx.abortNow();
    expect(await pending).toBe('abandoned');
    // No call without its `calling` record in Kafka: nothing was sent that a next owner could not know of.
    expect(never.calls).toHaveLength(0);
  });

  it('writes `calling` before each attempt and `done` with the result; a later record of the id gets that result again', async () => {
    const h = harness([{ kind: 'http-error', status: 503 }]);
    expect(await h.processor.work(job('r1'), context(7))).toBe('done');
    expect(h.ledger.written.map((e) => e.state)).toEqual(['calling', 'calling', 'done']);
    const done = h.ledger.written[2]!;
    expect(done).toMatchObject({ state: 'done', offset: 7, remember: true });
    const ledgerTopics = h.published.map((p) => p.topic);
    // Each calling record is published before the call it announces.
    expect(ledgerTopics.slice(0, 2)).toEqual(['ledger', 'ledger']);
    expect(await h.processor.work(job('r1'), context(9))).toBe('done');
    expect(h.calls).toHaveLength(2);
    const [first, again] = h.results();
    expect(again).toMatchObject({ requestId: 'r1', outcome: 'accepted', messageId: first!.messageId });
  });

  it('waits while another member may still be calling for a request, and publishes its outcome when it comes', async () => {
    const ledger = memoryLedger({
      graceMs: 60_000,
      onRefresh: (key, entries) => {
        const outcome = {
          requestId: 'r1',
          businessId: 'biz',
          outcome: 'accepted',
          messageId: 'from-previous-owner',
          type: 'text',
          recipient: '+15550002222',
          attempts: 1,
          maybeSent: false,
          acceptedAt: new Date().toISOString(),
        };
        entries.set(key, { state: 'done', offset: 0, at: Date.now(), remember: true, result: JSON.stringify(outcome) });
      },
    });
    ledger.entries.set('["biz","r1"]', { state: 'calling', offset: 0, at: Date.now(), owner: 'member-a' });
    const h = harness([], {}, ledger);
    expect(await h.processor.work(job('r1'), context())).toBe('done');
    expect(h.calls).toHaveLength(0);
    expect(ledger.refreshes()).toBeGreaterThan(0);
    expect(h.results()).toEqual([expect.objectContaining({ requestId: 'r1', messageId: 'from-previous-owner' })]);
  });

  it('a calling record nobody finished within the call deadline: sent again with maybeSent, or refused at most once', async () => {
    const stale = () => {
      const ledger = memoryLedger({ graceMs: 1000 });
      ledger.entries.set('["biz","r1"]', { state: 'calling', offset: 0, at: Date.now() - 5000, owner: 'member-a' });
      return ledger;
    };
    const atLeastOnce = harness([], {}, stale());
    expect(await atLeastOnce.processor.work(job('r1'), context())).toBe('done');
    expect(atLeastOnce.calls).toHaveLength(1);
    expect(atLeastOnce.results()).toEqual([
      expect.objectContaining({ outcome: 'accepted', maybeSent: true, attempts: 2 }),
    ]);

    const atMostOnce = harness([], { retryMaybeSent: false }, stale());
    expect(await atMostOnce.processor.work(job('r1'), context())).toBe('done');
    expect(atMostOnce.calls).toHaveLength(0);
    expect(atMostOnce.results()).toEqual([
      expect.objectContaining({
        outcome: 'rejected',
        maybeSent: true,
        error: expect.objectContaining({ retriable: false, maybeSent: true }),
      }),
    ]);
  });

  it('carries on what a previous owner released: its attempts and whether one may have sent', async () => {
    const ledger = memoryLedger();
    ledger.entries.set('["biz","r1"]', {
      state: 'released',
      offset: 0,
      at: Date.now(),
      attempts: 3,
      maybeSent: true,
      firstAttemptAt: Date.now() - 1000,
    });
    const h = harness([], {}, ledger);
    expect(await h.processor.work(job('r1'), context())).toBe('done');
    expect(h.results()).toEqual([expect.objectContaining({ outcome: 'accepted', attempts: 4, maybeSent: true })]);
  });

  it('a request waiting for a call slot when a rejoin begins writes `released` instead of calling: the rejoin does not wait for it', async () => {
    const h = harness([], { callSlots: new Semaphore(1) });
    h.gate();
    const first = h.processor.work(job('r-a'), context(0));
    await expect.poll(() => h.calls.length).toBe(1);
    const second = h.processor.work(job('r-b'), context(1));
    await expect.poll(() => h.ledger.entries.get(ledgerKey('biz', 'r-b'))?.state).toBe('calling');
    let paused: boolean | undefined;
    const pausing = h.processor.pauseCalls(10_000).then((ok) => (paused = ok));
    h.release(); // r-a answered: its slot goes to r-b, which finds the rejoin under way
    await pausing;
    expect(paused).toBe(true);
    expect(h.ledger.entries.get(ledgerKey('biz', 'r-b'))?.state).toBe('released');
    expect(h.calls).toHaveLength(1);
    // The member keeps the partition: r-b carries on, with a `calling` record of its own again.
    h.processor.resumeCalls();
    await expect.poll(() => h.calls.length).toBe(2);
    h.release();
    expect(await Promise.all([first, second])).toEqual(['done', 'done']);
    expect(h.ledger.entries.get(ledgerKey('biz', 'r-b'))?.state).toBe('done');
  });

  it("a request that waited across a rejoin whose pause ran out reads the ledger first: another member's outcome is published again, not sent again", async () => {
    const { h, first, second } = await waitingAcrossRejoin();
    // Meanwhile the group gave the partition to another member, which sent r-b and recorded its
    // outcome, then gave the partition back.
    const theirs = JSON.stringify({ requestId: 'r-b', businessId: 'biz', outcome: 'accepted', messageId: 'their-m' });
    h.ledger.entries.set(ledgerKey('biz', 'r-b'), {
      state: 'done',
      offset: 1,
      at: Date.now(),
      remember: true,
      result: theirs,
    });
    h.processor.resumeCalls();
    h.release(); // r-a's outcome is recorded: its unrecorded slot goes to r-b
    expect(await Promise.all([first, second])).toEqual(['done', 'done']);
    expect(h.calls).toHaveLength(1);
    expect(h.results().find((r) => r.requestId === 'r-b')).toMatchObject({ outcome: 'accepted', messageId: 'their-m' });
    expect(h.ledger.refreshes()).toBeGreaterThan(0);
  });

  it('a request that waited across a rejoin and finds only its own calling record calls once', async () => {
    const { h, first, second } = await waitingAcrossRejoin();
    h.processor.resumeCalls();
    h.release();
    await expect.poll(() => h.calls.length).toBe(2);
    h.release();
    expect(await Promise.all([first, second])).toEqual(['done', 'done']);
    expect(h.ledger.entries.get(ledgerKey('biz', 'r-b'))?.state).toBe('done');
  });

  it('pauseCalls holds new calls and resolves once the calls made have their outcome recorded', async () => {
    const h = harness([]);
    h.gate();
    const first = h.processor.work(job('r1'), context());
    while (h.calls.length === 0) await tick();
    expect(h.processor.unsettledCalls).toBe(1);
    let settled = false;
    const pausing = h.processor.pauseCalls(10_000).then((ok) => (settled = ok));
    const second = h.processor.work(job('r2'), context(1));
    await new Promise((r) => setTimeout(r, 30));
    expect(settled).toBe(false);
    h.release();
    expect(await first).toBe('done');
    await pausing;
    expect(settled).toBe(true);
    // Held: r2 has not called while paused.
    expect(h.calls).toHaveLength(1);
    h.processor.resumeCalls();
    await new Promise((r) => setTimeout(r, 150));
    h.release();
    expect(await second).toBe('done');
    expect(h.calls).toHaveLength(2);
  });

  it('a request admitted before the circuit opened does not call once it has: it goes back to wait after its token', async () => {
    let failing = true;
    let failedCalls = 0;
    const h = harness([], {
      client: {
        send: async () => {
          await tick();
          if (!failing) return { kind: 'accepted', status: 200, messageId: 'm' };
          failedCalls += 1;
          return refused;
        },
      },
      // Real pacing: every request is admitted at once and then waits for its token.
      limiter: new RateLimiter({ ratePerSecond: 200, burst: 1 }),
      circuits: new CircuitBreaker({ failureThreshold: 3, probeInitialMs: 40, probeMaxMs: 40 }),
    });
    const all = Promise.all(Array.from({ length: 30 }, (_, i) => h.processor.work(job(`r${i}`), context())));
    await new Promise((r) => setTimeout(r, 400));
    failing = false;
    expect(await all).toEqual(Array.from({ length: 30 }, () => 'done'));
    // 3 to open it, then about one probe per 20-40 ms: far fewer than the 30 queued behind the bucket.
    expect(failedCalls).toBeLessThan(20);
    expect(h.results().every((r) => r.outcome === 'accepted')).toBe(true);
  });
});
