import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { open as lmdbOpen } from 'lmdb';
import { afterEach, describe, expect, it } from 'vitest';
import type { TrackedMessage } from '../../src/contracts/message-state.js';
import type { RequestOutcome } from '../../src/contracts/request-outcome.js';
import type { InboundMessageRecord } from '../../src/contracts/inbound-message.js';
import { TaskStore, taskStoreDir, type StoreIdentity } from '../../src/tracker/state-store.js';

/** The LMDB store of one task, on a temporary directory: states, indexes, checkpoint, expiry, identity. */
const identity: StoreIdentity = {
  clusterId: 'c1',
  task: 2,
  partitions: 12,
  messageStateTopic: 'message-state',
  conversationsTopic: 'conversations',
  requestOutcomesTopic: 'request-outcomes',
  inboundMessagesTopic: 'inbound-messages',
};
const dirs: string[] = [];
const open = (id: StoreIdentity = identity, dir = mkdtempSync(join(tmpdir(), 'store-test-'))) => {
  dirs.push(dir);
  return TaskStore.open(dir, id);
};
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

function state(id: string, over: Partial<TrackedMessage> = {}): TrackedMessage {
  return {
    messageId: id,
    requestId: `req-${id}`,
    businessId: 'biz_1',
    recipient: '+15550001111',
    type: 'text',
    status: 'accepted',
    acceptedAt: '2026-11-24T10:00:00.000Z',
    sentAt: null,
    deliveredAt: null,
    readAt: null,
    failedAt: null,
    error: null,
    events: 1,
    updatedAt: '2026-11-24T10:00:00.000Z',
    send: null,
    eventIds: ['e1'],
    ...over,
  };
}

