import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startTracker, type Tracker } from '../../src/tracker/index.js';
import { javaCompatibleHash } from '../../src/kafka/partitioner.js';
import { messageId } from '../ingress/fixtures.js';
import { produce } from '../helpers/kafka.js';
import { rmSync } from 'node:fs';
import {
  expiredRecord,
  getJson,
  inboundRecord,
  latestByKey,
  rejectedRecord,
  resultRecord,
  statusRecord,
  trackerConfig,
  until,
  type TrackerTestConfig as Config,
} from './harness.js';

/**
 * The tracker role on the suite's broker: send results and delivery statuses in every order,
 * duplicated and late, fold into one state per message on message-state (read with
 * read_committed); inbound messages into conversation windows; the state survives a restart
 * (restored from the compacted topics), evicted states are read back, queries answer.
 */
let running: Tracker[] = [];
afterEach(async () => {
  await Promise.all(running.map((t) => t.drain()));
  running = [];
});

async function start(config: Config): Promise<Tracker> {
  const tracker = await startTracker({ config });
  running.push(tracker);
  await tracker.ready;
  return tracker;
}

describe('tracker', () => {
  it('one monotonic state per message whatever the order, duplicates and late statuses; windows never move back; queries answer', async () => {
    const id = randomUUID().slice(0, 8);
    const config = trackerConfig(id);
    const topics = config.kafka.topics;
    const tracker = await start(config);

    const [normal, early, failed, outsider] = [messageId(), messageId(), messageId(), messageId()];
    // normal: result, then read before delivered, sent late, a duplicate of delivered.
    // early: statuses before the send result. failed: failed, then a late read (recorded, not revived).
    // outsider: never sent through the relay.
    await produce(topics.sendResults, [resultRecord('req-normal', normal), resultRecord('req-failed', failed)]);
    const delivered = statusRecord(normal, 'delivered', '1700000002');
    await produce(topics.deliveryStatus, [
      statusRecord(normal, 'read', '1700000003'),
      delivered,
      statusRecord(normal, 'sent', '1700000001'),
      delivered,
      statusRecord(early, 'sent', '1700000001'),
      statusRecord(early, 'delivered', '1700000002'),
      statusRecord(failed, 'delivery_failed', '1700000002'),
      statusRecord(failed, 'read', '1700000009'),
      statusRecord(outsider, 'delivered', '1700000005'),
    ]);
    await produce(topics.sendResults, [resultRecord('req-early', early)]);
    await produce(topics.messages, [
      inboundRecord('+15550003333', '1700000100'),
      inboundRecord('+15550003333', '1700000050'),
    ]);

    await until('the final states', async () => {
      const { latest } = await latestByKey(topics.messageState, 300);
      return (
        latest.get(early)?.requestId === 'req-early' &&
        latest.get(normal)?.sentAt != null &&
        latest.get(failed)?.readAt != null &&
        latest.has(outsider)
      );
    });
    const { latest } = await latestByKey(topics.messageState);
    expect(latest.get(normal)).toMatchObject({
      status: 'read',
      requestId: 'req-normal',
      businessId: 'biz_1',
      acceptedAt: '2023-11-14T22:13:00.000Z',
      sentAt: new Date(1700000001000).toISOString(),
      deliveredAt: new Date(1700000002000).toISOString(),
      readAt: new Date(1700000003000).toISOString(),
      events: 4,
    });
    expect(latest.get(early)).toMatchObject({
      status: 'delivered',
      requestId: 'req-early',
      type: 'text',
      recipient: '+15550002222',
      events: 3,
    });
    expect(latest.get(failed)).toMatchObject({
      status: 'delivery_failed',
      readAt: new Date(1700000009000).toISOString(),
      failedAt: new Date(1700000002000).toISOString(),
    });
    expect((latest.get(failed)!.error as { code: string }).code).toBe('ERROR_CODE_MESSAGE_TEMPLATE_INPUT_INVALID');
    expect(latest.get(outsider)).toMatchObject({ status: 'delivered', requestId: null, acceptedAt: null });

    const windows = await latestByKey(topics.conversations);
    // Keyed and named by the canonical customer id, whichever form the provider wrote.
    expect(windows.latest.get('biz_1:15550003333')).toEqual({
      businessId: 'biz_1',
      customer: '15550003333',
      lastInboundAt: new Date(1700000100000).toISOString(),
      windowOpenUntil: new Date(1700000100000 + 24 * 3600_000).toISOString(),
    });
    expect(windows.records).toBe(1); // the earlier inbound message moved nothing

    // Queries: by message id, by request id, unknown, malformed.
    const get = (path: string) => getJson(tracker.address!, path);
    expect(await get(`/messages/${normal}`)).toMatchObject({
      status: 200,
      body: { messageId: normal, status: 'read' },
    });
    expect((await get(`/messages/${normal}`)).body).not.toHaveProperty('eventIds');
    expect(await get('/requests/req-failed')).toMatchObject({
      status: 200,
      body: { messageId: failed, status: 'delivery_failed' },
    });
    expect(await get(`/messages/${messageId()}`)).toMatchObject({ status: 404, body: { error: 'NOT_FOUND' } });
    expect(await get('/messages/%E0%A4%A')).toMatchObject({ status: 400, body: { error: 'INVALID_ARGUMENT' } });
    expect((await fetch(`${tracker.adminAddress}/readyz`)).status).toBe(200);
    const metrics = await (await fetch(`${tracker.adminAddress}/metrics`)).text();
    expect(metrics).toMatch(/msgbridge_tracker_events_total\{topic="delivery_status",outcome="duplicate"[^}]*\} 1\n/);
    expect(metrics).toMatch(
      /msgbridge_tracker_events_total\{topic="delivery_status",outcome="filled_timestamp"[^}]*\} 2\n/,
    );
    expect(metrics).toMatch(
      /msgbridge_tracker_events_total\{topic="delivery_status",outcome="filled_after_failure"[^}]*\} 1\n/,
    );
  }, 120_000);

  it('restores its state from the compacted topics after a restart, reads evicted states back, and never publishes a duplicate or a regression', async () => {
    const id = randomUUID().slice(0, 8);
    // The smallest cache: 100 states per task, and 300 messages of one task, so that most are
    // evicted whatever else the task goes through (random ids spread over 3 tasks can leave
    // each at 100 or fewer).
    const config = trackerConfig(id, { tracker: { maxCachedMessages: 100 } });
    const topics = config.kafka.topics;
    const ids: string[] = [];
    while (ids.length < 300) {
      const m = messageId();
      if (javaCompatibleHash(Buffer.from(m)) % 3 === 0) ids.push(m);
    }
    await produce(
      topics.sendResults,
      ids.map((m, i) => resultRecord(`req-${i}`, m)),
    );
    await produce(
      topics.deliveryStatus,
      ids.map((m) => statusRecord(m, 'delivered', '1700000002')),
    );
    let tracker = await start(config);
    await until(
      '300 delivered states',
      async () =>
        [...(await latestByKey(topics.messageState, 300)).latest.values()].filter((s) => s.status === 'delivered')
          .length === 300,
    );
    const before = await latestByKey(topics.messageState);
    expect(before.records).toBe(600); // accepted, then delivered: one record per change

    await tracker.drain();
    running = running.filter((t) => t !== tracker);
    // While it is down: duplicates (same event-id) and late lower statuses, then reads.
    await produce(topics.deliveryStatus, [
      ...ids.map((m) => statusRecord(m, 'delivered', '1700000002')),
      ...ids.map((m) => statusRecord(m, 'sent', '1700000001')),
      ...ids.map((m) => statusRecord(m, 'read', '1700000003')),
    ]);
    tracker = await start(config);
    await until(
      '300 read states',
      async () =>
        [...(await latestByKey(topics.messageState, 300)).latest.values()].filter((s) => s.status === 'read').length ===
        300,
    );
    const after = await latestByKey(topics.messageState);
    // The duplicates changed nothing; each late "sent" filled its timestamp; each read moved the status up.
    expect(after.records).toBe(600 + 300 + 300);
    for (const m of ids)
      expect(after.latest.get(m)).toMatchObject({
        status: 'read',
        events: 4,
        sentAt: new Date(1700000001000).toISOString(),
      });
    const metrics = await (await fetch(`${tracker.adminAddress}/metrics`)).text();
    expect(metrics).toMatch(/msgbridge_tracker_events_total\{topic="delivery_status",outcome="duplicate"[^}]*\} 300\n/);
    expect(
      Number(/msgbridge_tracker_evictions_total\{kind="message"[^}]*\} (\d+)/.exec(metrics)?.[1] ?? 0),
    ).toBeGreaterThan(0);
    expect(await tracker.request('req-7')).toMatchObject({ messageId: ids[7], status: 'read' });
  }, 180_000);

  it('keeps each rejected or expired request once, found by its request id, and restores it from request-outcomes (delta, and bulk into an empty store)', async () => {
    const id = randomUUID().slice(0, 8);
    const config = trackerConfig(id);
    const topics = config.kafka.topics;
    const rejectedIds = Array.from({ length: 20 }, (_, i) => `rej-${i}`);
    const expiredIds = Array.from({ length: 5 }, (_, i) => `exp-${i}`);
    const inputs = [...rejectedIds.map((r) => rejectedRecord(r)), ...expiredIds.map((r) => expiredRecord(r))];
    // Each twice (a redelivery), and a request rejected, then accepted when resubmitted.
    const resubmitted = messageId();
    await produce(topics.sendResults, [
      ...inputs,
      ...inputs,
      rejectedRecord('req-resubmitted'),
      resultRecord('req-resubmitted', resubmitted),
    ]);
    let tracker = await start(config);
    await until('26 outcomes', async () => (await latestByKey(topics.requestOutcomes, 300)).latest.size === 26);
    const before = await latestByKey(topics.requestOutcomes);
    expect(before.records).toBe(26);
    expect(before.latest.get('rej-3')).toMatchObject({
      requestId: 'rej-3',
      outcome: 'rejected',
      error: { code: 'ERROR_CODE_MESSAGE_TEXT_EMPTY', cntTraceId: 'trace-rej-3' },
      content: { text: ' ' },
    });

    const ask = async (requestId: string) => getJson(tracker.address!, `/requests/${requestId}`);
    const rejected = await ask('rej-3');
    expect(rejected).toMatchObject({
      status: 200,
      body: {
        requestId: 'rej-3',
        outcome: 'rejected',
        attempts: 1,
        maybeSent: false,
        error: { httpStatus: 400, cntTraceId: 'trace-rej-3' },
        expiresAt: null,
        at: '2026-11-24T10:00:00.000Z',
      },
    });
    expect(rejected.body).not.toHaveProperty('messageId');
    expect(await ask('exp-2')).toMatchObject({
      status: 200,
      body: {
        outcome: 'expired',
        expiresAt: '2026-11-24T09:59:00.000Z',
        expiredBy: 'ttlMs',
        content: { templateName: 'order_update' },
      },
    });
    // A request with a message answers as its message.
    expect(await ask('req-resubmitted')).toMatchObject({
      status: 200,
      body: { messageId: resubmitted, requestId: 'req-resubmitted' },
    });
    expect(await ask('rej-none')).toMatchObject({ status: 404 });
    const metrics = await (await fetch(`${tracker.adminAddress}/metrics`)).text();
    expect(metrics).toMatch(
      /msgbridge_tracker_events_total\{topic="send-results",outcome="outcome_unchanged"[^}]*\} 25\n/,
    );
    const stored = [
      ...metrics.matchAll(/msgbridge_tracker_store_entries\{[^}]*kind="request_outcome"[^}]*\} (\d+)/g),
    ].reduce((n, m) => n + Number(m[1]), 0);
    expect(stored).toBe(26);

    // A restart reads the outcomes it has not got (none: delta); redelivered results change nothing.
    await tracker.drain();
    running = running.filter((t) => t !== tracker);
    await produce(topics.sendResults, inputs);
    tracker = await start(config);
    expect(await ask('rej-7')).toMatchObject({
      status: 200,
      body: { outcome: 'rejected', error: { cntTraceId: 'trace-rej-7' } },
    });
    // Into an empty store (a new member, a lost volume): restored in bulk from request-outcomes.
    await tracker.drain();
    running = running.filter((t) => t !== tracker);
    rmSync(config.tracker.stateDir, { recursive: true, force: true });
    tracker = await start(config);
    // 503 until the restored states' indexes are built (a message of the request could be among them).
    await until('the indexes of the bulk restore', async () => (await ask('rej-0')).status !== 503);
    for (const r of [...rejectedIds, ...expiredIds]) expect((await ask(r)).status, r).toBe(200);
    expect(await ask('exp-4')).toMatchObject({
      status: 200,
      body: { outcome: 'expired', content: { parameters: [{ name: 'order', value: '42' }] } },
    });
    await new Promise((r) => setTimeout(r, 1000));
    expect((await latestByKey(topics.requestOutcomes)).records).toBe(26);
  }, 180_000);
});
