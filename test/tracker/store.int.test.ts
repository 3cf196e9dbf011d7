import { cpSync, rmSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startTracker, type Tracker } from '../../src/tracker/index.js';
import { TaskStore, taskStoreDir } from '../../src/tracker/state-store.js';
import { topicSettings } from '../../src/kafka/topics.js';
import { messageId } from '../ingress/fixtures.js';
import { runCli } from '../helpers/cli.js';
import { produce, withAdmin } from '../helpers/kafka.js';
import {
  authHeaders,
  getJson,
  latestByKey,
  rejectedRecord,
  resultRecord,
  statusRecord,
  TEST_TOKENS,
  trackerConfig,
  until,
  type TrackerTestConfig,
} from './harness.js';

/**
 * The tracker's local stores on the suite's broker: a restart reads only what the changelog
 * holds past the store's checkpoint; a store older than the changelog is caught up, one whose
 * offsets do not match is rebuilt; queries answer on any member (forwarded to the owner) from
 * the stores, by message id, request id and recipient; the changelogs are bounded topics.
 */
let running: Tracker[] = [];
afterEach(async () => {
  await Promise.all(running.map((t) => t.drain()));
  running = [];
});

async function start(config: TrackerTestConfig): Promise<Tracker> {
  const tracker = await startTracker({ config });
  running.push(tracker);
  await tracker.ready;
  return tracker;
}

async function stop(tracker: Tracker): Promise<void> {
  expect(await tracker.drain()).toBe(true);
  running = running.filter((t) => t !== tracker);
}

