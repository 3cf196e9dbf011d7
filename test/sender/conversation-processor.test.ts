import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { sendResultSchema } from '../../src/contracts/index.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import type { RecordToWrite } from '../../src/kafka/port.js';
import { silentLogger } from '../../src/platform/logger.js';
import { CircuitBreaker } from '../../src/sender/circuit-breaker.js';
import type { WindowLookup } from '../../src/sender/conversation-table.js';
import type { WorkContext } from '../../src/sender/keyed-runner.js';
import { noopSenderMetrics, type ConversationDecision, type SenderMetrics } from '../../src/sender/metrics.js';
import { memoryLedger } from './memory-ledger.js';
import { createProcessor, type ConversationGuardOptions } from '../../src/sender/processor.js';
import { prepareJob, type DlqJob, type Job, type SendJob } from '../../src/sender/requests.js';
import { Semaphore } from '../../src/sender/semaphore.js';

const TO = '+15550002222';
const businesses = new Map([['biz', 'key']]);

function job(
  requestId: string,
  extra: Record<string, unknown> = {},
  producedAt = Date.now() - 60_000,
  type: 'text' | 'template' = 'text',
): Job {
  const value =
    type === 'text'
      ? {
          requestId,
          type,
          recipient: { channelType: 'whatsapp', id: TO },
          message: { text: 'hi' },
          callbackData: requestId,
          ...extra,
        }
      : {
          requestId,
          type,
          number: TO,
          templateName: 'welcome',
          parameters: [{ name: 'name', value: 'Ada' }],
          ...extra,
        };
  return prepareJob(
    { topic: 't', partition: 0, offset: '0', key: null, value: Buffer.from(JSON.stringify(value)), headers: {} },
    businesses,
    {
      receivedAt: Date.now(),
      producedAt,
      maxRequestAgeMs: 86_400_000,
    },
  );
}

function context(): WorkContext & { stopNow: () => void } {
  const stop = new AbortController();
  return {
    partition: '0',
    offset: 0,
    stop: stop.signal,
    abort: new AbortController().signal,
    releaseKey: () => undefined,
    stopNow: () => stop.abort(),
  };
}

/** A processor whose provider records every call and accepts it; the window comes from `window()`. */
function harness(window: () => WindowLookup, guard: Partial<ConversationGuardOptions> = {}) {
  const calls: { operation: string; body: Record<string, unknown> }[] = [];
  const published: { topic: string; record: RecordToWrite }[] = [];
  const decisions: ConversationDecision[] = [];
  const outcomes: string[] = [];
  const metrics: SenderMetrics = {
    ...noopSenderMetrics,
    conversation: (d) => void decisions.push(d),
    outcome: (o) => void outcomes.push(o),
  };
  const processor = createProcessor({
    client: {
      send: async (operation, _biz, _key, body) => {
        calls.push({ operation, body: body as Record<string, unknown> });
        return { kind: 'accepted', status: 200, messageId: `m${calls.length}` };
      },
    },
    publish: async (topic, record) => void published.push({ topic, record }),
    limiter: { acquire: async () => undefined, slowDown: () => undefined },
    circuits: new CircuitBreaker({ failureThreshold: 1000, probeInitialMs: 5, probeMaxMs: 10 }),
    callSlots: new Semaphore(8),
    apiKeys: businesses,
    topics: { results: 'results', dlq: 'dlq' },
    policy: { budgetMs: 60_000, backoffInitialMs: 5, backoffMaxMs: 10 },
    retryMaybeSent: true,
    dlqMaxBytes: 1_000_000,
    ledger: memoryLedger().port,
    metrics,
    logger: silentLogger,
    conversations: { mode: 'reject', graceMs: 0, lookup: () => window(), ...guard },
  });
  return {
    processor,
    calls,
    decisions,
    outcomes,
    results: () =>
      published
        .filter((p) => p.topic === 'results')
        .map((p) => sendResultSchema.parse(JSON.parse(p.record.value.toString()))),
  };
}

const open: WindowLookup = { state: 'open', openUntil: Date.now() + 3_600_000 };
const closedAt = Date.parse('2026-03-01T11:00:00Z');
const closed: WindowLookup = { state: 'closed', openUntil: closedAt };
const neverSeen: WindowLookup = { state: 'closed', openUntil: null };
const fallbackTemplate = { templateName: 'order_update', parameters: [{ name: 'order', value: '42' }] };

