import { z } from 'zod';

/**
 * The value on `inbound-messages` (compacted, key = the webhook's `event-id`): one inbound
 * message as the tracker keeps it for the customer's conversation (the console's thread, `GET
 * /inbound?customer=`): who wrote, when, and what, each field bounded (`INBOUND_LIMITS`). The
 * webhook itself stays on `messages`, byte for byte; this is a bounded summary of it, written
 * exactly once per event by the tracker (src/tracker/inbound-rules.ts) and kept for
 * `tracker.stateRetentionMs`.
 */
export interface InboundMessageRecord {
  /** The `event-id` of the `messages` record (hex SHA-256 of the webhook body): one record per event. */
  eventId: string;
  businessId: string;
  /** The customer in the canonical form (contracts/customer-id.ts), as the record is found by. */
  customer: string;
  /** `sender.id` as the provider wrote it (cut to `INBOUND_LIMITS.fromChars`). */
  from: string;
  /** `sender.name`, the customer's profile name; null when the event had none. */
  name: string | null;
  /** `sender.channelType` as the provider wrote it. */
  channel: string;
  /** When the customer wrote: the webhook's `timestamp`. */
  at: string;
  /** `message.text`; null when the message had none (an attachment, a location). */
  text: string | null;
  /** Set when it is a button reply (`isButtonResponse`, or a `message.button`): its payload, null when none came. */
  button: { payload: string | null } | null;
  /** The kinds of what came besides the text (`image`, `location`...), at most `INBOUND_LIMITS.attachments`. */
  attachments: string[];
  /** True when a field was cut to its limit. */
  truncated: boolean;
  /** When the tracker recorded it (the retention runs from it). */
  recordedAt: string;
}

/** What one record keeps at most: a record is small whatever the provider sent. */
export const INBOUND_LIMITS = {
  textChars: 1000,
  payloadChars: 256,
  nameChars: 128,
  fromChars: 256,
  channelChars: 32,
  attachments: 5,
  attachmentChars: 32,
} as const;

const isoTime = z.iso.datetime({ offset: true });

/** Parses an `inbound-messages` value back (restore, queries). Lenient on lengths: a later release may keep more. */
export const inboundMessageRecordSchema = z.object({
  eventId: z.string().min(1),
  businessId: z.string().min(1),
  customer: z.string().min(1),
  from: z.string().min(1),
  name: z.string().nullable(),
  channel: z.string(),
  at: isoTime,
  text: z.string().nullable(),
  button: z.object({ payload: z.string().nullable() }).nullable(),
  attachments: z.array(z.string()),
  truncated: z.boolean(),
  recordedAt: isoTime,
});

const _sameShape: (v: z.infer<typeof inboundMessageRecordSchema>) => InboundMessageRecord = (v) => v;
void _sameShape;
