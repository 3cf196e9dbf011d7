import { describe, expect, it } from 'vitest';
import type { ProviderError } from '../../src/contracts/common.js';
import { deliveryStatusEventSchema, type DeliveryStatus } from '../../src/contracts/webhook-events.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import {
  applyEvent,
  MAX_REMEMBERED_EVENT_IDS,
  resultEventFrom,
  statusEventFrom,
  statusRank,
  type ApplyResult,
  type ResultEvent,
  type StatusEvent,
  type TrackerEvent,
} from '../../src/tracker/state-rules.js';
import { isoFromEpochSeconds } from '../../src/contracts/time.js';
import { messageStateOf, messageStateSchema, type TrackedMessage } from '../../src/contracts/message-state.js';
import type { SendResult } from '../../src/contracts/send.js';

const NOW = new Date('2026-03-01T12:00:00.000Z');
const T0 = Date.parse('2026-03-01T10:00:00.000Z');
const at = (seconds: number) => new Date(T0 + seconds * 1000).toISOString();
const FAILURE: ProviderError = {
  message: 'not on WhatsApp',
  type: 'ERROR_TYPE_INVALID_REQUEST',
  code: 'ERROR_CODE_PHONE_NUMBER_BAD_FORMAT',
  cntTraceId: '123',
};

const SENT_ONCE = { attempts: 1, maybeSent: false, requestedType: 'text' } as const;
const result = (eventId = 'e-result', acceptedAt = at(0)): ResultEvent => ({
  kind: 'result',
  eventId,
  result: {
    requestId: 'order-42',
    businessId: 'biz_1',
    messageId: 'm1',
    type: 'text',
    recipient: '+15550002222',
    acceptedAt,
    send: SENT_ONCE,
  },
});

const OFFSET: Record<DeliveryStatus, number> = { sent: 1, delivered: 2, read: 3, delivery_failed: 4 };
const status = (
  s: DeliveryStatus,
  eventId: string = `e-${s}`,
  seconds = OFFSET[s],
  error?: ProviderError,
): StatusEvent => ({
  kind: 'status',
  eventId,
  businessId: 'biz_1',
  messageId: 'm1',
  status: s,
  at: at(seconds),
  error: s === 'delivery_failed' ? (error ?? FAILURE) : null,
  recipient: '15550002222',
});

function fold(
  events: TrackerEvent[],
  start?: TrackedMessage,
): { state: TrackedMessage | undefined; steps: ApplyResult[] } {
  let state = start;
  const steps: ApplyResult[] = [];
  for (const event of events) {
    const step = applyEvent(state, event, NOW);
    steps.push(step);
    state = step.state;
  }
  return { state, steps };
}

function permutations<T>(items: T[]): T[][] {
  if (items.length <= 1) return [items];
  return items.flatMap((item, i) =>
    permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [item, ...rest]),
  );
}

function subsets<T>(items: T[]): T[][] {
  return items
    .reduce<T[][]>((all, item) => [...all, ...all.map((s) => [...s, item])], [[]])
    .filter((s) => s.length > 0);
}

/** Seeded, so a failure names a reproducible order. */
function rng(seed: number): () => number {
  return () => {
    seed = (seed * 1103515245 + 12345) % 2 ** 31;
    return seed / 2 ** 31;
  };
}

/** Everything but the order-dependent list of ids, which is compared as a set. */
const comparable = (s: TrackedMessage | undefined) => s && { ...messageStateOf(s), eventIds: [...s.eventIds].sort() };

const ALL_EVENTS: TrackerEvent[] = [
  result(),
  status('sent'),
  status('delivered'),
  status('read'),
  status('delivery_failed'),
];

