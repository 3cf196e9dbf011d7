import { z } from 'zod';
import type { InboundMessageEvent } from '../contracts/webhook-events.js';
import { MsgbridgeError } from '../errors.js';
import { canonicalIso, isoFromEpochSeconds, MAX_EPOCH_MS } from './message-state.js';

/**
 * The 24-hour customer-service window of one conversation (DESIGN §1.6): free-form text may be
 * sent until `windowOpenUntil`. Folding is a max over inbound times, so it needs no event-id
 * deduplication: a duplicate or a late event never changes it.
 */

export const CONVERSATION_WINDOW_MS = 24 * 3600 * 1000;

export interface ConversationWindow {
  businessId: string;
  customer: string;
  lastInboundAt: string;
  /** lastInboundAt + 24 h. */
  windowOpenUntil: string;
}

export interface InboundEvent {
  businessId: string;
  customer: string;
  /** ISO time of the inbound message: the webhook's `timestamp`. */
  at: string;
}

const isoTime = z.iso.datetime({ offset: true });

/** Parses a `conversations` value back (restore). */
export const conversationWindowSchema = z.object({
  businessId: z.string().min(1),
  customer: z.string().min(1),
  lastInboundAt: isoTime,
  windowOpenUntil: isoTime,
});

const _sameShape: (v: z.infer<typeof conversationWindowSchema>) => ConversationWindow = (v) => v;
void _sameShape;

/** The record key on `conversations`. */
export function conversationKey(businessId: string, customer: string): string {
  return `${businessId}:${customer}`;
}

/**
 * The input of a parsed `messages` webhook: the customer is the party that wrote it (`sender.id`,
 * also the record key), the business comes from the record's `business-id` header.
 */
export function inboundFrom(event: InboundMessageEvent, businessId: string): InboundEvent {
  if (!businessId) throw new MsgbridgeError('INVALID_ARGUMENT', 'businessId must be a non-empty string', { details: { field: 'businessId' } });
  return { businessId, customer: event.sender.id, at: isoFromEpochSeconds(event.timestamp, 'timestamp') };
}

/** Moves the window forward to a later inbound message; an earlier or equal one changes nothing. */
export function applyInbound(current: ConversationWindow | undefined, input: InboundEvent): { window: ConversationWindow; changed: boolean } {
  const at = canonicalIso(input.at, 'at');
  if (current && (current.businessId !== input.businessId || current.customer !== input.customer)) {
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      `inbound event of ${conversationKey(input.businessId, input.customer)} applied to the window of ${conversationKey(current.businessId, current.customer)}`,
      { details: { field: 'customer' } },
    );
  }
  const atMs = Date.parse(at);
  if (atMs + CONVERSATION_WINDOW_MS > MAX_EPOCH_MS) {
    throw new MsgbridgeError('INVALID_ARGUMENT', `at ${at} is too late: its window would end after year 9999`, { details: { field: 'at', value: input.at } });
  }
  if (current && Date.parse(current.lastInboundAt) >= atMs) return { window: current, changed: false };
  return {
    window: {
      businessId: input.businessId,
      customer: input.customer,
      lastInboundAt: at,
      windowOpenUntil: new Date(atMs + CONVERSATION_WINDOW_MS).toISOString(),
    },
    changed: true,
  };
}

/** Whether a free-form text may be sent at `now`; closed when the conversation is unknown. */
export function isWindowOpen(window: ConversationWindow | undefined, now: Date): boolean {
  return window !== undefined && now.getTime() < Date.parse(window.windowOpenUntil);
}
