import { randomUUID } from 'node:crypto';
import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { sendResultSchema, type SendResult } from '../../src/contracts/index.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { ensureTopics } from '../../src/kafka/topics.js';
import { startSender, type Sender } from '../../src/sender/index.js';
import { runCli } from '../helpers/cli.js';
import { kafkaBrokers, withAdmin } from '../helpers/kafka.js';
import {
  BIZ,
  collect,
  fixture,
  patientKafka,
  produceRequests,
  sentRequestId,
  templateRequest,
  textRequest,
  waitUntil,
  type Collector,
  type Fixture,
} from './harness.js';

/**
 * The conversation window guard (sender.conversationWindow "reject", src/sender/README.md
 * "Conversation window") on the suite's Kafka and the provider simulator, which enforces the
 * window itself: a text outside it is accepted, then fails (delivery_failed). The tests write
 * the `conversations` records the tracker would (JSON per conversationWindowSchema, keyed
 * `<businessId>:<customer>`), with a plain or a transactional producer.
 */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

interface Inbound {
  customer: string;
  /** When the customer last wrote (ms). */
  at: number;
  businessId?: string;
}

function windowRecord({ customer, at, businessId = BIZ.id }: Inbound) {
  const value = {
    businessId,
    customer,
    lastInboundAt: new Date(at).toISOString(),
    windowOpenUntil: new Date(at + DAY).toISOString(),
  };
  return { key: `${businessId}:${customer}`, value: JSON.stringify(value) };
}

async function createConversations(topic: string, partitions = 3): Promise<void> {
  await withAdmin((admin) =>
    ensureTopics(admin, [
      { topic, partitions, replicationFactor: 1, configEntries: [{ name: 'cleanup.policy', value: 'compact' }] },
    ]),
  );
}

async function produceWindows(
  topic: string,
  windows: Inbound[],
  raw: { key: string | null; value: string | null }[] = [],
): Promise<void> {
  const producer = patientKafka('conversations-test').producer({
    allowAutoTopicCreation: false,
    idempotent: true,
    maxInFlightRequests: 1,
  });
  await producer.connect();
  try {
    await producer.send({ topic, acks: -1, messages: [...windows.map(windowRecord), ...raw] });
  } finally {
    await producer.disconnect();
  }
}

/** Windows written in a transaction left open: read_committed readers cannot pass them until commit. */
async function openTransaction(topic: string, windows: Inbound[]): Promise<{ commit(): Promise<void> }> {
  const producer = patientKafka('conversations-tx').producer({
    transactionalId: `conv-test-${randomUUID()}`,
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false,
  });
  await producer.connect();
  const transaction = await producer.transaction();
  await transaction.send({ topic, acks: -1, messages: windows.map(windowRecord) });
  cleanups.push(() => producer.disconnect());
  return { commit: () => transaction.commit() };
}

async function setUp(options: Parameters<typeof fixture>[0] = {}): Promise<{ f: Fixture; results: Collector }> {
  const f = await fixture({
    ...options,
    sender: { conversationWindow: 'reject', conversationWindowGraceMs: 0, ...options.sender },
  });
  cleanups.push(() => f.close());
  const results = await collect(f.topics.sendResults);
  cleanups.push(() => results.stop());
  return { f, results };
}

function byRequest(results: Collector): Map<string, SendResult> {
  return new Map(results.values().map((v) => [v.requestId as string, sendResultSchema.parse(v)]));
}

/** Request ids the simulator received a send for (the tests put the request id in callbackData). */
function providerCalls(f: Fixture): string[] {
  return f.simulator.sends().map((s) => sentRequestId(s) ?? '?');
}

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function readyz(port: number): Promise<{ status: number; body: { ready: boolean; reason?: string } }> {
  const res = await fetch(`http://127.0.0.1:${port}/readyz`);
  return { status: res.status, body: (await res.json()) as { ready: boolean; reason?: string } };
}

/** Polls an async probe until it answers something. */
async function until<T>(probe: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(100);
  }
}

const text = (id: string, to: string, extra: Record<string, unknown> = {}) => ({
  key: to,
  value: textRequest(id, to, `hello ${id}`, { callbackData: id, ...extra }),
});