describe('applyEvent: the final state does not depend on arrival order', () => {
  it('every order of every subset of {result, sent, delivered, read, delivery_failed} converges, and no step lowers the status', () => {
    let orders = 0;
    for (const subset of subsets(ALL_EVENTS)) {
      const expected = comparable(fold(subset).state);
      const statuses = subset.flatMap((e) => (e.kind === 'status' ? [e.status] : []));
      const hasResult = subset.some((e) => e.kind === 'result');
      // The expected state, from the rules rather than from one order.
      expect(expected).toMatchObject({
        status:
          statuses.length === 0 ? 'accepted' : statuses.reduce((a, b) => (statusRank(a) >= statusRank(b) ? a : b)),
        requestId: hasResult ? 'order-42' : null,
        type: hasResult ? 'text' : null,
        recipient: hasResult ? '+15550002222' : '15550002222',
        acceptedAt: hasResult ? at(0) : null,
        sentAt: statuses.includes('sent') ? at(1) : null,
        deliveredAt: statuses.includes('delivered') ? at(2) : null,
        readAt: statuses.includes('read') ? at(3) : null,
        failedAt: statuses.includes('delivery_failed') ? at(4) : null,
        error: statuses.includes('delivery_failed') ? FAILURE : null,
        events: subset.length,
        updatedAt: NOW.toISOString(),
      });
      for (const order of permutations(subset)) {
        orders += 1;
        const { state, steps } = fold(order);
        expect(comparable(state), order.map((e) => e.eventId).join(' ')).toEqual(expected);
        // Every event of one per status fills something, so every step is published...
        expect(steps.every((s) => s.changed)).toBe(true);
        // ...and no published state ever has a lower status than the one before.
        const ranks = steps.map((s) => statusRank(s.state.status));
        expect(ranks).toEqual([...ranks].sort((a, b) => a - b));
      }
    }
    expect(orders).toBe(325);
  });

  it('the full set ends failed with every timestamp, with the result first, last or anywhere', () => {
    for (const order of permutations(ALL_EVENTS)) {
      expect(messageStateOf(fold(order).state!)).toEqual({
        messageId: 'm1',
        requestId: 'order-42',
        businessId: 'biz_1',
        recipient: '+15550002222',
        type: 'text',
        status: 'delivery_failed',
        acceptedAt: at(0),
        sentAt: at(1),
        deliveredAt: at(2),
        readAt: at(3),
        failedAt: at(4),
        error: FAILURE,
        events: 5,
        updatedAt: NOW.toISOString(),
        send: SENT_ONCE,
      });
    }
  });

  it('duplicates interleaved anywhere change nothing: same final state, changed=false, the same object back', () => {
    const random = rng(42);
    for (const order of permutations(ALL_EVENTS)) {
      const withDuplicates = [...order];
      for (const event of order) {
        const first = withDuplicates.indexOf(event);
        const position = first + 1 + Math.floor(random() * (withDuplicates.length - first));
        withDuplicates.splice(position, 0, { ...event });
      }
      const { state, steps } = fold(withDuplicates);
      expect(comparable(state)).toEqual(comparable(fold(order).state));
      const duplicates = steps.filter((s) => s.outcome === 'duplicate');
      expect(duplicates).toHaveLength(order.length);
      expect(duplicates.every((s) => !s.changed)).toBe(true);
    }
    const once = fold([status('read')]).state!;
    const again = applyEvent(once, status('read'), new Date(NOW.getTime() + 60_000));
    expect(again).toEqual({ state: once, changed: false, outcome: 'duplicate' });
    expect(again.state).toBe(once);
  });

  it('random streams with repeated statuses under new ids converge: each timestamp is the earliest seen', () => {
    const random = rng(7);
    const pool: TrackerEvent[] = [
      result(),
      status('sent', 'sent-a', 10),
      status('sent', 'sent-b', 5),
      status('delivered', 'delivered-a', 20),
      status('delivered', 'delivered-b', 30),
      status('read', 'read-a', 40),
      status('read', 'read-b', 35),
    ];
    const expected = {
      status: 'read',
      acceptedAt: at(0),
      sentAt: at(5),
      deliveredAt: at(20),
      readAt: at(35),
      failedAt: null,
    };
    for (let run = 0; run < 300; run++) {
      const order = [...pool].sort(() => random() - 0.5);
      const replayed = [...order, ...order.filter(() => random() < 0.5)];
      expect(fold(replayed).state).toMatchObject(expected);
    }
  });
});

