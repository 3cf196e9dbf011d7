import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { canonicalCustomerId, eventIdOf, resultEventId } from '../../src/contracts/index.js';
import { startTracker, type Tracker } from '../../src/tracker/index.js';
import { inboundEvent, messageId } from '../ingress/fixtures.js';
import { produce } from '../helpers/kafka.js';
import {
  getJson,
  latestByKey,
  statusRecord,
  trackerConfig,
  until,
  type TrackerTestConfig as Config,
} from './harness.js';

/**
 * A customer's conversation on the suite's broker (src/tracker/README.md "Conversations"): what
 * they wrote (texts, button replies; either form of their number, as the provider writes it) is
 * kept once per event on inbound-messages and in the task's store; what was sent to them is
 * found by either form of the number; the thread merges both, newest first, paged; and all of
 * it comes back after a restart (delta) and into an empty store (bulk).
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

const CUSTOMER = '15550004444';

/** An inbound webhook record as the ingress writes it now: keyed by the canonical customer. */
function inbound(from: string, timestamp: string, text: string, extra: Record<string, unknown> = {}) {
  const value = inboundEvent(from, text, { timestamp, ...extra });
  return { key: canonicalCustomerId(from), value, headers: { 'event-id': eventIdOf(value), 'business-id': 'biz_1' } };
}

/** An accepted result, keyed by its message id, to `recipient` on `channel`. */
function accepted(requestId: string, message: string, acceptedAt: string, recipient: string, channel = 'whatsapp') {
  const value = JSON.stringify({
    requestId,
    businessId: 'biz_1',
    outcome: 'accepted',
    messageId: message,
    type: 'text',
    recipient,
    channel,
    attempts: 1,
    maybeSent: false,
    acceptedAt,
    content: { text: `reply ${requestId}` },
  });
  return {
    key: message,
    value,
    headers: { 'event-id': resultEventId('biz_1', requestId, 'accepted'), 'business-id': 'biz_1' },
  };
}