describe('sender: the conversation window guard on the broker and the simulator', () => {
  it('refuses a text to a closed or never-seen window without a provider call; sends open, override, template and fallback', async () => {
    const { f, results } = await setUp();
    const now = Date.now();
    const OPEN = '+15550001001';
    const CLOSED = '+15550001002';
    const NEVER = '+15550001003';
    // The customer writes: the simulator opens its window, the tracker would publish this record.
    f.simulator.injectInbound(BIZ.id, { from: OPEN, text: 'hi there' });
    await createConversations(f.topics.conversations);
    await produceWindows(
      f.topics.conversations,
      [
        { customer: OPEN, at: now },
        { customer: CLOSED, at: now - 30 * HOUR },
        // Another business's window is not this one's.
        { customer: NEVER, at: now, businessId: 'biz_other' },
      ],
      [{ key: 'junk', value: 'not a window' }],
    );
    const sender = await f.start();
    await sender.ready;
    expect(sender.isReady()).toBe(true);

    await produceRequests(f.topics.sendRequests, [
      text('open', OPEN),
      text('closed', CLOSED),
      text('never', NEVER),
      text('override', NEVER, { conversationWindow: 'ignore' }),
      text('fallback', CLOSED, {
        fallbackTemplate: { templateName: 'welcome', parameters: [{ name: 'name', value: 'Ada' }] },
      }),
      { key: NEVER, value: templateRequest('template', NEVER, { callbackData: 'template' }) },
    ]);
    await results.waitFor((r) => r.length >= 6);
    const got = byRequest(results);

    expect(got.get('open')).toMatchObject({ outcome: 'accepted', type: 'text', attempts: 1 });
    expect(got.get('closed')).toMatchObject({
      outcome: 'rejected',
      type: 'text',
      recipient: CLOSED,
      attempts: 0,
      maybeSent: false,
      // A window already closed when it was read is not kept: it reads as never seen.
      error: { code: 'RELAY_OUTSIDE_CONVERSATION_WINDOW', retriable: false, details: { windowOpenUntil: null } },
    });
    expect(got.get('never')).toMatchObject({
      outcome: 'rejected',
      attempts: 0,
      maybeSent: false,
      error: { code: 'RELAY_OUTSIDE_CONVERSATION_WINDOW', details: { windowOpenUntil: null } },
    });
    expect(got.get('override')).toMatchObject({ outcome: 'accepted', type: 'text' });
    expect(got.get('fallback')).toMatchObject({
      outcome: 'accepted',
      type: 'text',
      recipient: CLOSED,
      sentAs: 'template',
    });
    expect(got.get('template')).toMatchObject({ outcome: 'accepted', type: 'template' });
    for (const id of ['open', 'override', 'template']) expect(got.get(id), id).not.toHaveProperty('sentAs');

    // No provider call for the refused ones; the fallback went out as the template.
    expect(providerCalls(f).sort()).toEqual(['fallback', 'open', 'override', 'template']);
    const fallbackSend = f.simulator.sends().find((s) => sentRequestId(s) === 'fallback')!;
    expect(fallbackSend.operation).toBe('template');
    expect(fallbackSend.body).toEqual({
      callbackData: 'fallback',
      templateName: 'welcome',
      parameters: [{ name: 'name', value: 'Ada' }],
      number: CLOSED,
    });
    // The simulator enforces the window: the overridden text to the silent customer fails later,
    // the text inside the window and the templates do not.
    const plan = (id: string) => {
      const result = got.get(id)!;
      return result.outcome === 'accepted' ? f.simulator.message(result.messageId)?.plan : undefined;
    };
    expect(plan('override')).toBe('failed');
    expect([plan('open'), plan('fallback'), plan('template')]).not.toContain('failed');

    const metrics = await sender.metrics.metrics();
    const count = (decision: string) =>
      new RegExp(
        `msgbridge_sender_conversation_window_total\\{decision="${decision}",business="biz_1",role="sender"\\} (\\d+)`,
      ).exec(metrics)?.[1];
    expect({
      open: count('open'),
      rejected: count('rejected'),
      fallback: count('fallback'),
      override: count('override'),
    }).toEqual({ open: '1', rejected: '2', fallback: '1', override: '1' });
    // Only the open window of this sender's business is kept (the closed one carries nothing).
    expect(metrics).toMatch(/msgbridge_sender_conversation_table_entries\{role="sender"\} 1\n/);
    expect(metrics).toMatch(/msgbridge_sender_conversation_table_complete\{role="sender"\} 1\n/);
    expect(metrics).toMatch(/msgbridge_sender_conversation_records_skipped_total\{role="sender"\} 1\n/);
    expect(metrics).toMatch(/msgbridge_sender_requests_total\{outcome="rejected",business="biz_1",role="sender"\} 2\n/);
    expect(sender.stats().conversationTable).toMatchObject({ entries: 1, complete: true, evictedOpen: 0 });
  });

  it('one customer in both forms, and SMS: an inbound from 1555… lets a text to +1555… through; an SMS to a customer who never wrote is sent; a WhatsApp text to them is still refused without a call', async () => {
    const { f, results } = await setUp();
    const WROTE = '15550003001';
    const SILENT = '+15550003002';
    // The customer wrote as the provider writes inbound senders (no +): the simulator opens the
    // window, the tracker writes its window under that form.
    f.simulator.injectInbound(BIZ.id, { from: WROTE, text: 'hi' });
    await createConversations(f.topics.conversations);
    await produceWindows(f.topics.conversations, [{ customer: WROTE, at: Date.now() }]);
    const sender = await f.start();
    await sender.ready;
    await produceRequests(f.topics.sendRequests, [
      text('plus', `+${WROTE}`),
      {
        key: SILENT,
        value: {
          ...textRequest('sms', SILENT, 'your code is 1234', { callbackData: 'sms' }),
          recipient: { channelType: 'sms', id: SILENT },
        },
      },
      text('whatsapp', SILENT),
    ]);
    await results.waitFor((r) => r.length >= 3);
    const got = byRequest(results);
    expect(got.get('plus')).toMatchObject({ outcome: 'accepted', recipient: `+${WROTE}`, channel: 'whatsapp' });
    expect(got.get('sms')).toMatchObject({ outcome: 'accepted', recipient: SILENT, channel: 'sms' });
    expect(got.get('whatsapp')).toMatchObject({
      outcome: 'rejected',
      attempts: 0,
      error: { code: 'RELAY_OUTSIDE_CONVERSATION_WINDOW' },
    });
    expect(providerCalls(f).sort()).toEqual(['plus', 'sms']);
    // The provider agrees: the text is in the window, the SMS creates a message no status follows.
    const plan = (id: string) => {
      const result = got.get(id)!;
      return result.outcome === 'accepted' ? f.simulator.message(result.messageId)?.plan : undefined;
    };
    await f.simulator.idle(5000);
    expect(plan('plus')).toBe('read');
    expect(plan('sms')).toBe('no_events');
    const metrics = await sender.metrics.metrics();
    expect(metrics).toMatch(
      /msgbridge_sender_conversation_window_total\{decision="sms",business="biz_1",role="sender"\} 1\n/,
    );
  });

  it('start-up wait: no request is taken before the table is complete (an open transaction holds the read); a window in it is not taken for never seen', async () => {
    const { f, results } = await setUp();
    const OPENING = '+15550002001';
    const NEVER = '+15550002002';
    await createConversations(f.topics.conversations);
    await produceWindows(f.topics.conversations, [{ customer: '+15550002009', at: Date.now() }]);
    // The tracker's transaction is not committed yet: a read_committed reader stops before it.
    const transaction = await openTransaction(f.topics.conversations, [{ customer: OPENING, at: Date.now() }]);
    f.simulator.injectInbound(BIZ.id, { from: OPENING, text: 'hi' });
    await produceRequests(f.topics.sendRequests, [text('opening', OPENING), text('never', NEVER)]);

    const port = await freePort();
    let sender: Sender | undefined;
    const starting = f.start({ admin: { host: '127.0.0.1', port } }).then((s) => (sender = s));
    const waiting = await until(
      async () => {
        const answer = await readyz(port).catch(() => undefined);
        return answer?.body.reason?.includes('reading') ? answer : undefined;
      },
      30_000,
      'the readiness reason of the start-up wait',
    );
    expect(waiting.status).toBe(503);
    expect(waiting.body.reason).toMatch(
      new RegExp(`^conversation table not ready: reading ${f.topics.conversations} to its end`),
    );
    await sleep(3000);
    expect(sender).toBeUndefined();
    expect(providerCalls(f)).toEqual([]);
    expect(results.records).toEqual([]);

    await transaction.commit();
    const started = await starting;
    await started.ready;
    await results.waitFor((r) => r.length >= 2);
    const got = byRequest(results);
    expect(got.get('opening')).toMatchObject({ outcome: 'accepted', type: 'text' });
    expect(got.get('never')).toMatchObject({
      outcome: 'rejected',
      attempts: 0,
      error: { code: 'RELAY_OUTSIDE_CONVERSATION_WINDOW' },
    });
    expect(providerCalls(f)).toEqual(['opening']);
    expect(await readyz(port)).toEqual({ status: 200, body: { ready: true } });
  });

  it('a transaction left open past sender.conversationTableReadTimeoutMs fails the start, saying where the read stopped', async () => {
    const { f } = await setUp({ sender: { conversationTableReadTimeoutMs: 3000 } });
    await createConversations(f.topics.conversations, 1);
    await produceWindows(f.topics.conversations, [{ customer: '+15550007001', at: Date.now() }]);
    await openTransaction(f.topics.conversations, [{ customer: '+15550007002', at: Date.now() }]);
    const error = await f.start().then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(isMsgbridgeError(error, 'KAFKA_UNAVAILABLE')).toBe(true);
    expect((error as Error).message).toMatch(
      new RegExp(
        `within sender\\.conversationTableReadTimeoutMs \\(3000 ms\\): still reading ${f.topics.conversations} to its end \\(2 offsets over 1 partitions\\): partition 0 at 1 of 2; a partition that does not move is held by a transaction left open on it`,
      ),
    );
  });

  it('waits for the conversations topic to exist, saying so; past sender.conversationTableReadTimeoutMs the start fails with the reason', async () => {
    const { f, results } = await setUp({ sender: { conversationTableReadTimeoutMs: 2000 } });
    const started = Date.now();
    const error = await f.start().then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(isMsgbridgeError(error, 'KAFKA_UNAVAILABLE')).toBe(true);
    expect((error as Error).message).toMatch(
      new RegExp(
        `not ready within sender\\.conversationTableReadTimeoutMs \\(2000 ms\\): still waiting for topic ${f.topics.conversations} \\(written by the tracker\\)`,
      ),
    );
    expect((error as Error).message).toMatch(/set sender\.conversationWindow to "off"/);
    expect(Date.now() - started).toBeLessThan(15_000);

    // A sender with time to wait: it waits for the topic, then reads it and sends.
    const NEVER = '+15550003001';
    const OPEN = '+15550003002';
    await produceRequests(f.topics.sendRequests, [text('early-never', NEVER)]);
    const port = await freePort();
    const patient = setUpAgain(f, port);
    const waiting = await until(
      async () => {
        const answer = await readyz(port).catch(() => undefined);
        return answer?.body.reason?.includes('waiting for topic') ? answer : undefined;
      },
      30_000,
      'the readiness reason while the topic is missing',
    );
    expect(waiting).toEqual({
      status: 503,
      body: {
        ready: false,
        reason: `conversation table not ready: waiting for topic ${f.topics.conversations} (written by the tracker)`,
      },
    });
    await sleep(1500);
    expect(results.records).toEqual([]);
    await createConversations(f.topics.conversations);
    const sender = await patient;
    await sender.ready;
    // Decided with the complete (empty) table: never seen means closed.
    await results.waitFor((r) => r.length >= 1);
    expect(byRequest(results).get('early-never')).toMatchObject({
      outcome: 'rejected',
      error: { code: 'RELAY_OUTSIDE_CONVERSATION_WINDOW' },
    });
    // Windows published from now on are followed.
    await produceWindows(f.topics.conversations, [{ customer: OPEN, at: Date.now() }]);
    await waitUntil(
      () => sender.stats().conversationTable?.entries === 1,
      15_000,
      () => 'the new window in the table',
    );
    await produceRequests(f.topics.sendRequests, [text('now-open', OPEN)]);
    await results.waitFor((r) => r.length >= 2);
    expect(byRequest(results).get('now-open')).toMatchObject({ outcome: 'accepted' });
    expect(providerCalls(f)).toEqual(['now-open']);
  });

  it('kept current while running: a window that opens is followed (the grace covers a request that overtakes it), one that closes is refused', async () => {
    const { f, results } = await setUp({ sender: { conversationWindowGraceMs: 3000 } });
    await createConversations(f.topics.conversations);
    const now = Date.now();
    const RACING = '+15550004001';
    const SILENT = '+15550004002';
    const CLOSING = '+15550004003';
    // CLOSING's window ends 6 s from now.
    await produceWindows(f.topics.conversations, [{ customer: CLOSING, at: now - DAY + 6000 }]);
    const sender = await f.start();
    await sender.ready;

    // The reply overtakes the window's record: it waits (grace) instead of being refused. The
    // grace counts from the request's record time, not from when the sender read it.
    const producedAt = Date.now();
    await produceRequests(f.topics.sendRequests, [
      { ...text('racing', RACING), timestamp: producedAt },
      { ...text('silent', SILENT), timestamp: producedAt },
      { ...text('closing-1', CLOSING), timestamp: producedAt },
    ]);
    await sleep(500);
    await produceWindows(f.topics.conversations, [{ customer: RACING, at: Date.now() }]);
    await results.waitFor((r) => r.length >= 3);
    let got = byRequest(results);
    expect(got.get('racing')).toMatchObject({ outcome: 'accepted' });
    expect(got.get('closing-1')).toMatchObject({ outcome: 'accepted' });
    // A window that stays closed is refused once the grace has passed.
    const silent = got.get('silent')!;
    expect(silent).toMatchObject({ outcome: 'rejected', error: { code: 'RELAY_OUTSIDE_CONVERSATION_WINDOW' } });
    expect(Date.parse((silent as { rejectedAt: string }).rejectedAt) - producedAt).toBeGreaterThanOrEqual(3000);

    // Time closes CLOSING's window: the next text to it is refused, with the time it closed.
    await sleep(Math.max(0, now + 6000 - Date.now() + 200));
    await produceRequests(f.topics.sendRequests, [{ ...text('closing-2', CLOSING), timestamp: Date.now() - 10_000 }]);
    await results.waitFor((r) => r.length >= 4);
    got = byRequest(results);
    expect(got.get('closing-2')).toMatchObject({
      outcome: 'rejected',
      error: { details: { windowOpenUntil: new Date(now + 6000).toISOString() } },
    });
    expect(providerCalls(f).sort()).toEqual(['closing-1', 'racing']);
  });

  it('a full table drops the least recently updated open window, and then sends texts to customers it does not hold instead of refusing them', async () => {
    const { f, results } = await setUp({ sender: { conversationTableMaxEntries: 1000 } });
    await createConversations(f.topics.conversations, 1);
    const now = Date.now();
    const customers = Array.from({ length: 1001 }, (_, i) => `+1555100${String(i).padStart(4, '0')}`);
    // customers[0] is the oldest: it is the one dropped when the 1001st arrives.
    await produceWindows(
      f.topics.conversations,
      customers.map((customer, i) => ({ customer, at: now - 1000 + i })),
    );
    const sender = await f.start();
    await sender.ready;
    expect(sender.stats().conversationTable).toMatchObject({
      entries: 1000,
      complete: true,
      evictedOpen: 1,
      evictedUntil: now - 1000 + DAY,
    });

    const NEVER = '+15550005001';
    await produceRequests(f.topics.sendRequests, [
      text('dropped', customers[0]!),
      text('kept', customers[1000]!),
      text('never', NEVER),
    ]);
    await results.waitFor((r) => r.length >= 3);
    const got = byRequest(results);
    // The table can no longer tell "never seen" from "dropped": both are sent, the provider decides.
    expect(got.get('dropped')).toMatchObject({ outcome: 'accepted' });
    expect(got.get('never')).toMatchObject({ outcome: 'accepted' });
    expect(got.get('kept')).toMatchObject({ outcome: 'accepted' });
    const metrics = await sender.metrics.metrics();
    expect(metrics).toMatch(/msgbridge_sender_conversation_table_evictions_total\{role="sender"\} 1\n/);
    expect(metrics).toMatch(/msgbridge_sender_conversation_table_entries\{role="sender"\} 1000\n/);
    expect(metrics).toMatch(
      /msgbridge_sender_conversation_window_total\{decision="unknown",business="biz_1",role="sender"\} 2\n/,
    );
  });

  it('msgbridge send text: to a silent customer, rejected at once with the reason; with --fallback-template, the template goes out', async () => {
    const { f } = await setUp();
    await createConversations(f.topics.conversations);
    await withAdmin((admin) =>
      ensureTopics(admin, [{ topic: f.topics.deliveryStatus, partitions: 1, replicationFactor: 1 }]),
    );
    const sender = await f.start();
    await sender.ready;
    const env = {
      KAFKA_BROKERS: kafkaBrokers().join(','),
      MSGBRIDGE__kafka__topics: JSON.stringify(f.config.kafka.topics),
      MSGBRIDGE__kafka__createTopics: 'false',
      MSGBRIDGE_BUSINESS_ID: BIZ.id,
    };
    const SILENT = '+15550006001';

    const rejected = await runCli(['send', 'text', '--to', SILENT, '--text', 'are you there?', '--timeout', '30'], env);
    expect(`${rejected.stdout}${rejected.stderr}`).toMatch(
      /rejected without a send \(outside the conversation window\): RELAY_OUTSIDE_CONVERSATION_WINDOW not sent: the customer has no open 24-hour conversation window/,
    );
    expect(rejected.code).toBe(1);
    expect(f.simulator.sends()).toEqual([]);

    // No ingress runs here, so no delivery status comes back: the command stops at its timeout (exit 3).
    const fallback = await runCli(
      [
        'send',
        'text',
        '--to',
        SILENT,
        '--text',
        'are you there?',
        '--fallback-template',
        'welcome',
        '--param',
        'name=Ada',
        '--timeout',
        '3',
      ],
      env,
    );
    expect(`${fallback.stdout}${fallback.stderr}`).toMatch(
      /accepted as the fallback template welcome \(the conversation window is closed\): message id \w+/,
    );
    const sends = f.simulator.sends();
    expect(sends).toHaveLength(1);
    expect(sends[0]).toMatchObject({
      operation: 'template',
      body: { number: SILENT, templateName: 'welcome', parameters: [{ name: 'name', value: 'Ada' }] },
    });
    expect(f.simulator.message(sends[0]!.messageId!)?.plan).not.toBe('failed');

    // --channel sms: no window to wait for, and no status to follow: accepted is where it ends (exit 0).
    const sms = await runCli(
      ['send', 'text', '--to', SILENT, '--text', 'your code is 1234', '--channel', 'sms', '--timeout', '30'],
      env,
    );
    expect(`${sms.stdout}${sms.stderr}`).toMatch(
      /accepted: message id \w+ \(attempts 1\)\n.*SMS: handed to the SMS network; the provider reports no delivery on this channel/,
    );
    expect(sms.code).toBe(0);
    const smsSend = f.simulator.sends()[1]!;
    expect(smsSend).toMatchObject({
      operation: 'text',
      body: { recipient: { channelType: 'sms', id: SILENT }, message: { text: 'your code is 1234' } },
    });
    expect(f.simulator.message(smsSend.messageId!)?.plan).toBe('no_events');
  });
});

/** A second sender of the fixture's configuration with the default start-up timeout, health on `port`. */
function setUpAgain(f: Fixture, port: number): Promise<Sender> {
  const config = { ...f.config, sender: { ...f.config.sender, conversationTableReadTimeoutMs: 120_000 } };
  return startSender({ config, brokers: kafkaBrokers(), admin: { host: '127.0.0.1', port } }).then((s) => {
    cleanups.push(() => s.drain());
    return s;
  });
}
