import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  decideConversation,
  fallbackBody,
  outsideWindowFailure,
  OUTSIDE_WINDOW_CODE,
  type GuardInput,
} from '../../src/sender/conversation-guard.js';
import {
  ConversationTable,
  conversationEntry,
  tableKey,
  type WindowLookup,
} from '../../src/sender/conversation-table.js';
import { sendFailureSchema } from '../../src/contracts/index.js';

const NOW = Date.parse('2026-03-01T12:00:00Z');
const HOUR = 3_600_000;
const open: WindowLookup = { state: 'open', openUntil: NOW + HOUR };
const closed: WindowLookup = { state: 'closed', openUntil: NOW - HOUR };
const neverSeen: WindowLookup = { state: 'closed', openUntil: null };
const incomplete: WindowLookup = { state: 'unknown', reason: 'incomplete' };
const evicted: WindowLookup = { state: 'unknown', reason: 'evicted' };
const fallbackTemplate = { templateName: 'order_update', parameters: [{ name: 'order', value: '42' }] };

function decide(
  window: WindowLookup,
  overrides: Partial<GuardInput> = {},
  request: Partial<GuardInput['request']> = {},
) {
  let looked = 0;
  const decision = decideConversation({
    mode: 'reject',
    request: { type: 'text', ...request },
    lookup: () => {
      looked += 1;
      return window;
    },
    now: NOW,
    requestTime: NOW - 10_000,
    graceMs: 1000,
    ...overrides,
  });
  return { decision, looked };
}

describe('conversation window guard: the decision', () => {
  it('off: every text is sent as it is, without a lookup, a fallbackTemplate never used', () => {
    for (const window of [open, closed, neverSeen, incomplete]) {
      expect(decide(window, { mode: 'off' }, { fallbackTemplate })).toEqual({
        decision: { action: 'send', why: 'off' },
        looked: 0,
      });
    }
  });

  it('a template is always sent: the window only limits free-form text', () => {
    expect(decide(closed, {}, { type: 'template' })).toEqual({
      decision: { action: 'send', why: 'template' },
      looked: 0,
    });
    expect(decide(neverSeen, {}, { type: 'template' }).decision.action).toBe('send');
  });

  it('conversationWindow "ignore" sends the text whatever the window', () => {
    expect(decide(closed, {}, { conversationWindow: 'ignore' })).toEqual({
      decision: { action: 'send', why: 'override' },
      looked: 0,
    });
    expect(decide(neverSeen, {}, { conversationWindow: 'ignore', fallbackTemplate }).decision).toEqual({
      action: 'send',
      why: 'override',
    });
  });

  it("an SMS text is sent as it is, without a lookup: the 24-hour rule is WhatsApp's (its fallbackTemplate never used)", () => {
    for (const channelType of ['sms', 'SMS']) {
      for (const window of [closed, neverSeen, incomplete]) {
        expect(decide(window, {}, { recipient: { channelType }, fallbackTemplate })).toEqual({
          decision: { action: 'send', why: 'sms' },
          looked: 0,
        });
      }
    }
    // A young SMS request does not wait either; a WhatsApp text to the same closed window is still refused.
    expect(decide(closed, { requestTime: NOW }, { recipient: { channelType: 'sms' } }).decision).toEqual({
      action: 'send',
      why: 'sms',
    });
    expect(decide(closed, {}, { recipient: { channelType: 'whatsapp' } }).decision).toEqual({
      action: 'reject',
      window: closed,
    });
  });

  it('an open window: sent (a fallbackTemplate is not used)', () => {
    expect(decide(open).decision).toEqual({ action: 'send', why: 'open' });
    expect(decide(open, {}, { fallbackTemplate }).decision).toEqual({ action: 'send', why: 'open' });
  });

  it('a known closed window: rejected, with the time it closed', () => {
    expect(decide(closed).decision).toEqual({ action: 'reject', window: closed });
  });

  it('a customer never seen, the table complete: closed, rejected', () => {
    expect(decide(neverSeen).decision).toEqual({ action: 'reject', window: neverSeen });
  });

  it('the table cannot tell (not complete, or open windows evicted): sent as it is, never refused', () => {
    expect(decide(incomplete).decision).toEqual({ action: 'send', why: 'unknown' });
    expect(decide(evicted, {}, { fallbackTemplate }).decision).toEqual({ action: 'send', why: 'unknown' });
  });

  it('closed with a fallbackTemplate: the template instead', () => {
    expect(decide(closed, {}, { fallbackTemplate }).decision).toEqual({
      action: 'fallback',
      template: fallbackTemplate,
      window: closed,
    });
    expect(decide(neverSeen, {}, { fallbackTemplate }).decision).toEqual({
      action: 'fallback',
      template: fallbackTemplate,
      window: neverSeen,
    });
  });

  it('closed, the request younger than the grace: wait until it is that old (the window may be opening), then decide', () => {
    const young = { requestTime: NOW - 200, graceMs: 1000 };
    expect(decide(closed, young).decision).toEqual({ action: 'wait', untilMs: NOW + 800 });
    expect(decide(neverSeen, young, { fallbackTemplate }).decision).toEqual({ action: 'wait', untilMs: NOW + 800 });
    // An open or unknown window never waits.
    expect(decide(open, young).decision.action).toBe('send');
    expect(decide(incomplete, young).decision.action).toBe('send');
    // At the grace's end, and with no grace: decided at once.
    expect(decide(closed, { requestTime: NOW - 1000, graceMs: 1000 }).decision.action).toBe('reject');
    expect(decide(closed, { requestTime: NOW, graceMs: 0 }).decision.action).toBe('reject');
  });

  it('the rejection error: stable code, not retriable, the closing time or null, a valid send failure', () => {
    const error = outsideWindowFailure({ state: 'closed', openUntil: NOW - HOUR });
    expect(error).toMatchObject({
      code: OUTSIDE_WINDOW_CODE,
      type: 'RELAY_CONVERSATION_WINDOW',
      retriable: false,
      details: { windowOpenUntil: '2026-03-01T11:00:00.000Z' },
    });
    expect(error.message).toMatch(/closed at 2026-03-01T11:00:00.000Z/);
    const never = outsideWindowFailure({ state: 'closed', openUntil: null });
    expect(never.details).toEqual({ windowOpenUntil: null });
    expect(never.message).toMatch(/no message from them in the last 24 hours is known/);
    expect(sendFailureSchema.parse(error)).toEqual(error);
  });

  it('the fallback body: the template to the text recipient, with the pass-through fields but not the text-only ones', () => {
    const text = {
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      message: { text: 'hi' },
      callbackData: 'cb-1',
      campaignName: 'spring',
    };
    expect(fallbackBody(text, '+15550002222', { ...fallbackTemplate, language: 'en' })).toEqual({
      callbackData: 'cb-1',
      campaignName: 'spring',
      templateName: 'order_update',
      parameters: [{ name: 'order', value: '42' }],
      language: 'en',
      number: '+15550002222',
    });
  });
});