async function metric(tracker: Tracker, pattern: RegExp): Promise<number> {
  const text = await (await fetch(`${tracker.adminAddress}/metrics`)).text();
  let sum = 0;
  for (const line of text.split('\n')) {
    const m = pattern.exec(line);
    if (m) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return sum;
}

const get = (base: string, path: string) => getJson(base, path);

describe('tracker local stores', () => {
  it('a restart reads only the delta; an older store is caught up; a store whose offsets do not match is rebuilt', async () => {
    const id = randomUUID().slice(0, 8);
    const config = trackerConfig(id);
    const topics = config.kafka.topics;
    const ids = Array.from({ length: 600 }, () => messageId());
    await produce(
      topics.sendResults,
      ids.map((m, i) => resultRecord(`req-${i}`, m)),
    );
    await produce(
      topics.deliveryStatus,
      ids.map((m) => statusRecord(m, 'delivered', '1700000002')),
    );

    // First start: no store, a bulk restore of empty changelogs; 1,200 state records written.
    let tracker = await start(config);
    expect(await metric(tracker, /^msgbridge_tracker_restores_total\{mode="bulk"/)).toBe(3);
    await until(
      '600 delivered',
      async () =>
        (await tracker.message(ids[599]!))?.status === 'delivered' &&
        (await tracker.message(ids[0]!))?.status === 'delivered',
    );
    await until('1,200 state records', async () => (await latestByKey(topics.messageState, 300)).records === 1200);
    await stop(tracker);
    const old = `${config.tracker.stateDir}-copy`;
    cpSync(config.tracker.stateDir, old, { recursive: true });

    // Restart with the stores on disk: every task resumes from its checkpoint, reading nothing.
    await produce(
      topics.deliveryStatus,
      ids.slice(0, 20).map((m) => statusRecord(m, 'read', '1700000003')),
    );
    tracker = await start(config);
    expect(await metric(tracker, /^msgbridge_tracker_restores_total\{mode="delta"/)).toBe(3);
    expect(await metric(tracker, /^msgbridge_tracker_restore_records_total\{mode="delta"/)).toBe(0);
    expect(await metric(tracker, /^msgbridge_tracker_store_entries\{task="\d+",kind="message"/)).toBe(600);
    await until('20 read', async () => (await tracker.message(ids[19]!))?.status === 'read');
    await stop(tracker);

    // A store older than the changelog (the copy, taken before the 20 reads): caught up from its checkpoint.
    rmSync(config.tracker.stateDir, { recursive: true, force: true });
    cpSync(old, config.tracker.stateDir, { recursive: true });
    tracker = await start(config);
    expect(await metric(tracker, /^msgbridge_tracker_restores_total\{mode="delta"/)).toBe(3);
    expect(await metric(tracker, /^msgbridge_tracker_restore_records_total\{mode="delta"/)).toBe(20);
    for (const m of ids.slice(0, 20))
      expect(await tracker.message(m)).toMatchObject({
        status: 'read',
        events: 3,
        requestId: expect.stringMatching(/^req-/),
      });
    expect(await tracker.message(ids[20]!)).toMatchObject({ status: 'delivered', events: 2 });
    await stop(tracker);

    // A store whose position is past the end of its changelog (the topic was recreated): rebuilt in bulk.
    const clusterId = await withAdmin(async (admin) => (await admin.describeCluster()).clusterId);
    const task = 1;
    const store = TaskStore.open(taskStoreDir(config.tracker.stateDir, config.tracker.groupId, task), {
      clusterId,
      task,
      partitions: 3,
      messageStateTopic: topics.messageState,
      conversationsTopic: topics.conversations,
      requestOutcomesTopic: topics.requestOutcomes,
      inboundMessagesTopic: topics.inboundMessages,
    });
    store.applyChangelog('messageState', [], { messageState: 1_000_000 }, 0);
    await store.close();
    tracker = await start(config);
    expect(await metric(tracker, /^msgbridge_tracker_restores_total\{mode="bulk"/)).toBe(1);
    expect(await metric(tracker, /^msgbridge_tracker_restores_total\{mode="delta"/)).toBe(2);
    expect(await metric(tracker, /^msgbridge_tracker_store_entries\{task="\d+",kind="message"/)).toBe(600);
    for (const [i, m] of ids.slice(0, 40).entries())
      expect((await tracker.message(m))?.status).toBe(i < 20 ? 'read' : 'delivered');
    expect(await tracker.request('req-5')).toMatchObject({ messageId: ids[5], status: 'read' });
    rmSync(old, { recursive: true, force: true });
  }, 180_000);

  it('any member answers: a message id is forwarded to its owner, a request id, a recipient and a business are asked of every member; nothing reads a topic', async () => {
    const id = randomUUID().slice(0, 8);
    const a = trackerConfig(id);
    const b = trackerConfig(id, {}, { MSGBRIDGE_TRACKER_STATE_DIR: `${a.tracker.stateDir}-b` });
    const topics = a.kafka.topics;
    const first = await start(a);
    const second = await start(b);
    await until(
      'both members own tasks',
      async () =>
        (await metric(first, /^msgbridge_tracker_tasks[ {]/)) > 0 &&
        (await metric(second, /^msgbridge_tracker_tasks[ {]/)) > 0 &&
        first.isReady() &&
        second.isReady(),
    );

    // 30 messages to one recipient (spread over every task), acceptedAt one second apart; 10 to another.
    const alice = '+15550007001';
    const ids = Array.from({ length: 40 }, () => messageId());
    const at = (i: number) => new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString();
    await produce(
      topics.sendResults,
      ids.map((m, i) => resultRecord(`fw-${i}`, m, at(i), i < 30 ? alice : '+15550007002')),
    );
    await until('40 states', async () => (await latestByKey(topics.messageState, 300)).records === 40);
    // Rejected requests (keyed by request id, over every task): any member finds each. fw-17 was
    // also accepted (on its message's task, maybe on the other member): its message wins.
    const rejections = Array.from({ length: 9 }, (_, i) => `fw-rejected-${i}`);
    await produce(topics.sendResults, [...rejections.map((r) => rejectedRecord(r)), rejectedRecord('fw-17')]);
    await until('10 outcomes', async () => (await latestByKey(topics.requestOutcomes, 300)).records === 10);

    for (const base of [first.address!, second.address!]) {
      for (const [i, m] of ids.entries()) {
        expect(await get(base, `/messages/${m}`)).toMatchObject({
          status: 200,
          body: { messageId: m, requestId: `fw-${i}` },
        });
      }
      expect(await get(base, '/requests/fw-17')).toMatchObject({ status: 200, body: { messageId: ids[17] } });
      expect(await get(base, '/requests/fw-none')).toMatchObject({ status: 404, body: { error: 'NOT_FOUND' } });
      for (const r of rejections)
        expect(await get(base, `/requests/${r}`)).toMatchObject({
          status: 200,
          body: { requestId: r, outcome: 'rejected', error: { cntTraceId: `trace-${r}` } },
        });
      expect(await get(base, `/messages/${messageId()}`)).toMatchObject({ status: 404 });
      // The rejected requests' recipient (no message of theirs): its page names them, from both members, the same order
      // everywhere.
      const customer = await get(base, `/messages?recipient=${encodeURIComponent('+15550002222')}`);
      expect(customer.body.messages).toEqual([]);
      expect((customer.body.requests as { requestId: string; outcome: string }[]).map((r) => r.requestId)).toEqual(
        [...rejections, 'fw-17'].sort().reverse(),
      );
      const top3 = await get(base, `/messages?recipient=${encodeURIComponent('+15550002222')}&limit=3`);
      expect((top3.body.requests as { requestId: string }[]).map((r) => r.requestId)).toEqual(
        [...rejections, 'fw-17'].sort().reverse().slice(0, 3),
      );

      // Newest first, in pages of 7, across both members' stores.
      const seen: string[] = [];
      let next: string | null = null;
      do {
        const page = await get(
          base,
          `/messages?recipient=${encodeURIComponent(alice)}&limit=7${next ? `&before=${next}` : ''}`,
        );
        expect(page.status).toBe(200);
        seen.push(...(page.body.messages as { messageId: string }[]).map((s) => s.messageId));
        next = page.body.next as string | null;
      } while (next);
      expect(seen).toEqual(ids.slice(0, 30).reverse());
      // A business's messages (all 40 are biz_1's), the same way.
      const ofBusiness: string[] = [];
      next = null;
      do {
        const page = await get(base, `/messages?business=biz_1&limit=9${next ? `&before=${next}` : ''}`);
        expect(page.status).toBe(200);
        expect(page.body.business).toBe('biz_1');
        ofBusiness.push(...(page.body.messages as { messageId: string }[]).map((s) => s.messageId));
        next = page.body.next as string | null;
      } while (next);
      expect(ofBusiness).toEqual([...ids].reverse());
      expect(await get(base, '/messages?business=biz_none')).toMatchObject({
        status: 200,
        body: { business: 'biz_none', messages: [], next: null },
      });
    }
    expect(await get(first.address!, '/messages?recipient=%2B1555&limit=0')).toMatchObject({ status: 400 });
    expect(await get(first.address!, '/messages?recipient=%2B1555&before=not-a-cursor!')).toMatchObject({
      status: 400,
    });
    expect(await get(first.address!, '/messages')).toMatchObject({ status: 400 });
    // The programmatic queries of either member are the same (forwarded with a credential).
    for (const i of [3, 4, 5, 6])
      expect(await second.request(`fw-${i}`, authHeaders())).toMatchObject({ messageId: ids[i] });
    for (const i of [3, 4, 5, 6])
      expect(await first.message(ids[i]!, authHeaders())).toMatchObject({ requestId: `fw-${i}` });

    // msgbridge status asks a running tracker (any member) with its token, and reads no topic.
    const env = {
      MSGBRIDGE__kafka__topics__messageState: topics.messageState,
      KAFKA_BROKERS: '127.0.0.1:9',
      MSGBRIDGE_TRACKER_TOKEN: TEST_TOKENS.read,
    };
    const noToken = await runCli(['status', 'fw-21', '--tracker', first.address!], {
      ...env,
      MSGBRIDGE_TRACKER_TOKEN: '',
    });
    expect(noToken.code).toBe(1);
    expect(noToken.stderr).toMatch(/wants a credential: set MSGBRIDGE_TRACKER_TOKEN/);
    const byFlag = await runCli(['status', 'fw-21', '--tracker', first.address!, '--token', TEST_TOKENS.operator], {
      ...env,
      MSGBRIDGE_TRACKER_TOKEN: 'wrong',
    });
    expect(byFlag.code, byFlag.stderr).toBe(0);
    const byRequest = await runCli(['status', 'fw-21', '--tracker', first.address!], env);
    expect(byRequest.code).toBe(0);
    expect(JSON.parse(byRequest.stdout)).toMatchObject({ messageId: ids[21], requestId: 'fw-21' });
    const byRejectedRequest = await runCli(['status', 'fw-rejected-2', '--tracker', second.address!], env);
    expect(byRejectedRequest.code, byRejectedRequest.stderr).toBe(0);
    expect(JSON.parse(byRejectedRequest.stdout)).toMatchObject({
      requestId: 'fw-rejected-2',
      outcome: 'rejected',
      error: { cntTraceId: 'trace-fw-rejected-2' },
    });
    const byMessage = await runCli(['status', ids[22]!], { ...env, MSGBRIDGE_TRACKER_URL: second.address! });
    expect(JSON.parse(byMessage.stdout)).toMatchObject({ messageId: ids[22] });
    const unknown = await runCli(['status', 'fw-none', '--tracker', first.address!], env);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no state for fw-none/);
    const badUrl = await runCli(['status', 'fw-1', '--tracker', 'ftp://x'], env);
    expect(badUrl.code).toBe(2);
    expect(badUrl.stderr).toMatch(/--tracker \/ MSGBRIDGE_TRACKER_URL: expected the http\(s\) address of a tracker/);
  }, 180_000);

  it('creates its changelogs compacted and deleted after the retention, with segments that roll', async () => {
    const id = randomUUID().slice(0, 8);
    const config = trackerConfig(id, { tracker: { stateRetentionMs: 7 * 86_400_000 } });
    await start(config);
    const settings = await withAdmin(async (admin) => {
      const described = await topicSettings(admin, [
        config.kafka.topics.messageState,
        config.kafka.topics.conversations,
        config.kafka.topics.requestOutcomes,
      ]);
      const names = ['cleanup.policy', 'retention.ms', 'segment.ms'];
      return Object.fromEntries(
        [...described].map(([topic, values]) => [
          topic,
          Object.fromEntries(names.map((name) => [name, values.get(name)])),
        ]),
      );
    });
    expect(settings[config.kafka.topics.messageState]).toEqual({
      'cleanup.policy': 'compact,delete',
      'retention.ms': String(7 * 86_400_000),
      'segment.ms': String(6 * 3_600_000),
    });
    // Request outcomes are kept as long as message states.
    expect(settings[config.kafka.topics.requestOutcomes]).toEqual(settings[config.kafka.topics.messageState]);
    expect(settings[config.kafka.topics.conversations]).toEqual({
      'cleanup.policy': 'compact,delete',
      'retention.ms': String(26 * 3_600_000),
      'segment.ms': String(Math.floor((26 * 3_600_000) / 10)),
    });
  }, 60_000);
});
