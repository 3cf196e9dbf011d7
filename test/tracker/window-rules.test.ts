import { describe, expect, it } from 'vitest';
import { inboundMessageEventSchema } from '../../src/contracts/webhook-events.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { applyInbound, inboundFrom, type InboundEvent } from '../../src/tracker/window-rules.js';
import {
  CONVERSATION_WINDOW_MS,
  canonicalConversationKey,
  conversationKey,
  conversationWindowSchema,
  isWindowOpen,
  type ConversationWindow,
} from '../../src/contracts/conversation-window.js';

const inbound = (at: string): InboundEvent => ({ businessId: 'biz_1', customer: '15550002222', at });

function fold(inputs: InboundEvent[]): ConversationWindow | undefined {
  let window: ConversationWindow | undefined;
  for (const input of inputs) window = applyInbound(window, input).window;
  return window;
}

describe('conversation windows', () => {
  it('keys a conversation by business and customer, the customer in its canonical form', () => {
    expect(conversationKey('biz_1', '+15550002222')).toBe('biz_1:15550002222');
    expect(conversationKey('biz_1', '15550002222')).toBe('biz_1:15550002222');
    expect(conversationKey('biz:1', 'US.42')).toBe('biz:1:US.42');
    // A key of an earlier release (the provider's form) reads as the canonical one.
    expect(canonicalConversationKey('biz_1:+15550002222')).toBe('biz_1:15550002222');
    expect(canonicalConversationKey('biz:1:+15550002222')).toBe('biz:1:15550002222');
    expect(canonicalConversationKey('biz_1:US.42')).toBe('biz_1:US.42');
  });

  it('a parsed messages webhook becomes an inbound event: the customer is the sender', () => {
    const body = inboundMessageEventSchema.parse({
      timestamp: '1772359200',
      sender: { channelType: 'whatsapp', id: '+15550002222', name: 'Ann' },
      recipient: { channelType: 'whatsapp', id: '+15550001111' },
      message: { text: 'hi' },
      attachments: [],
    });
    expect(inboundFrom(body, 'biz_1')).toEqual({
      businessId: 'biz_1',
      customer: '15550002222',
      at: '2026-03-01T10:00:00.000Z',
    });
    expect(() => inboundFrom(body, '')).toThrow(/businessId/);
    expect(() => inboundFrom({ ...body, timestamp: '1e9' }, 'biz_1')).toThrow(/timestamp/);
  });

  it('opens for 24 hours after the last inbound message and never moves back', () => {
    const first = applyInbound(undefined, inbound('2026-03-01T10:00:00Z'));
    expect(first).toEqual({
      changed: true,
      window: {
        businessId: 'biz_1',
        customer: '15550002222',
        lastInboundAt: '2026-03-01T10:00:00.000Z',
        windowOpenUntil: '2026-03-02T10:00:00.000Z',
      },
    });
    const later = applyInbound(first.window, inbound('2026-03-01T18:30:00Z'));
    expect(later.changed).toBe(true);
    expect(later.window.windowOpenUntil).toBe('2026-03-02T18:30:00.000Z');
    for (const stale of ['2026-03-01T09:00:00Z', '2026-03-01T18:30:00.000Z', '2026-03-01T20:30:00+02:00']) {
      const result = applyInbound(later.window, inbound(stale));
      expect(result.changed, stale).toBe(false);
      expect(result.window).toBe(later.window);
    }
  });

  it('ends at the latest inbound time whatever the order, duplicates included', () => {
    const times = ['2026-03-01T10:00:00Z', '2026-03-01T08:00:00Z', '2026-03-01T12:00:00Z', '2026-03-01T11:00:00Z'];
    const expected = fold(times.map(inbound));
    expect(expected?.lastInboundAt).toBe('2026-03-01T12:00:00.000Z');
    for (let shift = 0; shift < times.length; shift++) {
      const rotated = [...times.slice(shift), ...times.slice(0, shift)];
      expect(fold([...rotated, ...rotated.reverse()].map(inbound))).toEqual(expected);
    }
  });

  it('is open strictly before windowOpenUntil, and closed for an unknown conversation', () => {
    const { window } = applyInbound(undefined, inbound('2026-03-01T10:00:00Z'));
    const end = Date.parse('2026-03-01T10:00:00Z') + CONVERSATION_WINDOW_MS;
    expect(isWindowOpen(window, new Date(end - 1))).toBe(true);
    expect(isWindowOpen(window, new Date(end))).toBe(false);
    expect(isWindowOpen(undefined, new Date(end - 1))).toBe(false);
  });

  it('refuses unparseable or unrepresentable times and another conversation', () => {
    for (const at of ['', 'soon', '2026-03-01 10:00', '9999-12-31T12:00:00Z']) {
      let error: unknown;
      try {
        applyInbound(undefined, inbound(at));
      } catch (err) {
        error = err;
      }
      expect(isMsgbridgeError(error, 'INVALID_ARGUMENT'), at).toBe(true);
    }
    const { window } = applyInbound(undefined, inbound('2026-03-01T10:00:00Z'));
    expect(() => applyInbound(window, { ...inbound('2026-03-01T11:00:00Z'), customer: '+1999' })).toThrow(/biz_1:1999/);
  });

  it('a window kept in the other form of the customer (an earlier release) moves forward as the same conversation, in the canonical form', () => {
    const old: ConversationWindow = {
      businessId: 'biz_1',
      customer: '+15550002222',
      lastInboundAt: '2026-03-01T10:00:00.000Z',
      windowOpenUntil: '2026-03-02T10:00:00.000Z',
    };
    const { window, changed } = applyInbound(old, inbound('2026-03-01T11:00:00Z'));
    expect(changed).toBe(true);
    expect(window).toMatchObject({ customer: '15550002222', lastInboundAt: '2026-03-01T11:00:00.000Z' });
  });

  it('the published value parses back', () => {
    const { window } = applyInbound(undefined, inbound('2026-03-01T10:00:00Z'));
    expect(conversationWindowSchema.parse(JSON.parse(JSON.stringify(window)))).toEqual(window);
    expect(conversationWindowSchema.safeParse({ ...window, lastInboundAt: 'yesterday' }).success).toBe(false);
  });
});