describe('conversation table', () => {
  const window = (customer: string, openUntil: number, businessId = 'biz_1') => ({
    key: tableKey(businessId, customer),
    businessId,
    openUntil,
  });

  it('never seen: unknown until complete, then closed; open until windowOpenUntil, closed from that instant', () => {
    let now = NOW;
    const table = new ConversationTable({ maxEntries: 10, now: () => now });
    expect(table.lookup('biz_1', '+15550000001')).toEqual({ state: 'unknown', reason: 'incomplete' });
    table.apply(window('+15550000001', NOW + HOUR));
    expect(table.lookup('biz_1', '+15550000001')).toEqual({ state: 'open', openUntil: NOW + HOUR });
    table.markComplete();
    expect(table.lookup('biz_1', '+15550000002')).toEqual({ state: 'closed', openUntil: null });
    expect(table.lookup('biz_2', '+15550000001')).toEqual({ state: 'closed', openUntil: null });
    now = NOW + HOUR;
    expect(table.lookup('biz_1', '+15550000001')).toEqual({ state: 'closed', openUntil: NOW + HOUR });
    // A closed window carries nothing an absent one does not: dropped.
    expect(table.size).toBe(0);
    table.markIncomplete();
    expect(table.lookup('biz_1', '+15550000002')).toEqual({ state: 'unknown', reason: 'incomplete' });
  });

  it('a window only moves forward; a closed one is not kept; a tombstone removes it', () => {
    const table = new ConversationTable({ maxEntries: 10, now: () => NOW });
    table.markComplete();
    expect(table.apply(window('+15550000001', NOW + 2 * HOUR))).toBe(true);
    expect(table.apply(window('+15550000001', NOW + HOUR))).toBe(false);
    expect(table.lookup('biz_1', '+15550000001')).toEqual({ state: 'open', openUntil: NOW + 2 * HOUR });
    expect(table.apply(window('+15550000002', NOW - 1))).toBe(false);
    expect(table.size).toBe(1);
    expect(table.apply({ key: tableKey('biz_1', '+15550000001'), businessId: 'biz_1', openUntil: null })).toBe(true);
    expect(table.lookup('biz_1', '+15550000001')).toEqual({ state: 'closed', openUntil: null });
    expect(table.stats()).toMatchObject({ entries: 0, applied: 2, unchanged: 2 });
  });

  it('a customer is the same with or without a leading +', () => {
    const table = new ConversationTable({ maxEntries: 10, now: () => NOW });
    table.apply(window('15550000001', NOW + HOUR));
    expect(table.lookup('biz_1', '+15550000001').state).toBe('open');
    expect(table.lookup('biz_1', '15550000001').state).toBe('open');
    // An opaque id is compared as it is.
    table.markComplete();
    table.apply(window('US.1234', NOW + HOUR));
    expect(table.lookup('biz_1', 'US.1234').state).toBe('open');
    expect(table.lookup('biz_1', '+US.1234').state).toBe('closed');
  });

  it('full: closed windows go first; then the least recently updated open one, and never-seen customers are unknown until it would have closed', () => {
    let now = NOW;
    const table = new ConversationTable({ maxEntries: 3, now: () => now });
    table.markComplete();
    table.apply(window('+15550000001', NOW + 10 * 60_000));
    table.apply(window('+15550000002', NOW + 20 * 60_000));
    table.apply(window('+15550000003', NOW + 30 * 60_000));
    // Updating an entry moves it to the back: 2 is now the least recently updated.
    table.apply(window('+15550000001', NOW + 40 * 60_000));
    // 2 closes: the next window takes its place, nothing open is lost.
    now = NOW + 25 * 60_000;
    table.apply(window('+15550000004', NOW + 50 * 60_000));
    expect(table.stats()).toMatchObject({ entries: 3, evictedOpen: 0, evictedUntil: 0 });
    expect(table.lookup('biz_1', '+15550000009')).toEqual({ state: 'closed', openUntil: null });
    // All open: the least recently updated open one (3, open until +30 min) is dropped.
    table.apply(window('+15550000005', NOW + 60 * 60_000));
    expect(table.stats()).toMatchObject({ entries: 3, evictedOpen: 1, evictedUntil: NOW + 30 * 60_000 });
    expect(table.lookup('biz_1', '+15550000003')).toEqual({ state: 'unknown', reason: 'evicted' });
    expect(table.lookup('biz_1', '+15550000009')).toEqual({ state: 'unknown', reason: 'evicted' });
    // Known windows are still answered exactly.
    expect(table.lookup('biz_1', '+15550000005')).toEqual({ state: 'open', openUntil: NOW + 60 * 60_000 });
    // Once the evicted window would have closed, absence means closed again.
    now = NOW + 30 * 60_000;
    expect(table.lookup('biz_1', '+15550000003')).toEqual({ state: 'closed', openUntil: null });
    expect(table.lookup('biz_1', '+15550000009')).toEqual({ state: 'closed', openUntil: null });
  });

  it('sweep drops closed windows from the least recently updated end', () => {
    let now = NOW;
    const table = new ConversationTable({ maxEntries: 10, now: () => now });
    for (let i = 1; i <= 5; i++) table.apply(window(`+1555000000${i}`, NOW + i * 60_000));
    now = NOW + 3 * 60_000;
    expect(table.sweep()).toBe(3);
    expect(table.size).toBe(2);
  });

  it('refuses a bound that is not a positive integer', () => {
    expect(() => new ConversationTable({ maxEntries: 0 })).toThrow(/maxEntries/);
  });
});