describe('processor with the conversation window guard', () => {
  it('reject: a text to a closed window is rejected at once, no provider call, not remembered', async () => {
    let window: WindowLookup = closed;
    const h = harness(() => window);
    expect(await h.processor.work(job('r1'), context())).toBe('done');
    expect(h.calls).toEqual([]);
    const [result] = h.results();
    expect(result).toMatchObject({
      requestId: 'r1',
      outcome: 'rejected',
      attempts: 0,
      maybeSent: false,
      type: 'text',
      recipient: TO,
      error: {
        code: 'RELAY_OUTSIDE_CONVERSATION_WINDOW',
        type: 'RELAY_CONVERSATION_WINDOW',
        retriable: false,
        details: { windowOpenUntil: '2026-03-01T11:00:00.000Z' },
      },
    });
    expect(result).not.toHaveProperty('sentAs');
    expect(h.decisions).toEqual(['rejected']);
    expect(h.outcomes).toEqual(['rejected']);
    // The customer writes: the same requestId is sent, not answered from memory.
    window = open;
    expect(await h.processor.work(job('r1'), context())).toBe('done');
    expect(h.calls).toHaveLength(1);
    expect(h.results()[1]).toMatchObject({ requestId: 'r1', outcome: 'accepted', messageId: 'm1' });
    expect(h.decisions).toEqual(['rejected', 'open']);
  });

  it('reject: a customer never seen (table complete) is rejected with windowOpenUntil null', async () => {
    const h = harness(() => neverSeen);
    await h.processor.work(job('r1'), context());
    expect(h.calls).toEqual([]);
    expect(h.results()[0]).toMatchObject({
      outcome: 'rejected',
      attempts: 0,
      maybeSent: false,
      error: { code: 'RELAY_OUTSIDE_CONVERSATION_WINDOW', details: { windowOpenUntil: null } },
    });
  });

  it('an open window or an unknown one: the text is sent, the relay fields stripped', async () => {
    const h = harness(() => open);
    await h.processor.work(job('r1', { fallbackTemplate, conversationWindow: undefined }), context());
    const unknown = harness(() => ({ state: 'unknown', reason: 'evicted' }));
    await unknown.processor.work(job('r2', { fallbackTemplate }), context());
    for (const x of [h, unknown]) {
      expect(x.calls).toHaveLength(1);
      expect(x.calls[0]!.operation).toBe('text');
      expect(x.calls[0]!.body).not.toHaveProperty('fallbackTemplate');
      expect(x.results()[0]).toMatchObject({ outcome: 'accepted', type: 'text' });
      expect(x.results()[0]).not.toHaveProperty('sentAs');
    }
    expect(unknown.decisions).toEqual(['unknown']);
  });

  it('the override: conversationWindow "ignore" sends the text to a closed window, the field not sent to the provider', async () => {
    const h = harness(() => closed);
    await h.processor.work(job('r1', { conversationWindow: 'ignore' }), context());
    expect(h.calls).toEqual([
      {
        operation: 'text',
        body: { recipient: { channelType: 'whatsapp', id: TO }, message: { text: 'hi' }, callbackData: 'r1' },
      },
    ]);
    expect(h.decisions).toEqual(['override']);
  });

  it('the fallback: the template goes out instead, and the result says sentAs "template"', async () => {
    const h = harness(() => closed);
    await h.processor.work(job('r1', { fallbackTemplate: { ...fallbackTemplate, language: 'en' } }), context());
    expect(h.calls).toEqual([
      {
        operation: 'template',
        body: {
          callbackData: 'r1',
          templateName: 'order_update',
          parameters: [{ name: 'order', value: '42' }],
          language: 'en',
          number: TO,
        },
      },
    ]);
    expect(h.results()[0]).toMatchObject({
      requestId: 'r1',
      outcome: 'accepted',
      type: 'text',
      recipient: TO,
      messageId: 'm1',
      sentAs: 'template',
    });
    expect(h.decisions).toEqual(['fallback']);
    // A repeat of the same requestId is answered from memory, with the same sentAs.
    await h.processor.work(job('r1', { fallbackTemplate }), context());
    expect(h.calls).toHaveLength(1);
    expect(h.results()[1]).toMatchObject({ outcome: 'accepted', sentAs: 'template' });
  });

  it('a fallback the provider refuses is rejected with sentAs "template"', async () => {
    const refusing = createProcessorRefusing();
    await refusing.processor.work(job('r1', { fallbackTemplate }), context());
    expect(refusing.results()[0]).toMatchObject({
      outcome: 'rejected',
      attempts: 1,
      sentAs: 'template',
      error: { httpStatus: 400 },
    });
  });

  it('templates are never checked; off sends every text as it is', async () => {
    const h = harness(() => neverSeen);
    await h.processor.work(job('t1', {}, Date.now(), 'template'), context());
    expect(h.calls.map((c) => c.operation)).toEqual(['template']);
    const off = harness(() => neverSeen, { mode: 'off' });
    await off.processor.work(job('r1', { fallbackTemplate }), context());
    expect(off.calls.map((c) => c.operation)).toEqual(['text']);
    expect(off.calls[0]!.body).not.toHaveProperty('fallbackTemplate');
    expect(off.decisions).toEqual([]);
  });

  it('the grace: a fresh request to a closed window waits, and is sent when the window opens meanwhile', async () => {
    let window: WindowLookup = neverSeen;
    const h = harness(() => window, { graceMs: 2000 });
    setTimeout(() => (window = open), 300);
    const started = Date.now();
    await h.processor.work(job('r1', {}, Date.now()), context());
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    // Sent as the text it is, before the grace ran out (a wait to the end would reject it).
    expect(h.calls.map((c) => c.operation)).toEqual(['text']);
    expect(h.decisions).toEqual(['open']);
  });

  it('the grace: a fresh request to a window that stays closed is rejected once it is graceMs old', async () => {
    const h = harness(() => neverSeen, { graceMs: 400 });
    const produced = Date.now();
    await h.processor.work(job('r1', {}, produced), context());
    expect(Date.now() - produced).toBeGreaterThanOrEqual(390);
    expect(h.results()[0]).toMatchObject({ outcome: 'rejected', error: { code: 'RELAY_OUTSIDE_CONVERSATION_WINDOW' } });
    // An old request is decided at once: without waiting out the grace (a loaded machine may take
    // tens of milliseconds, never the 400).
    const old = Date.now();
    await h.processor.work(job('r2', {}, Date.now() - 5000), context());
    expect(Date.now() - old).toBeLessThan(390);
  });

  it('a stop while waiting abandons the request (it runs again at the next owner); an expiry during the wait expires it', async () => {
    const h = harness(() => neverSeen, { graceMs: 5000 });
    const c = context();
    setTimeout(() => c.stopNow(), 100);
    expect(await h.processor.work(job('r1', {}, Date.now()), c)).toBe('abandoned');
    expect(h.results()).toEqual([]);
    await h.processor.work(job('r2', { ttlMs: 200 }, Date.now()), context());
    expect(h.results()[0]).toMatchObject({ outcome: 'expired', attempts: 0, maybeSent: false });
    expect(h.calls).toEqual([]);
  });
});

