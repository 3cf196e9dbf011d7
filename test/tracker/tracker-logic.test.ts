import { describe, expect, it } from 'vitest';
import { eventIdOf, resultEventId } from '../../src/contracts/index.js';
import type { ConsumedRecord } from '../../src/kafka/group-consumer.js';
import { TrackerLogic } from '../../src/tracker/tracker-logic.js';
import { MemoryStore } from './memory-store.js';
import { inboundEvent, statusEvent } from '../ingress/fixtures.js';
import { accepted } from './harness.js';
import { loadConfig } from '../../src/config/load.js';
import { trackerTopics } from '../../src/tracker/tracker-topics.js';

/**
 * TrackerLogic's rules without Kafka or disk: a batch reads committed states through the cache
 * and the store, its outputs go to the task's partitions, and only commit() changes the cache
 * and writes the store (with the states replaced and the changelog positions reached).
 */
const topics = trackerTopics(loadConfig({ env: {} })); // the default topic names
let offset = 0;
const record = (topic: string, key: string, value: string, headers: Record<string, string>): ConsumedRecord => ({
  topic,
  partition: 0,
  offset: String(offset++),
  timestamp: '0',
  key: Buffer.from(key),
  value: Buffer.from(value),
  headers,
});
const result = (requestId: string, id: string) =>
  record('send-results', id, accepted(requestId, id), {
    'event-id': resultEventId('biz_1', requestId, 'accepted'),
    'business-id': 'biz_1',
  });
const status = (id: string, s: string, ts: string) => {
  const body = statusEvent(id, s, { timestamp: ts });
  return record('delivery_status', id, body, { 'event-id': eventIdOf(body), 'business-id': 'biz_1' });
};
const inbound = (customer: string, ts: string, text = 'hi', extra: Record<string, unknown> = {}) => {
  const body = inboundEvent(customer, text, { timestamp: ts, ...extra });
  return record('messages', customer, body, { 'event-id': eventIdOf(body), 'business-id': 'biz_1' });
};

function logic(maxCachedMessages = 100) {
  const skipped: string[] = [];
  const evicted: string[] = [];
  const l = new TrackerLogic({
    topics,
    partitions: 1,
    maxCachedMessages,
    maxCachedConversations: 100,
    counters: { event() {}, skipped: (r) => skipped.push(r), evicted: (k) => evicted.push(k) },
    now: () => new Date('2026-11-24T12:00:00.000Z'),
  });
  return { l, skipped, evicted };
}