describe('conversations records', () => {
  const value = (v: Record<string, unknown>) => Buffer.from(JSON.stringify(v));
  const good = {
    businessId: 'biz_1',
    customer: '+15550000001',
    lastInboundAt: '2026-03-01T11:00:00.000Z',
    windowOpenUntil: '2026-03-02T11:00:00.000Z',
  };

  it('reads the key and windowOpenUntil; a null value is a tombstone', () => {
    expect(conversationEntry(Buffer.from('biz_1:+15550000001'), value(good))).toEqual({
      key: 'biz_1:15550000001',
      businessId: 'biz_1',
      openUntil: Date.parse(good.windowOpenUntil),
    });
    expect(conversationEntry('biz_1:+15550000001', null)).toEqual({
      key: 'biz_1:15550000001',
      businessId: 'biz_1',
      openUntil: null,
    });
  });

  it('names what is wrong with a record that is not a conversation window', () => {
    expect(conversationEntry(null, value(good))).toEqual({ invalid: 'record without a key' });
    expect(conversationEntry('nocolon', value(good))).toEqual({
      invalid: expect.stringMatching(/is not <businessId>:<customer>/),
    });
    expect(conversationEntry('biz_1:', value(good))).toEqual({
      invalid: expect.stringMatching(/is not <businessId>:<customer>/),
    });
    expect(conversationEntry('biz_1:+1', Buffer.from('{'))).toEqual({ invalid: expect.stringMatching(/is not JSON/) });
    expect(conversationEntry('biz_1:+1', value({ ...good, windowOpenUntil: 'tomorrow' }))).toEqual({
      invalid: expect.stringMatching(/windowOpenUntil/),
    });
  });
});

describe('purity', () => {
  // Dependencies point inward: the guard and the table import neither Kafka nor HTTP clients,
  // directly or through the project's modules they import.
  it('the decision and the table import no kafkajs, undici or uWebSockets.js', () => {
    const root = resolve(import.meta.dirname, '../../src/sender');
    const seen = new Set<string>();
    const forbidden: string[] = [];
    const visit = (file: string) => {
      if (seen.has(file)) return;
      seen.add(file);
      const source = readFileSync(file, 'utf8');
      for (const [, spec] of source.matchAll(/^import[^'"]*['"]([^'"]+)['"]/gm)) {
        if (spec === undefined) continue;
        if (spec.startsWith('.')) visit(join(dirname(file), spec.replace(/\.js$/, '.ts')));
        else if (/^(kafkajs|undici|uWebSockets\.js|@platformatic\/kafka)/.test(spec))
          forbidden.push(`${file}: ${spec}`);
      }
    };
    visit(join(root, 'conversation-guard.ts'));
    visit(join(root, 'conversation-table.ts'));
    expect(forbidden).toEqual([]);
    expect(seen.size).toBeGreaterThan(2);
  });
});
