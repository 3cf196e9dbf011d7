import { z } from 'zod';

/**
 * The value on `conversations` (DESIGN §1.6): the 24-hour customer-service window of one
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

/** The record key on `conversations`. */
export function conversationKey(businessId: string, customer: string): string {
  return `${businessId}:${customer}`;
}

/** The customer of a `conversations` key (a business id may hold a colon, a customer's number does not). */
export function customerOfConversationKey(key: string): string {
  return key.slice(key.lastIndexOf(':') + 1);
}

/** Whether a free-form text may be sent at `now`; closed when the conversation is unknown. */
export function isWindowOpen(window: ConversationWindow | undefined, now: Date): boolean {
  return window !== undefined && now.getTime() < Date.parse(window.windowOpenUntil);
}