/** A provider that refuses every send with a 400 (an unknown template, say). */
function createProcessorRefusing() {
  const published: RecordToWrite[] = [];
  const processor = createProcessor({
    client: {
      send: async () => ({
        kind: 'http-error',
        status: 400,
        error: { message: 'bad', type: 'ERROR_TYPE_INVALID', code: 'ERROR_CODE_REQUEST_FIELD_INVALID' },
      }),
    },
    publish: async (topic, record) => void (topic === 'results' && published.push(record)),
    limiter: { acquire: async () => undefined, slowDown: () => undefined },
    circuits: new CircuitBreaker({ failureThreshold: 1000, probeInitialMs: 5, probeMaxMs: 10 }),
    callSlots: new Semaphore(8),
    apiKeys: businesses,
    topics: { results: 'results', dlq: 'dlq' },
    policy: { budgetMs: 60_000, backoffInitialMs: 5, backoffMaxMs: 10 },
    retryMaybeSent: true,
    dlqMaxBytes: 1_000_000,
    ledger: memoryLedger().port,
    metrics: noopSenderMetrics,
    logger: silentLogger,
    conversations: { mode: 'reject', graceMs: 0, lookup: () => neverSeen },
  });
  return { processor, results: () => published.map((r) => JSON.parse(r.value.toString()) as Record<string, unknown>) };
}

