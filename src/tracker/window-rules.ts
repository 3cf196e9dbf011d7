import type { InboundMessageEvent } from '../contracts/webhook-events.js';
import { MsgbridgeError } from '../platform/errors.js';
import { CONVERSATION_WINDOW_MS, conversationKey, type ConversationWindow } from '../contracts/conversation-window.js';
import { canonicalIso, isoFromEpochSeconds, MAX_EPOCH_MS } from '../contracts/time.js';
import { canonicalCustomerId } from '../contracts/customer-id.js';

/**
 * The 24-hour customer-service window of one conversation (docs/topics.md, "Message state and conversation windows"):
 * free-form text may be sent until `windowOpenUntil`. Folding is a max over inbound times, so it needs no event-id
 * deduplication: a duplicate or a late event never changes it.
 */

export interface InboundEvent {
  businessId: string;
  customer: string;
  /** ISO time of the inbound message: the webhook's `timestamp`. */
  at: string;
}

/**
 * The input of a parsed `messages` webhook: the customer is the party that wrote it (`sender.id`
 * in its canonical form, also the record key: `+1555…` and `1555…` are one window), the business
 * comes from the record's `business-id` header.
 */
export function inboundFrom(event: InboundMessageEvent, businessId: string): InboundEvent {
  if (!businessId)
    throw new MsgbridgeError('INVALID_ARGUMENT', 'businessId must be a non-empty string', {
      details: { field: 'businessId' },
    });
  return {
    businessId,
    customer: canonicalCustomerId(event.sender.id),
    at: isoFromEpochSeconds(event.timestamp, 'timestamp'),
  };
}

/**
 * Moves the window forward to a later inbound message; an earlier or equal one changes nothing.
 * Customers compare in their canonical form (a window of an earlier release may hold the other).
 */
export function applyInbound(
  current: ConversationWindow | undefined,
  input: InboundEvent,
): { window: ConversationWindow; changed: boolean } {
  const at = canonicalIso(input.at, 'at');
  if (
    current &&
    (current.businessId !== input.businessId ||
      canonicalCustomerId(current.customer) !== canonicalCustomerId(input.customer))
  ) {
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      `inbound event of ${conversationKey(input.businessId, input.customer)} applied to the window of ${conversationKey(current.businessId, current.customer)}`,
      { details: { field: 'customer' } },
    );
  }
  const atMs = Date.parse(at);
  if (atMs + CONVERSATION_WINDOW_MS > MAX_EPOCH_MS) {
    throw new MsgbridgeError('INVALID_ARGUMENT', `at ${at} is too late: its window would end after year 9999`, {
      details: { field: 'at', value: input.at },
    });
  }
  if (current && Date.parse(current.lastInboundAt) >= atMs) return { window: current, changed: false };
  return {
    window: {
      businessId: input.businessId,
      customer: canonicalCustomerId(input.customer),
      lastInboundAt: at,
      windowOpenUntil: new Date(atMs + CONVERSATION_WINDOW_MS).toISOString(),
    },
    changed: true,
  };
}