describe('tracker: the customer as the provider sees them', () => {
  it('keeps what the customer wrote once per event, finds the customer by either form, merges the thread newest first and pages it; restores it all (delta, then bulk)', async () => {
    const id = randomUUID().slice(0, 8);
    const config = trackerConfig(id);
    const topics = config.kafka.topics;
    let tracker = await start(config);

    const [first, second, sms] = [messageId(), messageId(), messageId()];
    const hello = inbound(CUSTOMER, '1795168680', 'Where is my order?');
    const button = inbound(`+${CUSTOMER}`, '1795168800', 'Track my order', {
      isButtonResponse: true,
      callbackData: 'track-42',
    });
    // The provider redelivers the first one (same bytes, same event id) later.
    await produce(topics.messages, [hello, button, hello]);
    await produce(topics.sendResults, [
      accepted('r-1', first, '2026-11-20T09:59:00.000Z', `+${CUSTOMER}`),
      accepted('r-2', second, '2026-11-20T10:01:00.000Z', CUSTOMER),
      accepted('r-sms', sms, '2026-11-20T10:02:00.000Z', `+${CUSTOMER}`, 'sms'),
    ]);
    await produce(topics.deliveryStatus, [statusRecord(first, 'read', '1795168790')]);

    const get = (path: string) => getJson(tracker.address!, path);
    await until(
      'the conversation',
      async () =>
        ((await get(`/thread?customer=${CUSTOMER}&limit=100`)).body.items as unknown[] | undefined)?.length === 5,
    );
    // Exactly one record per event on the changelog, keyed by its event id.
    const kept = await latestByKey(topics.inboundMessages);
    expect(kept.records).toBe(2);
    expect([...kept.latest.keys()].sort()).toEqual([hello.headers['event-id'], button.headers['event-id']].sort());
    const metrics = await (await fetch(`${tracker.adminAddress}/metrics`)).text();
    expect(metrics).toMatch(/msgbridge_tracker_events_total\{topic="messages",outcome="inbound_duplicate"[^}]*\} 1\n/);

    // GET /messages?recipient= finds the messages sent to either form, by either form (also typed without encoding the
    // +).
    for (const form of [CUSTOMER, `%2B${CUSTOMER}`, `+${CUSTOMER}`]) {
      const page = await get(`/messages?recipient=${form}&limit=100`);
      expect(page.status, form).toBe(200);
      expect(
        (page.body.messages as { messageId: string }[]).map((m) => m.messageId),
        form,
      ).toEqual([sms, second, first]);
    }
    // The SMS keeps its channel: accepted is where it ends.
    expect((await get(`/messages/${sms}`)).body).toMatchObject({ status: 'accepted', send: { channel: 'sms' } });

    const thread = async (path: string) => {
      const answer = await get(path);
      expect(answer.status, JSON.stringify(answer.body)).toBe(200);
      return answer.body as {
        items: {
          direction: string;
          at: string;
          inbound?: { text: string; button: unknown; from: string };
          message?: { messageId: string; status: string };
        }[];
        next: string | null;
      };
    };
    const whole = await thread(`/thread?customer=%2B${CUSTOMER}&limit=100`);
    const summary = (items: typeof whole.items) =>
      items.map((i) =>
        i.direction === 'inbound' ? `in:${i.inbound!.text}` : `out:${i.message!.messageId}:${i.message!.status}`,
      );
    expect(summary(whole.items)).toEqual([
      `out:${sms}:accepted`,
      `out:${second}:accepted`,
      'in:Track my order',
      `out:${first}:read`,
      'in:Where is my order?',
    ]);
    expect(whole.items[2]).toMatchObject({
      direction: 'inbound',
      at: '2026-11-20T10:00:00.000Z',
      inbound: { from: `+${CUSTOMER}`, button: { payload: 'track-42' } },
    });
    expect(whole.next).toBeNull();
    // Paged by 2: the same items, in the same order, each once.
    const paged: typeof whole.items = [];
    let next: string | null = null;
    do {
      const page = await thread(`/thread?customer=${CUSTOMER}&limit=2${next ? `&before=${next}` : ''}`);
      paged.push(...page.items);
      next = page.next;
    } while (next !== null);
    expect(summary(paged)).toEqual(summary(whole.items));
    // The inbound messages alone.
    expect(
      ((await get(`/inbound?customer=${CUSTOMER}`)).body.messages as { text: string }[]).map((m) => m.text),
    ).toEqual(['Track my order', 'Where is my order?']);

    // A restart reads only what changed (delta): the same answers.
    await tracker.drain();
    running = [];
    tracker = await start(config);
    expect(summary((await thread(`/thread?customer=${CUSTOMER}&limit=100`)).items)).toEqual(summary(whole.items));

    // An empty store (a new member, a lost volume): restored in bulk from the changelogs, the same answers.
    await tracker.drain();
    running = [];
    rmSync(config.tracker.stateDir, { recursive: true, force: true });
    tracker = await start(config);
    const restored = await tracker.metrics.metrics();
    expect(restored).toMatch(/msgbridge_tracker_restores_total\{mode="bulk"[^}]*\} 3\n/);
    await until(
      'the indexes of the bulk restore',
      async () => (await get(`/thread?customer=${CUSTOMER}&limit=100`)).status === 200,
    );
    expect(summary((await thread(`/thread?customer=${CUSTOMER}&limit=100`)).items)).toEqual(summary(whole.items));
    // Byte for byte what was published (newest first).
    expect((await get(`/inbound?customer=${CUSTOMER}`)).body.messages).toEqual(
      [...kept.latest.values()].sort((a, b) => (String(a.at) < String(b.at) ? 1 : -1)),
    );
    // Nothing was written twice by the restarts.
    expect((await latestByKey(topics.inboundMessages)).records).toBe(2);
  }, 180_000);
});