describe('request fields of the guard', () => {
  const dlq = (extra: Record<string, unknown>, type: 'text' | 'template' = 'text') =>
    job('bad', extra, Date.now(), type) as DlqJob;

  it('accepts conversationWindow "ignore" and a fallbackTemplate, keeping them out of the provider body', () => {
    const j = job('r1', { conversationWindow: 'ignore', fallbackTemplate: { templateName: 'welcome' } }) as SendJob;
    expect(j.kind).toBe('send');
    expect(j.request).toMatchObject({
      conversationWindow: 'ignore',
      fallbackTemplate: { templateName: 'welcome', parameters: [] },
    });
    expect(j.body).toEqual({
      recipient: { channelType: 'whatsapp', id: TO },
      message: { text: 'hi' },
      callbackData: 'r1',
    });
  });

  it('refuses bad values with a clear reason (dead-lettered, RELAY_INVALID_FIELD)', () => {
    const cases: [Record<string, unknown>, RegExp, ('text' | 'template')?][] = [
      [{ conversationWindow: 'skip' }, /conversationWindow: expected "ignore"/],
      [{ conversationWindow: true }, /conversationWindow: expected "ignore"/],
      [{ fallbackTemplate: 'order_update' }, /fallbackTemplate: expected an object \{"templateName"/],
      [
        { fallbackTemplate: { templateName: '' } },
        /fallbackTemplate\.templateName: expected the name of an approved template/,
      ],
      [
        { fallbackTemplate: { parameters: [] } },
        /fallbackTemplate\.templateName: expected the name of an approved template/,
      ],
      [
        { fallbackTemplate: { templateName: 'x', parameters: [{ name: 'a' }] } },
        /fallbackTemplate\.parameters\.0\.value/,
      ],
      [
        {
          fallbackTemplate: {
            templateName: 'x',
            parameters: Array.from({ length: 101 }, (_, i) => ({ name: `p${i}`, value: '' })),
          },
        },
        /fallbackTemplate\.parameters/,
      ],
      [{ fallbackTemplate }, /fallbackTemplate: fallbackTemplate applies to text requests only/, 'template'],
    ];
    for (const [extra, reason, type] of cases) {
      const j = dlq(extra, type);
      expect(j.kind, JSON.stringify(extra)).toBe('dlq');
      expect(j.code, JSON.stringify(extra)).toBe('RELAY_INVALID_FIELD');
      expect(j.reason, JSON.stringify(extra)).toMatch(reason);
    }
  });

  it('conversationWindow "ignore" on a template is accepted (a template is never checked)', () => {
    expect(job('t1', { conversationWindow: 'ignore' }, Date.now(), 'template').kind).toBe('send');
  });
});

describe('configuration of the guard', () => {
  const load = (sender: Record<string, unknown>) => loadConfig({ env: {}, overrides: { sender } });

  it('defaults: off, 500,000 entries, 120 s start-up wait, 1 s grace', () => {
    expect(load({}).sender).toMatchObject({
      conversationWindow: 'off',
      conversationTableMaxEntries: 500_000,
      conversationTableReadTimeoutMs: 120_000,
      conversationWindowGraceMs: 1000,
    });
    expect(loadConfig({ env: { MSGBRIDGE__sender__conversationWindow: 'reject' } }).sender.conversationWindow).toBe(
      'reject',
    );
  });

  it('refuses bad values, naming the field', () => {
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ conversationWindow: 'on' }, /sender\.conversationWindow: expected "off" \(send every text\) or "reject"/],
      [{ conversationWindow: true }, /sender\.conversationWindow/],
      [{ conversationTableMaxEntries: 10 }, /sender\.conversationTableMaxEntries/],
      [{ conversationTableMaxEntries: 1.5e3 + 0.5 }, /sender\.conversationTableMaxEntries/],
      [{ conversationTableReadTimeoutMs: 0 }, /sender\.conversationTableReadTimeoutMs/],
      [{ conversationWindowGraceMs: -1 }, /sender\.conversationWindowGraceMs/],
      [{ conversationWindowGraceMs: 120_000 }, /sender\.conversationWindowGraceMs/],
    ];
    for (const [sender, message] of cases) {
      let error: unknown;
      try {
        load(sender);
      } catch (err) {
        error = err;
      }
      expect(isMsgbridgeError(error, 'CONFIG_INVALID'), JSON.stringify(sender)).toBe(true);
      expect((error as Error).message, JSON.stringify(sender)).toMatch(message);
    }
  });
});