describe('applyEvent: the rules one by one', () => {
  it('a late lower status only fills its own timestamp', () => {
    const read = fold([result(), status('read')]).state!;
    const late = applyEvent(read, status('delivered'), NOW);
    expect(late.outcome).toBe('filled_timestamp');
    expect(late.changed).toBe(true);
    expect(late.state).toMatchObject({ status: 'read', deliveredAt: at(2), readAt: at(3), events: 3 });
    expect(late.state.eventIds).toEqual(['e-result', 'e-read', 'e-delivered']);
    // The input is never mutated.
    expect(read.deliveredAt).toBeNull();
  });

  it('a late lower status with nothing to fill is refused and changes nothing', () => {
    const read = fold([status('sent'), status('read')]).state!;
    const late = applyEvent(read, status('sent', 'e-sent-retry', 9), NOW);
    expect(late).toEqual({ state: read, changed: false, outcome: 'regression_refused' });
    expect(late.state).toBe(read);
  });

  it('the same status again: an earlier time moves the timestamp back, a later one is redundant', () => {
    const delivered = fold([status('delivered', 'd1', 20)]).state!;
    expect(applyEvent(delivered, status('delivered', 'd2', 25), NOW)).toEqual({
      state: delivered,
      changed: false,
      outcome: 'redundant',
    });
    const earlier = applyEvent(delivered, status('delivered', 'd3', 15), NOW);
    expect(earlier).toMatchObject({
      changed: true,
      outcome: 'filled_timestamp',
      state: { status: 'delivered', deliveredAt: at(15), events: 2 },
    });
  });

  it('delivery_failed is terminal: a later read is recorded without reviving the message', () => {
    const failed = fold([result(), status('sent'), status('delivery_failed')]).state!;
    const read = applyEvent(failed, status('read'), NOW);
    expect(read.outcome).toBe('filled_after_failure');
    expect(read.state).toMatchObject({ status: 'delivery_failed', readAt: at(3), failedAt: at(4), error: FAILURE });
    // Nothing to fill any more: refused.
    expect(applyEvent(read.state, status('read', 'e-read-2', 8), NOW).outcome).toBe('regression_refused');
    // And a failure after read makes the message failed: the same end whatever the order.
    const readFirst = fold([result(), status('read')]).state!;
    expect(applyEvent(readFirst, status('delivery_failed'), NOW)).toMatchObject({
      outcome: 'applied',
      state: { status: 'delivery_failed', error: FAILURE },
    });
  });

  it('two failures: the error of the earliest one is kept, in either order', () => {
    const other: ProviderError = {
      message: 'opted out',
      type: 'ERROR_TYPE_INVALID_REQUEST',
      code: 'ERROR_CODE_MESSAGE_CUSTOMER_OPTED_OUT',
    };
    const early = status('delivery_failed', 'f-early', 4, FAILURE);
    const late = status('delivery_failed', 'f-late', 9, other);
    for (const order of [
      [early, late],
      [late, early],
    ]) {
      expect(fold(order).state).toMatchObject({ failedAt: at(4), error: FAILURE });
    }
  });

  it('a status before its send result is kept, and merged when the result comes without lowering it', () => {
    const delivered = fold([status('sent'), status('delivered')]).state!;
    expect(delivered).toMatchObject({
      requestId: null,
      type: null,
      acceptedAt: null,
      recipient: '15550002222',
      status: 'delivered',
    });
    const merged = applyEvent(delivered, result(), NOW);
    expect(merged.outcome).toBe('result_merged');
    expect(merged.state).toMatchObject({
      requestId: 'order-42',
      type: 'text',
      recipient: '+15550002222',
      acceptedAt: at(0),
      status: 'delivered',
      sentAt: at(1),
      deliveredAt: at(2),
      events: 3,
    });
  });

  it('a message not sent through the relay still gets a state, without requestId', () => {
    const state = fold([status('read')]).state!;
    expect(messageStateOf(state)).toEqual({
      messageId: 'm1',
      requestId: null,
      businessId: 'biz_1',
      recipient: '15550002222',
      type: null,
      status: 'read',
      acceptedAt: null,
      sentAt: null,
      deliveredAt: null,
      readAt: at(3),
      failedAt: null,
      error: null,
      events: 1,
      updatedAt: NOW.toISOString(),
      send: null,
    });
  });

  it('updatedAt is the time of the last change only', () => {
    const first = applyEvent(undefined, result(), new Date('2026-03-01T10:00:05Z')).state;
    const refused = applyEvent(first, result('e-result-2', at(1)), new Date('2026-03-01T11:00:00Z'));
    expect(refused).toMatchObject({ changed: false, outcome: 'redundant' });
    expect(refused.state.updatedAt).toBe('2026-03-01T10:00:05.000Z');
    expect(applyEvent(first, status('sent'), new Date('2026-03-01T12:00:00Z')).state.updatedAt).toBe(
      '2026-03-01T12:00:00.000Z',
    );
  });

  it('remembers a bounded number of event ids, most recent last', () => {
    const events = Array.from({ length: 40 }, (_, i) => status('delivered', `d${i}`, 100 - i));
    const state = fold(events).state!;
    expect(state.events).toBe(40);
    expect(state.eventIds).toHaveLength(MAX_REMEMBERED_EVENT_IDS);
    expect(state.eventIds.at(-1)).toBe('d39');
    expect(state.eventIds[0]).toBe(`d${40 - MAX_REMEMBERED_EVENT_IDS}`);
  });

  it('refuses an event for another message', () => {
    const state = fold([status('sent')]).state!;
    expect(() => applyEvent(state, { ...status('read'), messageId: 'm2' }, NOW)).toThrow(/m2/);
  });
});