describe('TrackerLogic', () => {
  it('publishes each change of a batch to the task partition, and changes nothing before commit', () => {
    const { l } = logic();
    const store = new MemoryStore();
    l.startTask(0, store);
    const out = l.process(
      0,
      l.decodeBatch([
        result('r1', 'm1'),
        status('m1', 'sent', '1700000001'),
        status('m1', 'sent', '1700000001'),
        inbound('+1', '1700000100'),
      ]),
    );
    const inboundId = eventIdOf(inboundEvent('+1', 'hi', { timestamp: '1700000100' }));
    expect(out.outputs.map((o) => [o.topic, o.partition, o.key])).toEqual([
      ['message-state', 0, 'm1'],
      ['message-state', 0, 'm1'],
      // The customer's message itself, then their window (keyed by the canonical customer id).
      ['inbound-messages', 0, inboundId],
      ['conversations', 0, 'biz_1:1'],
    ]);
    expect(l.message('m1')).toBeUndefined();
    expect(store.writes).toHaveLength(0);
    out.commit!(
      new Map([
        ['message-state', new Map([[0, 12]])],
        ['conversations', new Map([[0, 3]])],
      ]),
    );
    expect(l.message('m1')).toMatchObject({ status: 'sent', requestId: 'r1', events: 2 });
    expect(store.writes).toHaveLength(1);
    expect(store.writes[0]!.checkpoint).toEqual({ messageState: 12, conversations: 3 });
    // One write a key with the state it replaces (none yet).
    expect(store.writes[0]!.messages.map((m) => [m.id, m.state.status, m.previous])).toEqual([
      ['m1', 'sent', undefined],
    ]);
    expect(l.request('r1')?.messageId).toBe('m1');
  });

  it("keeps each inbound message once (by event id) on the task's partition, a button reply told apart; both forms of a customer are one window", () => {
    const { l } = logic();
    const store = new MemoryStore();
    l.startTask(0, store);
    const text = inbound('15550002222', '1700000100', 'Where is my order?');
    const button = inbound('+15550002222', '1700000200', 'Yes', { isButtonResponse: true, callbackData: 'confirm-42' });
    const first = l.process(0, l.decodeBatch([text, text, button]));
    // The repeated event in the same batch is one record; the second form moves the same window.
    expect(first.outputs.map((o) => [o.topic, o.key, o.headers?.schema])).toEqual([
      ['inbound-messages', eventIdOf(text.value!), 'inbound-message-record/v1'],
      ['conversations', 'biz_1:15550002222', 'conversations/v1'],
      ['inbound-messages', eventIdOf(button.value!), 'inbound-message-record/v1'],
      ['conversations', 'biz_1:15550002222', 'conversations/v1'],
    ]);
    expect(JSON.parse(String(first.outputs[2]!.value))).toEqual({
      eventId: eventIdOf(button.value!),
      businessId: 'biz_1',
      customer: '15550002222',
      from: '+15550002222',
      name: null,
      channel: 'whatsapp',
      at: '2023-11-14T22:16:40.000Z',
      text: 'Yes',
      button: { payload: 'confirm-42' },
      attachments: [],
      truncated: false,
      recordedAt: '2026-11-24T12:00:00.000Z',
    });
    first.commit!(new Map([['inbound-messages', new Map([[0, 7]])]]));
    expect(store.writes[0]!.checkpoint).toEqual({ inboundMessages: 7 });
    expect(store.writes[0]!.inbound!.map((i) => i.record.text)).toEqual(['Where is my order?', 'Yes']);
    // A redelivery later (the provider retries for days) is no output.
    expect(l.process(0, l.decodeBatch([text])).outputs).toEqual([]);
    // Found by either form of the customer, newest first.
    expect(l.inboundOfCustomer('+15550002222', 10)!.map((f) => f.record.text)).toEqual(['Yes', 'Where is my order?']);
    expect(l.inboundOfCustomer('15550002222', 1)!.map((f) => f.record.text)).toEqual(['Yes']);
    expect(l.conversation('biz_1:+15550002222')).toMatchObject({
      customer: '15550002222',
      lastInboundAt: '2023-11-14T22:16:40.000Z',
    });
  });

  it('skips an inbound message whose sender id is too long to be a customer id', () => {
    const { l, skipped } = logic();
    l.startTask(0, new MemoryStore());
    expect(l.process(0, l.decodeBatch([inbound('9'.repeat(513), '1700000100')])).outputs).toEqual([]);
    expect(skipped).toEqual(['invalid_event']);
  });

  it('reads a state it no longer caches from the store, and hands the store what it replaces', () => {
    const { l, evicted } = logic(100);
    const store = new MemoryStore();
    l.startTask(0, store);
    const ids = Array.from({ length: 150 }, (_, i) => `m${i}`);
    l.process(0, l.decodeBatch(ids.map((id, i) => result(`r${i}`, id)))).commit!(new Map());
    expect(evicted).toHaveLength(50);
    const reads = store.reads;
    const out = l.process(
      0,
      l.decodeBatch([status('m0', 'delivered', '1700000002'), status('m0', 'read', '1700000003')]),
    );
    expect(store.reads).toBe(reads + 1); // once a key a batch, not once an event
    out.commit!(new Map());
    const written = store.writes.at(-1)!.messages;
    expect(written).toHaveLength(1);
    expect(written[0]!.previous).toMatchObject({ messageId: 'm0', status: 'accepted', events: 1 });
    expect(written[0]!.state).toMatchObject({ status: 'read', events: 3, requestId: 'r0' });
  });

  it('a duplicate or a refused event in a batch is no output', () => {
    const { l, skipped } = logic();
    l.startTask(0, new MemoryStore());
    const out = l.process(
      0,
      l.decodeBatch([
        status('m1', 'read', '1700000003'),
        status('m1', 'read', '1700000003'),
        status('m1', 'sent', '1700000001'),
        status('m1', 'sent', '1700000005'),
      ]),
    );
    // read, then sent fills its timestamp; the duplicate read and the later sent change nothing.
    expect(out.outputs).toHaveLength(2);
    expect(skipped).toEqual([]);
  });

  it("keeps a rejected or expired result as its request's outcome: keyed by request id on the task's partition, the latest kept, a replay no output, written with its position", () => {
    const { l, skipped } = logic();
    const store = new MemoryStore();
    l.startTask(0, store);
    const rejected = (at: string, code = 'ERROR_CODE_MESSAGE_TEXT_EMPTY') =>
      record(
        'send-results',
        'r9',
        JSON.stringify({
          requestId: 'r9',
          businessId: 'biz_1',
          outcome: 'rejected',
          type: 'text',
          recipient: '+15550002222',
          attempts: 1,
          maybeSent: false,
          rejectedAt: at,
          error: {
            httpStatus: 400,
            type: 'ERROR_TYPE_INVALID_REQUEST',
            code,
            message: 'm',
            cntTraceId: 'trace-9',
            retriable: false,
          },
          content: { text: ' ' },
        }),
        { 'event-id': resultEventId('biz_1', 'r9', 'rejected'), 'business-id': 'biz_1' },
      );
    const first = l.process(
      0,
      l.decodeBatch([rejected('2026-11-24T10:00:00.000Z'), rejected('2026-11-24T10:00:00.000Z')]),
    );
    expect(skipped).toEqual([]);
    expect(first.outputs.map((o) => [o.topic, o.partition, o.key, o.headers?.schema])).toEqual([
      ['request-outcomes', 0, 'r9', 'request-outcome/v1'],
    ]);
    expect(l.requestOutcome('r9')).toBeUndefined();
    first.commit!(new Map([['request-outcomes', new Map([[0, 4]])]]));
    expect(store.writes[0]!.checkpoint).toEqual({ requestOutcomes: 4 });
    expect(store.writes[0]!.outcomes).toHaveLength(1);
    expect(l.requestOutcome('r9')).toMatchObject({
      requestId: 'r9',
      outcome: 'rejected',
      attempts: 1,
      maybeSent: false,
      error: { code: 'ERROR_CODE_MESSAGE_TEXT_EMPTY', cntTraceId: 'trace-9' },
      expiresAt: null,
      at: '2026-11-24T10:00:00.000Z',
      content: { text: ' ' },
      updatedAt: '2026-11-24T12:00:00.000Z',
    });
    // The same result again (a redelivery, a repeat) and an earlier one change nothing; a later one replaces it.
    expect(
      l.process(0, l.decodeBatch([rejected('2026-11-24T10:00:00.000Z'), rejected('2026-11-24T09:00:00.000Z', 'OLDER')]))
        .outputs,
    ).toHaveLength(0);
    const later = l.process(0, l.decodeBatch([rejected('2026-11-24T11:00:00.000Z', 'LATER')]));
    expect(later.outputs).toHaveLength(1);
    later.commit!(new Map());
    expect(l.requestOutcome('r9')?.error?.code).toBe('LATER');
    // The recipient's requests without a message list it, as it is now.
    expect(l.recipientOutcomes('+15550002222', 5).map((o) => [o.requestId, o.error?.code])).toEqual([['r9', 'LATER']]);
    expect(l.recipientOutcomes('+15550009999', 5)).toEqual([]);
    expect(store.writes.at(-1)!.outcomes![0]!.previous?.error?.code).toBe('ERROR_CODE_MESSAGE_TEXT_EMPTY');
    // A request with a message answers as its message; the outcome stays for the request without one.
    expect(l.request('r9')).toBeUndefined();
  });

  it('a send result of the previous release (no maybeSent) is applied, not skipped as invalid', () => {
    const { l, skipped } = logic();
    l.startTask(0, new MemoryStore());
    const old = JSON.stringify({
      requestId: 'r-old',
      businessId: 'biz_1',
      outcome: 'accepted',
      messageId: 'm-old',
      type: 'text',
      recipient: '+15550002222',
      attempts: 1,
      acceptedAt: '2026-11-01T10:00:00.000Z',
    });
    const out = l.process(
      0,
      l.decodeBatch([
        record('send-results', 'm-old', old, {
          'event-id': resultEventId('biz_1', 'r-old', 'accepted'),
          'business-id': 'biz_1',
        }),
      ]),
    );
    expect(skipped).toEqual([]);
    expect(out.outputs).toHaveLength(1);
    expect(JSON.parse(String(out.outputs[0]!.value))).toMatchObject({
      messageId: 'm-old',
      requestId: 'r-old',
      status: 'accepted',
    });
  });

  it('a failed store write fails the next batch (the task restarts from its checkpoint)', async () => {
    const { l } = logic();
    const store = new MemoryStore();
    l.startTask(0, store);
    store.fail = new Error('disk full');
    l.process(0, l.decodeBatch([result('r1', 'm1')])).commit!(new Map());
    await new Promise((r) => setTimeout(r, 0));
    expect(() => l.process(0, l.decodeBatch([result('r2', 'm2')]))).toThrow(
      /local store of task 0 failed a write: disk full/,
    );
  });

  it('answers recipient pages and requests across its tasks; a dropped task answers nothing', () => {
    const { l } = logic();
    const store = new MemoryStore();
    l.startTask(0, store);
    l.process(0, l.decodeBatch([result('r1', 'm1'), result('r2', 'm2')])).commit!(new Map());
    expect(
      l
        .listedMessages('recipient', '+15550002222', 10)
        .map((e) => e.state.messageId)
        .sort(),
    ).toEqual(['m1', 'm2']);
    expect(l.ownsTask(0)).toBe(true);
    l.dropTask(0);
    expect(l.ownsTask(0)).toBe(false);
    expect(l.message('m1')).toBeUndefined();
    expect(l.request('r1')).toBeUndefined();
  });
});
