import { canonicalCustomerId } from '../contracts/customer-id.js';
import { INBOUND_LIMITS, type InboundMessageRecord } from '../contracts/inbound-message.js';
import { isoFromEpochSeconds } from '../contracts/time.js';
import type { InboundMessageEvent } from '../contracts/webhook-events.js';
import { MsgbridgeError } from '../platform/errors.js';

/**
 * What the tracker keeps of one inbound message for the customer's conversation (README
 * "Conversations"): a bounded summary of the webhook (contracts/inbound-message.ts), one per
 * `event-id`. Pure. A button reply is told by `isButtonResponse` (top level or in `message`) or a
 * `message.button` object; its payload is read from `message.button.payload`, `message.payload`,
 * `context.payload` or `callbackData`, the first that is text (the provider's documented behaviour: the payload
 * comes in the text or in `context`/`callbackData`).
 */

type Loose = Record<string, unknown>;

const asObject = (value: unknown): Loose | undefined =>
  value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as Loose) : undefined;
const asText = (value: unknown): string | undefined =>
  typeof value === 'string' && value.length > 0 ? value : undefined;

export function inboundRecordFrom(
  event: InboundMessageEvent,
  meta: { eventId: string; businessId: string },
  now: Date,
): InboundMessageRecord {
  if (!meta.eventId)
    throw new MsgbridgeError('INVALID_ARGUMENT', 'eventId must be a non-empty string', {
      details: { field: 'eventId' },
    });
  if (!meta.businessId)
    throw new MsgbridgeError('INVALID_ARGUMENT', 'businessId must be a non-empty string', {
      details: { field: 'businessId' },
    });
  const L = INBOUND_LIMITS;
  let truncated = false;
  const cut = (text: string, max: number) => {
    if (text.length <= max) return text;
    truncated = true;
    return `${text.slice(0, max - 1)}…`;
  };
  const body = event as unknown as Loose;
  const message = asObject(event.message) ?? {};
  const buttonObject = asObject(message.button);
  const isButton = body.isButtonResponse === true || message.isButtonResponse === true || buttonObject !== undefined;
  const payload = isButton
    ? (asText(buttonObject?.payload) ??
      asText(message.payload) ??
      asText(asObject(body.context)?.payload) ??
      asText(body.callbackData))
    : undefined;
  const text = typeof event.message.text === 'string' ? event.message.text : (asText(buttonObject?.text) ?? null);
  return {
    eventId: meta.eventId,
    businessId: meta.businessId,
    customer: canonicalCustomerId(event.sender.id),
    from: cut(event.sender.id, L.fromChars),
    name: typeof event.sender.name === 'string' ? cut(event.sender.name, L.nameChars) : null,
    channel: cut(event.sender.channelType, L.channelChars),
    at: isoFromEpochSeconds(event.timestamp, 'timestamp'),
    text: text === null ? null : cut(text, L.textChars),
    button: isButton ? { payload: payload === undefined ? null : cut(payload, L.payloadChars) } : null,
    attachments: attachmentKinds(body, message).map((kind) => cut(kind, L.attachmentChars)),
    truncated,
    recordedAt: now.toISOString(),
  };
}

/** The kinds of what came besides the text: attachments' `type`s, a location; at most INBOUND_LIMITS.attachments. */
function attachmentKinds(body: Loose, message: Loose): string[] {
  const kinds: string[] = [];
  const add = (value: unknown) => {
    const item = asObject(value);
    if (item) kinds.push(asText(item.type) ?? 'attachment');
  };
  for (const holder of [message, body]) {
    add(holder.attachment);
    if (Array.isArray(holder.attachments))
      for (const a of holder.attachments.slice(0, INBOUND_LIMITS.attachments)) add(a);
    if (asObject(holder.location)) kinds.push('location');
  }
  return kinds.slice(0, INBOUND_LIMITS.attachments);
}