describe('TaskStore', () => {
  it('reads a write at once (before it is durable), then from disk after a reopen, with its checkpoint', async () => {
    const store = open();
    const written = store.write({
      messages: [{ id: 'm1', state: state('m1'), previous: undefined }],
      conversations: [],
      checkpoint: { messageState: 7 },
    });
    expect(store.message('m1')?.status).toBe('accepted');
    await written;
    expect(store.checkpoint()).toEqual({ messageState: 7, conversations: 0 });
    await store.write({
      messages: [],
      conversations: [
        {
          key: 'biz_1:+1',
          window: {
            businessId: 'biz_1',
            customer: '+1',
            lastInboundAt: '2026-11-24T10:00:00.000Z',
            windowOpenUntil: '2026-11-25T10:00:00.000Z',
          },
          previous: undefined,
        },
      ],
      checkpoint: { conversations: 3 },
    });
    const dir = store.dir;
    await store.close();
    const again = TaskStore.open(dir, identity);
    expect(again.message('m1')).toEqual(state('m1'));
    expect(again.conversation('biz_1:+1')?.windowOpenUntil).toBe('2026-11-25T10:00:00.000Z');
    expect(again.checkpoint()).toEqual({ messageState: 7, conversations: 3 });
    await again.close();
  });

  it('keeps the request and recipient indexes right as states change; recipient pages are newest first', async () => {
    const store = open();
    const a = state('a', { acceptedAt: '2026-11-24T10:00:01.000Z' });
    const b = state('b', { acceptedAt: '2026-11-24T10:00:02.000Z', requestId: 'shared' });
    // A status before its result: no request, listed under its sent time; the result moves it.
    const cEarly = state('c', {
      requestId: null,
      acceptedAt: null,
      sentAt: '2026-11-24T10:00:09.000Z',
      status: 'sent',
    });
    await store.write({
      messages: [a, b, cEarly].map((s) => ({ id: s.messageId, state: s, previous: undefined })),
      conversations: [],
    });
    const cMerged = { ...cEarly, requestId: 'shared', acceptedAt: '2026-11-24T10:00:03.000Z' };
    await store.write({ messages: [{ id: 'c', state: cMerged, previous: cEarly }], conversations: [] });
    expect(store.messageIdsOfRequest('req-a')).toEqual(['a']);
    expect(store.messageIdsOfRequest('shared').sort()).toEqual(['b', 'c']);
    expect(store.messageIdsOfRequest('nobody')).toEqual([]);
    const first = store.listedMessages('recipient', '+15550001111', 2);
    expect(first.map((e) => e.id)).toEqual(['c', 'b']);
    expect(store.listedMessages('recipient', '+15550001111', 2, first[1]!.sort).map((e) => e.id)).toEqual(['a']);
    expect(store.listedMessages('recipient', '+15550001112', 5)).toEqual([]);
    await store.close();
  });

  it("keeps a business's messages, newest first, paged; a state whose business changes moves list", async () => {
    const store = open();
    const states = [
      state('a', { acceptedAt: '2026-11-24T10:00:01.000Z' }),
      state('b', { acceptedAt: '2026-11-24T10:00:02.000Z', recipient: '+15550009999' }),
      state('c', { acceptedAt: '2026-11-24T10:00:03.000Z', businessId: 'biz_2' }),
      // A status before its result, of a business the webhook did not name yet: in no business list.
      state('d', {
        requestId: null,
        acceptedAt: null,
        businessId: '',
        sentAt: '2026-11-24T10:00:04.000Z',
        status: 'sent',
      }),
    ];
    await store.write({
      messages: states.map((s) => ({ id: s.messageId, state: s, previous: undefined })),
      conversations: [],
    });
    const first = store.listedMessages('business', 'biz_1', 1);
    expect(first.map((e) => e.id)).toEqual(['b']);
    expect(store.listedMessages('business', 'biz_1', 5, first[0]!.sort).map((e) => e.id)).toEqual(['a']);
    expect(store.listedMessages('business', 'biz_2', 5).map((e) => e.id)).toEqual(['c']);
    const dMerged = { ...states[3]!, businessId: 'biz_2', requestId: 'req-d', acceptedAt: '2026-11-24T10:00:00.500Z' };
    await store.write({ messages: [{ id: 'd', state: dMerged, previous: states[3] }], conversations: [] });
    expect(store.listedMessages('business', 'biz_2', 5).map((e) => e.id)).toEqual(['c', 'd']);
    expect(store.listedMessages('business', 'biz_1', 5).map((e) => e.id)).toEqual(['b', 'a']);
    await store.close();
  });

  it('a store written before the business index (no index format) rebuilds its indexes, then lists by business', async () => {
    const store = open();
    const states = [
      state('a', { acceptedAt: '2026-11-24T10:00:01.000Z' }),
      state('b', { acceptedAt: '2026-11-24T10:00:02.000Z' }),
    ];
    await store.write({
      messages: states.map((s) => ({ id: s.messageId, state: s, previous: undefined })),
      conversations: [],
    });
    expect(store.indexesComplete()).toBe(true);
    const dir = store.dir;
    await store.close();
    // What the previous release left: the same databases without by-business, no format mark.
    const env = lmdbOpen({ path: join(dir, 'store.mdb'), maxDbs: 16 });
    await env.openDB({ name: 'by-business', encoding: 'string' }).drop();
    await env.openDB({ name: 'meta', encoding: 'msgpack' }).remove('indexFormat');
    await env.close();
    const old = TaskStore.open(dir, identity);
    expect(old.indexesComplete()).toBe(false);
    expect(old.buildIndexes(1, 0)).toEqual({ indexed: 1, done: false });
    expect(old.buildIndexes(10, 0)).toEqual({ indexed: 1, done: false });
    expect(old.buildIndexes(10, 0)).toEqual({ indexed: 0, done: true });
    expect(old.indexesComplete()).toBe(true);
    expect(old.listedMessages('business', 'biz_1', 5).map((e) => e.id)).toEqual(['b', 'a']);
    expect(old.listedMessages('recipient', '+15550001111', 5).map((e) => e.id)).toEqual(['b', 'a']);
    await old.close();
    // Marked: the next open does not rebuild again.
    const again = TaskStore.open(dir, identity);
    expect(again.indexesComplete()).toBe(true);
    await again.close();
  });

  it('applies changelog records in order: later wins, a tombstone or a foreign value deletes, an expired state is not kept', async () => {
    const store = open();
    const v = (s: TrackedMessage) => Buffer.from(JSON.stringify(s));
    const kept = store.applyChangelog(
      'messageState',
      [
        { key: 'm1', value: v(state('m1')) },
        { key: 'm1', value: v(state('m1', { status: 'read', events: 3 })) },
        { key: 'm2', value: v(state('m2')) },
        { key: 'm2', value: null },
        { key: 'm3', value: Buffer.from('not json') },
        { key: 'm4', value: v(state('m4', { updatedAt: '2020-01-01T00:00:00.000Z' })) },
      ],
      { messageState: 42 },
      Date.parse('2026-01-01T00:00:00Z'),
    );
    expect(kept).toBe(3);
    expect(store.message('m1')).toMatchObject({ status: 'read', events: 3 });
    expect(store.message('m2')).toBeUndefined();
    expect(store.message('m3')).toBeUndefined();
    expect(store.message('m4')).toBeUndefined();
    expect(store.messageIdsOfRequest('req-m2')).toEqual([]);
    expect(store.checkpoint()?.messageState).toBe(42);
    expect(store.stats().messages).toBe(1);
    await store.close();
  });

  it('a bulk load copies the bytes, later records win; its indexes are built afterwards in chunks, dropping what is expired or not a state', () => {
    const store = open();
    const v = (s: TrackedMessage) => Buffer.from(JSON.stringify(s));
    store.loadChangelog(
      [
        { key: 'm1', value: v(state('m1')) },
        { key: 'm2', value: v(state('m2', { updatedAt: '2020-01-01T00:00:00.000Z' })) },
        { key: 'm3', value: Buffer.from('{"foreign":true}') },
        { key: 'm1', value: v(state('m1', { status: 'delivered', requestId: 'r-final' })) },
      ],
      { messageState: 4 },
    );
    store.loadChangelog(
      [
        { key: 'm4', value: v(state('m4')) },
        { key: 'm4', value: null },
      ],
      { messageState: 6 },
    );
    expect(store.indexesComplete()).toBe(false);
    expect(store.message('m1')?.status).toBe('delivered');
    expect(store.messageIdsOfRequest('r-final')).toEqual([]);
    const steps: number[] = [];
    for (;;) {
      const step = store.buildIndexes(1, Date.parse('2026-01-01T00:00:00Z'));
      steps.push(step.indexed);
      if (step.done) break;
    }
    expect(steps).toEqual([1, 1, 1, 0]);
    expect(store.indexesComplete()).toBe(true);
    expect(store.messageIdsOfRequest('r-final')).toEqual(['m1']);
    expect(store.message('m2')).toBeUndefined();
    expect(store.stats().messages).toBe(1);
    expect(store.checkpoint()?.messageState).toBe(6);
  });

  it('expires states not updated within the retention, with their index entries, and windows past theirs', async () => {
    const store = open();
    const old = state('old', { updatedAt: '2026-10-01T00:00:00.000Z' });
    const fresh = state('fresh', { updatedAt: '2026-11-24T00:00:00.000Z' });
    await store.write({
      messages: [old, fresh].map((s) => ({ id: s.messageId, state: s, previous: undefined })),
      conversations: [
        {
          key: 'biz_1:+2',
          window: {
            businessId: 'biz_1',
            customer: '+2',
            lastInboundAt: '2026-11-20T00:00:00.000Z',
            windowOpenUntil: '2026-11-21T00:00:00.000Z',
          },
          previous: undefined,
        },
      ],
    });
    const gone = store.expire(Date.parse('2026-11-01T00:00:00Z'), Date.parse('2026-11-23T00:00:00Z'), 100);
    expect(gone).toEqual({ messages: 1, conversations: 1, outcomes: 0, inbound: 0 });
    expect(store.message('old')).toBeUndefined();
    expect(store.messageIdsOfRequest('req-old')).toEqual([]);
    expect(store.listedMessages('recipient', '+15550001111', 10).map((e) => e.id)).toEqual(['fresh']);
    expect(store.listedMessages('business', 'biz_1', 10).map((e) => e.id)).toEqual(['fresh']);
    expect(store.conversation('biz_1:+2')).toBeUndefined();
    // An update moves a state's expiry: the old entry goes with it.
    const updated = { ...fresh, updatedAt: '2026-11-24T01:00:00.000Z', status: 'sent' as const };
    await store.write({ messages: [{ id: 'fresh', state: updated, previous: fresh }], conversations: [] });
    expect(store.expire(Date.parse('2026-11-24T00:30:00Z'), 0, 100)).toEqual({
      messages: 0,
      conversations: 0,
      outcomes: 0,
      inbound: 0,
    });
    expect(store.message('fresh')?.status).toBe('sent');
    await store.close();
  });

  it('keeps request outcomes: read at once and after a reopen, restored from the changelog (a tombstone deletes), expired with the states', async () => {
    const outcome = (requestId: string, updatedAt: string): RequestOutcome => ({
      requestId,
      businessId: 'biz_1',
      outcome: 'rejected',
      type: 'text',
      recipient: '+15550001111',
      attempts: 2,
      maybeSent: true,
      error: { httpStatus: 400, type: 't', code: 'c', message: 'm', cntTraceId: 'x', retriable: false },
      expiresAt: null,
      expiredBy: null,
      at: updatedAt,
      content: { text: 'hello' },
      updatedAt,
    });
    const store = open();
    const written = store.write({
      messages: [],
      conversations: [],
      outcomes: [{ requestId: 'r1', outcome: outcome('r1', '2026-10-01T00:00:00.000Z'), previous: undefined }],
      checkpoint: { requestOutcomes: 3 },
    });
    expect(store.requestOutcome('r1')?.maybeSent).toBe(true);
    await written;
    store.applyChangelog(
      'requestOutcomes',
      [
        { key: 'r2', value: Buffer.from(JSON.stringify(outcome('r2', '2026-11-24T00:00:00.000Z'))) },
        { key: 'r3', value: Buffer.from(JSON.stringify(outcome('r3', '2026-11-24T00:00:00.000Z'))) },
        { key: 'r3', value: null },
        { key: 'r4', value: Buffer.from('{"not":"an outcome"}') },
      ],
      { requestOutcomes: 9 },
      0,
    );
    expect(store.requestOutcome('r2')?.content).toEqual({ text: 'hello' });
    expect(store.requestOutcome('r3')).toBeUndefined();
    expect(store.requestOutcome('r4')).toBeUndefined();
    // The recipient's outcomes, newest first; the deleted one is gone from that index too.
    expect(store.outcomesOfRecipient('+15550001111', 10)).toEqual(['r2', 'r1']);
    expect(store.outcomesOfRecipient('+15550001111', 1)).toEqual(['r2']);
    const dir = store.dir;
    await store.close();
    const again = TaskStore.open(dir, identity);
    expect(again.requestOutcome('r1')).toEqual(outcome('r1', '2026-10-01T00:00:00.000Z'));
    expect(again.checkpoint()).toEqual({ messageState: 0, conversations: 0, requestOutcomes: 9 });
    expect(again.expire(Date.parse('2026-11-01T00:00:00Z'), 0, 100)).toEqual({
      messages: 0,
      conversations: 0,
      outcomes: 1,
      inbound: 0,
    });
    expect(again.requestOutcome('r1')).toBeUndefined();
    expect(again.requestOutcome('r2')).toBeDefined();
    expect(again.outcomesOfRecipient('+15550001111', 10)).toEqual(['r2']);
    await again.close();
  });

  it('a store of the release before request outcomes is kept (not wiped): it gains them, its checkpoint without their position', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'store-test-'));
    const { requestOutcomesTopic: _t, ...older } = identity;
    const store = open(older as StoreIdentity, dir);
    await store.write({
      messages: [{ id: 'm1', state: state('m1'), previous: undefined }],
      conversations: [],
      checkpoint: { messageState: 5 },
    });
    await store.close();
    const upgraded = open(identity, dir);
    expect(upgraded.message('m1')).toEqual(state('m1'));
    expect(upgraded.checkpoint()).toEqual({ messageState: 5, conversations: 0 });
    expect(upgraded.checkpoint()?.requestOutcomes).toBeUndefined();
    await upgraded.close();
    // Once upgraded it is of this identity: another outcomes topic is another store.
    const other = open({ ...identity, requestOutcomesTopic: 'elsewhere' }, dir);
    expect(other.message('m1')).toBeUndefined();
    await other.close();
  });

  it("finds a recipient's messages and outcomes by either form of the number (+ or not): one customer", async () => {
    const store = open();
    const plus = state('plus', { recipient: '+15550002222', acceptedAt: '2026-11-24T10:00:01.000Z' });
    const bare = state('bare', { recipient: '15550002222', acceptedAt: '2026-11-24T10:00:02.000Z' });
    const opaque = state('opaque', { recipient: 'US.42', acceptedAt: '2026-11-24T10:00:03.000Z' });
    await store.write({
      messages: [plus, bare, opaque].map((s) => ({ id: s.messageId, state: s, previous: undefined })),
      conversations: [],
    });
    for (const form of ['15550002222', '+15550002222'])
      expect(store.listedMessages('recipient', form, 10).map((e) => e.id)).toEqual(['bare', 'plus']);
    expect(store.listedMessages('recipient', 'US.42', 10).map((e) => e.id)).toEqual(['opaque']);
    expect(store.listedMessages('recipient', '+US.42', 10)).toEqual([]);
    // The stored states keep the number as it was sent.
    expect(store.message('plus')?.recipient).toBe('+15550002222');
    await store.close();
  });

  it('keeps inbound messages once each: found by customer newest first and paged, restored from the changelog, expired after the retention', async () => {
    const inbound = (eventId: string, at: string, over: Partial<InboundMessageRecord> = {}): InboundMessageRecord => ({
      eventId,
      businessId: 'biz_1',
      customer: '15550002222',
      from: '+15550002222',
      name: null,
      channel: 'whatsapp',
      at,
      text: `text ${eventId}`,
      button: null,
      attachments: [],
      truncated: false,
      recordedAt: at,
      ...over,
    });
    const store = open();
    const written = store.write({
      messages: [],
      conversations: [],
      inbound: [
        { record: inbound('e1', '2026-11-24T10:00:00.000Z') },
        { record: inbound('e2', '2026-11-24T10:05:00.000Z', { button: { payload: 'yes' } }) },
      ],
      checkpoint: { inboundMessages: 2 },
    });
    // Read at once, before it is durable.
    expect(store.inboundMessage('e2')?.button).toEqual({ payload: 'yes' });
    await written;
    store.applyChangelog(
      'inboundMessages',
      [
        { key: 'e3', value: Buffer.from(JSON.stringify(inbound('e3', '2026-11-24T10:10:00.000Z'))) },
        {
          key: 'e4',
          value: Buffer.from(JSON.stringify(inbound('e4', '2026-11-24T10:11:00.000Z', { customer: '15550009999' }))),
        },
        { key: 'e5', value: Buffer.from(JSON.stringify(inbound('e5', '2026-11-24T10:12:00.000Z'))) },
        { key: 'e5', value: null },
        { key: 'e6', value: Buffer.from('{"not":"a record"}') },
        // A value whose event id is not its key is not trusted.
        { key: 'e7', value: Buffer.from(JSON.stringify(inbound('e8', '2026-11-24T10:13:00.000Z'))) },
        // Recorded before the retention: not kept.
        { key: 'e9', value: Buffer.from(JSON.stringify(inbound('e9', '2026-10-01T00:00:00.000Z'))) },
      ],
      { inboundMessages: 9 },
      Date.parse('2026-11-01T00:00:00Z'),
    );
    const first = store.inboundOfCustomer('15550002222', 2);
    expect(first.map((f) => f.record.eventId)).toEqual(['e3', 'e2']);
    expect(store.inboundOfCustomer('15550002222', 2, first[1]!.sort).map((f) => f.record.eventId)).toEqual(['e1']);
    expect(store.inboundOfCustomer('15550009999', 5).map((f) => f.record.eventId)).toEqual(['e4']);
    for (const id of ['e5', 'e6', 'e7', 'e8', 'e9']) expect(store.inboundMessage(id), id).toBeUndefined();
    expect(store.stats().inbound).toBe(4);
    const dir = store.dir;
    await store.close();
    const again = TaskStore.open(dir, identity);
    expect(again.inboundMessage('e1')).toEqual(inbound('e1', '2026-11-24T10:00:00.000Z'));
    expect(again.checkpoint()?.inboundMessages).toBe(9);
    expect(again.expire(Date.parse('2026-11-24T10:06:00Z'), 0, 100)).toEqual({
      messages: 0,
      conversations: 0,
      outcomes: 0,
      inbound: 2,
    });
    expect(again.inboundOfCustomer('15550002222', 10).map((f) => f.record.eventId)).toEqual(['e3']);
    await again.close();
  });

  it('lists inbound messages with long keys (64-character event ids, a long opaque customer id) and pages them with the shared cursor shape', async () => {
    const store = open();
    const customer = `opaque.${'x'.repeat(100)}`;
    const id = (n: number) => String(n).padStart(64, 'f');
    const record = (n: number): InboundMessageRecord => ({
      eventId: id(n),
      businessId: 'biz_1',
      customer,
      from: customer,
      name: null,
      channel: 'whatsapp',
      at: `2026-11-24T10:0${n}:00.000Z`,
      text: `t${n}`,
      button: null,
      attachments: [],
      truncated: false,
      recordedAt: '2026-11-24T10:00:00.000Z',
    });
    await store.write({ messages: [], conversations: [], inbound: [1, 2, 3].map((n) => ({ record: record(n) })) });
    const first = store.inboundOfCustomer(customer, 2);
    expect(first.map((f) => f.record.text)).toEqual(['t3', 't2']);
    // The sort key has a message's shape (15-digit time, NUL, id): the thread's cursor covers both lists.
    expect(first[1]!.sort).toBe(`${String(Date.parse('2026-11-24T10:02:00.000Z')).padStart(15, '0')}\u0000${id(2)}`);
    expect(store.inboundOfCustomer(customer, 2, first[1]!.sort).map((f) => f.record.text)).toEqual(['t1']);
    // Another customer whose id starts with this one's is not in its range.
    expect(store.inboundOfCustomer(customer.slice(0, 50), 5)).toEqual([]);
    await store.close();
  });

  it('the golden store of index format 2 (written by the release before canonical customer ids) is kept and moved once: either form finds the customer', async () => {
    // Written by test/fixtures/stores/make-format-2.ts with the code of that release.
    const dir = mkdtempSync(join(tmpdir(), 'store-test-'));
    dirs.push(dir);
    cpSync(join(import.meta.dirname, '..', 'fixtures', 'stores', 'format-2'), dir, { recursive: true });
    const golden = { ...identity, clusterId: 'golden', task: 0, partitions: 1 };
    const store = TaskStore.open(dir, golden);
    // Not wiped: its states, outcome and checkpoint are there (no inbound-messages position yet: read from its start).
    expect(store.checkpoint()).toEqual({ messageState: 3, conversations: 2, requestOutcomes: 1 });
    expect(store.message('01JGOLDEN0000000000000PLUS')?.recipient).toBe('+15550002222');
    // The outcomes' recipient index is moved at once; the states' is rebuilt in the background.
    expect(store.outcomesOfRecipient('15550002222', 10)).toEqual(['r-rejected']);
    expect(store.indexesComplete()).toBe(false);
    while (!store.buildIndexes(1, 0).done);
    expect(store.listedMessages('recipient', '15550002222', 10).map((e) => e.id)).toEqual([
      '01JGOLDEN0000000000000BARE',
      '01JGOLDEN0000000000000PLUS',
    ]);
    expect(store.listedMessages('recipient', '15550003333', 10).map((e) => e.id)).toEqual([
      '01JGOLDEN000000000000OTHER',
    ]);
    expect(store.listedMessages('recipient', '+15550002222', 10)).toHaveLength(2);
    expect(store.messageIdsOfRequest('r-bare')).toEqual(['01JGOLDEN0000000000000BARE']);
    // Its two windows of one customer (one per form of the key) are one, the latest, under the canonical key.
    expect(store.conversation('biz_1:15550002222')).toEqual({
      businessId: 'biz_1',
      customer: '15550002222',
      lastInboundAt: '2026-11-20T10:03:00.000Z',
      windowOpenUntil: '2026-11-21T10:03:00.000Z',
    });
    expect(store.conversation('biz_1:+15550002222')).toBeUndefined();
    expect(store.stats()).toMatchObject({ messages: 3, conversations: 1, outcomes: 1, inbound: 0 });
    await store.close();
    // Moved once: the next open finds it of this release.
    const again = TaskStore.open(dir, golden);
    expect(again.indexesComplete()).toBe(true);
    expect(again.listedMessages('recipient', '15550002222', 10)).toHaveLength(2);
    await again.close();
  });

  it('restores a window written under either form of the customer as one window, the latest', () => {
    const store = open();
    const window = (customer: string, lastInboundAt: string) =>
      Buffer.from(
        JSON.stringify({ businessId: 'biz_1', customer, lastInboundAt, windowOpenUntil: '2026-11-25T12:00:00.000Z' }),
      );
    store.applyChangelog(
      'conversations',
      [
        { key: 'biz_1:15550002222', value: window('15550002222', '2026-11-24T11:00:00.000Z') },
        { key: 'biz_1:+15550002222', value: window('+15550002222', '2026-11-24T10:00:00.000Z') },
      ],
      {},
      0,
    );
    expect(store.conversation('biz_1:15550002222')).toMatchObject({
      customer: '15550002222',
      lastInboundAt: '2026-11-24T11:00:00.000Z',
    });
    expect(store.stats().conversations).toBe(1);
  });

  it('a directory left by another cluster, topic or partition count is wiped, not reused', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'store-test-'));
    const store = open(identity, dir);
    await store.write({
      messages: [{ id: 'm1', state: state('m1'), previous: undefined }],
      conversations: [],
      checkpoint: { messageState: 5 },
    });
    await store.close();
    const other = open({ ...identity, clusterId: 'c2' }, dir);
    expect(other.message('m1')).toBeUndefined();
    expect(other.checkpoint()).toBeUndefined();
    // Empty, with nothing to index; and it is the new identity's store from now on.
    expect(other.indexesComplete()).toBe(true);
    await other.close();
    const again = open({ ...identity, clusterId: 'c2' }, dir);
    await again.write({
      messages: [{ id: 'm2', state: state('m2'), previous: undefined }],
      conversations: [],
      checkpoint: { messageState: 1 },
    });
    await again.close();
    const third = open({ ...identity, clusterId: 'c2' }, dir);
    expect(third.message('m2')).toBeDefined();
    await third.close();
  });

  it('names one directory per group and task', () => {
    expect(taskStoreDir('/var/lib/msgbridge', 'msgbridge-tracker', 7)).toBe(
      '/var/lib/msgbridge/msgbridge-tracker/task-7',
    );
    expect(taskStoreDir('/s', 'a/../b', 0)).toBe('/s/a_.._b/task-0');
  });
});
