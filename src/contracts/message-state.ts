import { z } from 'zod';
import { providerErrorSchema, type ProviderError } from './common.js';
import { requestContentSchema, type RequestContent } from './send.js';

/**
 * The value on `message-state` (docs/topics.md): one message's current state, published whole on
 * every change by the tracker. The rules that produce it live in the tracker (state-rules.ts).
 */

export const MESSAGE_STATUSES = ['accepted', 'sent', 'delivered', 'read', 'delivery_failed'] as const;
export type MessageStatus = (typeof MESSAGE_STATUSES)[number];

/**
 * How the relay sent it, from the accepted send result: the attempts it took, whether an earlier
 * attempt may have created another message (`maybeSent`), and the type the request asked for
 * (`type` is what went out: a text sent as its fallback template says `template` there).
 */
export interface SendSummary {
  attempts: number;
  maybeSent: boolean;
  requestedType: 'text' | 'template';
  /**
   * What the request asked to send, bounded (contracts/send.ts `REQUEST_CONTENT_LIMITS`). Absent:
   * not recorded (a result or a state written by a release before it).
   */
  content?: RequestContent;
  /**
   * The channel it went out on (the accepted result's `channel`). On `sms` the provider sends no
   * delivery status: `accepted` is the last status such a message has. Absent: not recorded.
   */
  channel?: string;
}

/**
 * The public shape of the message state (docs/topics.md), plus `send` (optional on read: null in states written before
 * it).
 */
export interface MessageState {
  messageId: string;
  /** Null until the accepted send result is seen; stays null for a message not sent through the relay. */
  requestId: string | null;
  businessId: string;
  recipient: string | null;
  type: 'text' | 'template' | null;
  status: MessageStatus;
  acceptedAt: string | null;
  sentAt: string | null;
  deliveredAt: string | null;
  readAt: string | null;
  failedAt: string | null;
  error: ProviderError | null;
  /** Distinct events that changed this state. */
  events: number;
  updatedAt: string;
  /** Null until the accepted send result is seen, and in states written before this field. */
  send: SendSummary | null;
}

/**
 * What the tracker keeps and publishes on `message-state`: the public state plus the ids of the
 * events it applied, so that deduplication survives a restore from the compacted topic.
 */
export interface TrackedMessage extends MessageState {
  eventIds: string[];
}

const isoTime = z.iso.datetime({ offset: true });
const nullableIso = isoTime.nullable();

/** Parses a `message-state` value back (restore). `eventIds` may be absent in values written by others. */
export const messageStateSchema = z.object({
  messageId: z.string().min(1),
  requestId: z.string().min(1).nullable(),
  businessId: z.string().min(1),
  recipient: z.string().nullable(),
  type: z.enum(['text', 'template']).nullable(),
  status: z.enum(MESSAGE_STATUSES),
  acceptedAt: nullableIso,
  sentAt: nullableIso,
  deliveredAt: nullableIso,
  readAt: nullableIso,
  failedAt: nullableIso,
  error: providerErrorSchema.nullable(),
  events: z.number().int().min(0),
  updatedAt: isoTime,
  send: z
    .object({
      attempts: z.number().int().min(1),
      maybeSent: z.boolean(),
      requestedType: z.enum(['text', 'template']),
      content: requestContentSchema.optional(),
      channel: z.string().min(1).optional(),
    })
    .nullable()
    .default(null),
  eventIds: z.array(z.string().min(1)).default([]),
});

// Compile-time check that the schema and the interface stay one shape.
const _sameShape: (v: z.infer<typeof messageStateSchema>) => TrackedMessage = (v) => v;
void _sameShape;

/** The public state, without the bookkeeping (for query answers). */
export function messageStateOf(tracked: TrackedMessage): MessageState {
  const { eventIds: _eventIds, ...state } = tracked;
  return state;
}
