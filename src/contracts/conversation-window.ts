import { z } from 'zod';
import { canonicalCustomerId } from './customer-id.js';

/**
 * The value on `conversations` (docs/topics.md): the 24-hour customer-service window of one
 * conversation; free-form text may be sent until `windowOpenUntil`. The tracker writes it
 * (window-rules.ts), the sender reads it.
 */

export const CONVERSATION_WINDOW_MS = 24 * 3600 * 1000;

export interface ConversationWindow {
  businessId: string;
  customer: string;
  lastInboundAt: string;
  /** lastInboundAt + 24 h. */
  windowOpenUntil: string;
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

/**
 * The record key on `conversations`: the customer in its canonical form (contracts/customer-id.ts),
 * so both forms of one customer are one conversation. Records of earlier releases kept the
 * provider's form: read them through `canonicalConversationKey`.
 */
export function conversationKey(businessId: string, customer: string): string {
  return `${businessId}:${canonicalCustomerId(customer)}`;
}

/** A `conversations` key (of any release) with its customer in the canonical form. */
export function canonicalConversationKey(key: string): string {
  const colon = key.lastIndexOf(':');
  return colon < 0 ? key : `${key.slice(0, colon)}:${canonicalCustomerId(key.slice(colon + 1))}`;
}

/** The customer of a `conversations` key (a business id may hold a colon, a customer's number does not). */
export function customerOfConversationKey(key: string): string {
  return key.slice(key.lastIndexOf(':') + 1);
}

/** Whether a free-form text may be sent at `now`; closed when the conversation is unknown. */
export function isWindowOpen(window: ConversationWindow | undefined, now: Date): boolean {
  return window !== undefined && now.getTime() < Date.parse(window.windowOpenUntil);
}