describe('restore from message-state', () => {
  it('the published value parses back, and deduplication survives it', () => {
    const state = fold([status('sent'), result(), status('delivery_failed')]).state!;
    const restored = messageStateSchema.parse(JSON.parse(JSON.stringify(state)));
    expect(restored).toEqual(state);
    expect(applyEvent(restored, status('sent'), NOW)).toMatchObject({ changed: false, outcome: 'duplicate' });
  });

  it('send defaults to null in a state written before it existed; a result brings attempts, maybeSent and the requested type', () => {
    const { send: _send, ...older } = fold([status('read')]).state!;
    expect(messageStateSchema.parse(older).send).toBeNull();
    const accepted = {
      requestId: 'order-42',
      businessId: 'biz_1',
      messageId: 'm1',
      recipient: '+15550002222',
      acceptedAt: at(0),
      outcome: 'accepted',
      attempts: 3,
      maybeSent: true,
      type: 'text',
      sentAs: 'template',
    } as const;
    const event = resultEventFrom(accepted as unknown as SendResult, 'e-r')!;
    const state = applyEvent(messageStateSchema.parse(older), event, NOW).state;
    expect(state).toMatchObject({
      type: 'template',
      status: 'read',
      send: { attempts: 3, maybeSent: true, requestedType: 'text' },
    });
    // The same result again under another id changes nothing; one with other attempts does.
    expect(applyEvent(state, { ...event, eventId: 'e-r2' }, NOW)).toMatchObject({
      changed: false,
      outcome: 'redundant',
    });
    expect(
      applyEvent(
        state,
        {
          ...event,
          eventId: 'e-r3',
          result: { ...event.result, send: { attempts: 1, maybeSent: false, requestedType: 'text' } },
        },
        NOW,
      ),
    ).toMatchObject({ changed: true });
  });

  it('keeps the channel the result names (an SMS ends at accepted); absent in states and results written before it', () => {
    const base = {
      requestId: 'r-sms',
      businessId: 'biz_1',
      messageId: 'm-sms',
      recipient: '+15550002222',
      acceptedAt: at(0),
      outcome: 'accepted',
      attempts: 1,
      maybeSent: false,
      type: 'text',
    } as const;
    const state = applyEvent(
      undefined,
      resultEventFrom({ ...base, channel: 'sms' } as SendResult, 'e-sms')!,
      NOW,
    ).state;
    expect(state).toMatchObject({ status: 'accepted', send: { channel: 'sms' } });
    expect(messageStateSchema.parse(JSON.parse(JSON.stringify(state))).send!.channel).toBe('sms');
    // The same result without the field (a result of an earlier release) is another summary: applied.
    expect(applyEvent(state, resultEventFrom(base as SendResult, 'e-old')!, NOW).state.send).not.toHaveProperty(
      'channel',
    );
    const { channel: _c, ...older } = state.send!;
    expect(messageStateSchema.parse({ ...state, send: older }).send).not.toHaveProperty('channel');
  });

  it("keeps the request's content from the result, bounded; a later result without content (a repeat's) keeps it", () => {
    const base = {
      requestId: 'order-42',
      businessId: 'biz_1',
      messageId: 'm1',
      recipient: '+15550002222',
      acceptedAt: at(0),
      outcome: 'accepted',
      attempts: 1,
      maybeSent: false,
      type: 'template',
    } as const;
    const parameters = Array.from({ length: 30 }, (_, i) => ({ name: `p${i}`, value: 'v'.repeat(300) }));
    const event = resultEventFrom(
      { ...base, content: { templateName: 'order_update', parameters } } as SendResult,
      'e-r',
    )!;
    const state = applyEvent(undefined, event, NOW).state;
    const content = state.send!.content!;
    expect(content).toMatchObject({ templateName: 'order_update', truncated: true });
    expect(content.parameters).toHaveLength(20);
    expect(content.parameters![0]!.value).toHaveLength(256);
    expect(messageStateSchema.parse(JSON.parse(JSON.stringify(state))).send!.content).toEqual(content);
    const repeat = resultEventFrom(base as SendResult, 'e-r2')!;
    expect(repeat.result.send!.content).toBeUndefined();
    expect(applyEvent(state, repeat, NOW)).toMatchObject({ changed: false, outcome: 'redundant' });
    // Absent in states written before it: "not recorded".
    const { content: _c, ...older } = state.send!;
    expect(messageStateSchema.parse({ ...state, send: older }).send!.content).toBeUndefined();
  });

  it('eventIds defaults to none; a bad status or time is rejected', () => {
    const { eventIds: _ids, ...published } = fold([status('read')]).state!;
    expect(messageStateSchema.parse(published).eventIds).toEqual([]);
    expect(messageStateSchema.safeParse({ ...published, status: 'seen' }).success).toBe(false);
    expect(messageStateSchema.safeParse({ ...published, readAt: 'yesterday' }).success).toBe(false);
  });
});

describe('events from the input topics', () => {
  const body = {
    topic: 'delivery_status',
    timestamp: '1772359200',
    sender: { channelType: 'whatsapp', id: '+15550001111' },
    recipient: { channelType: 'whatsapp', id: '+15550002222', name: null },
    statusUpdate: { id: '01JABCDEFGHJKMNPQRSTVWXYZ0', status: 'delivery_failed', error: FAILURE, metadata: null },
  };

  it('a parsed delivery_status webhook becomes a status event (business and event id from the headers)', () => {
    const event = statusEventFrom(deliveryStatusEventSchema.parse(body), { eventId: 'abc', businessId: 'biz_1' });
    expect(event).toEqual({
      kind: 'status',
      eventId: 'abc',
      businessId: 'biz_1',
      messageId: '01JABCDEFGHJKMNPQRSTVWXYZ0',
      status: 'delivery_failed',
      at: '2026-03-01T10:00:00.000Z',
      error: FAILURE,
      recipient: '+15550002222',
    });
    const sent = statusEventFrom(
      deliveryStatusEventSchema.parse({ ...body, statusUpdate: { id: 'm', status: 'sent', error: null } }),
      { eventId: 'x', businessId: 'b' },
    );
    expect(sent.error).toBeNull();
    expect(() => statusEventFrom(deliveryStatusEventSchema.parse(body), { eventId: '', businessId: 'biz_1' })).toThrow(
      /eventId/,
    );
  });

  it('only accepted send results become events', () => {
    const accepted = {
      requestId: 'order-42',
      businessId: 'biz_1',
      outcome: 'accepted' as const,
      messageId: 'm1',
      type: 'text' as const,
      recipient: '+15550002222',
      attempts: 1,
      maybeSent: false,
      acceptedAt: at(0),
    };
    expect(resultEventFrom(accepted, 'e-result')).toEqual(result());
    const rejected = {
      requestId: 'r',
      outcome: 'rejected' as const,
      attempts: 0,
      maybeSent: false,
      error: { message: 'x', type: 't', code: 'c', retriable: false },
    };
    expect(resultEventFrom(rejected, 'e')).toBeUndefined();
  });

  it('unparseable or out-of-range times are refused with INVALID_ARGUMENT naming the field', () => {
    expect(isoFromEpochSeconds('0')).toBe('1970-01-01T00:00:00.000Z');
    for (const bad of ['', 'abc', '1.5', '-1', '999999999999', '1234567890123']) {
      expect(() => isoFromEpochSeconds(bad), bad).toThrow(/timestamp/);
    }
    const bad = (event: TrackerEvent) => {
      try {
        applyEvent(undefined, event, NOW);
      } catch (err) {
        return err;
      }
      return undefined;
    };
    for (const time of [
      'yesterday',
      '2026-03-01',
      '2026-02-30T25:00:00Z',
      '2026-03-01T10:00:00',
      '+012026-03-01T10:00:00.000Z',
    ]) {
      const err = bad({ ...status('sent'), at: time });
      expect(isMsgbridgeError(err, 'INVALID_ARGUMENT'), time).toBe(true);
      expect((err as Error).message).toMatch(/^at must be an ISO 8601 time/);
    }
    expect(isMsgbridgeError(bad(result('e', 'not a time')), 'INVALID_ARGUMENT')).toBe(true);
    expect(isMsgbridgeError(bad({ ...status('sent'), messageId: '' }), 'INVALID_ARGUMENT')).toBe(true);
    expect(() => applyEvent(undefined, status('sent'), new Date(NaN))).toThrow(/now/);
  });

  it('accepts ISO times with an offset and stores them in UTC', () => {
    const state = applyEvent(undefined, { ...status('sent'), at: '2026-03-01T12:00:01+02:00' }, NOW).state;
    expect(state.sentAt).toBe('2026-03-01T10:00:01.000Z');
  });
});
