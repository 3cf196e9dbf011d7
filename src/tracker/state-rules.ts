import type { ProviderError } from '../contracts/common.js';
import type { MessageStatus, SendSummary, TrackedMessage } from '../contracts/message-state.js';
import type { AcceptedSendResult, SendResult } from '../contracts/send.js';
import type { DeliveryStatus, DeliveryStatusEvent } from '../contracts/webhook-events.js';
import { canonicalIso, isoFromEpochSeconds } from '../contracts/time.js';
import { boundedContent } from '../contracts/send.js';
import { MsgbridgeError } from '../platform/errors.js';

/**
 * The pure rules that fold a message's events into its state (contracts/message-state.ts).
 * The rules and why they are what they are: README.md "Message state". Nothing here mutates
 * its inputs; a duplicate returns the very object it was given.
 */

/** delivery_failed ranks above read: it is terminal whatever order the events came in. */
const RANK: Record<MessageStatus, number> = { accepted: 0, sent: 1, delivered: 2, read: 3, delivery_failed: 4 };

export function statusRank(status: MessageStatus): number {
  return RANK[status];
}

/** Event ids a state remembers (most recent last). A message has about five distinct events. */
export const MAX_REMEMBERED_EVENT_IDS = 32;

export interface ResultEvent {
  kind: 'result';
  eventId: string;
  result: Pick<AcceptedSendResult, 'requestId' | 'businessId' | 'messageId' | 'type' | 'recipient' | 'acceptedAt'> & {
    send?: SendSummary;
  };
}

export interface StatusEvent {
  kind: 'status';
  eventId: string;
  businessId: string;
  messageId: string;
  status: DeliveryStatus;
  /** ISO time of the status: the webhook's `timestamp`. */
  at: string;
  /** The provider's error object; only meaningful with delivery_failed. */
  error?: ProviderError | null;
  recipient?: string;
}

export type TrackerEvent = ResultEvent | StatusEvent;

export function messageIdOf(event: TrackerEvent): string {
  return event.kind === 'result' ? event.result.messageId : event.messageId;
}

/**
 * The event of an accepted send result; undefined for rejected and expired results, which
 * created no message. `eventId` is the record's `event-id` header.
 */
export function resultEventFrom(result: SendResult, eventId: string): ResultEvent | undefined {
  if (result.outcome !== 'accepted') return undefined;
  const { requestId, businessId, messageId, recipient, acceptedAt } = result;
  // What went out: a text whose window was closed may have been sent as its fallback template.
  const type = result.sentAs ?? result.type;
  // Bounded again: the tracker keeps its own limit whatever a producer of results wrote.
  const send: SendSummary = {
    attempts: result.attempts,
    maybeSent: result.maybeSent ?? false,
    requestedType: result.type,
    ...(result.content ? { content: boundedContent(result.content) } : {}),
    // An SMS gets no delivery status: the console says accepted is where it ends (README "Message state").
    ...(result.channel !== undefined ? { channel: result.channel } : {}),
  };
  return {
    kind: 'result',
    eventId: requireId(eventId, 'eventId'),
    result: { requestId, businessId, messageId, type, recipient, acceptedAt, send },
  };
}

/**
 * The event of a parsed `delivery_status` webhook. The body names no business: it comes from
 * the record's `business-id` header, like `eventId` from its `event-id` header.
 */
export function statusEventFrom(
  event: DeliveryStatusEvent,
  meta: { eventId: string; businessId: string },
): StatusEvent {
  const update = event.statusUpdate;
  return {
    kind: 'status',
    eventId: requireId(meta.eventId, 'eventId'),
    businessId: requireId(meta.businessId, 'businessId'),
    messageId: requireId(update.id, 'statusUpdate.id'),
    status: update.status,
    at: isoFromEpochSeconds(event.timestamp, 'timestamp'),
    error: update.status === 'delivery_failed' ? (update.error ?? null) : null,
    recipient: event.recipient.id,
  };
}

export type ApplyOutcome =
  /** First event of the message, or its status moved up. */
  | 'applied'
  /** The send result joined a state that statuses created (status not lowered). */
  | 'result_merged'
  /** Status kept (a late lower or equal one): only its own timestamp was filled or moved earlier. */
  | 'filled_timestamp'
  /** delivered/read/sent after delivery_failed: the timestamp is recorded, the status stays failed. */
  | 'filled_after_failure'
  /** A lower status that brought nothing new. */
  | 'regression_refused'
  /** The same status (or result) again under another event id, nothing new (e.g. a later timestamp). */
  | 'redundant'
  /** An event id this state has applied before. */
  | 'duplicate';

export interface ApplyResult {
  state: TrackedMessage;
  /** True when `state` differs from the current one and must be published. */
  changed: boolean;
  outcome: ApplyOutcome;
}

const TIME_FIELD: Record<MessageStatus, 'acceptedAt' | 'sentAt' | 'deliveredAt' | 'readAt' | 'failedAt'> = {
  accepted: 'acceptedAt',
  sent: 'sentAt',
  delivered: 'deliveredAt',
  read: 'readAt',
  delivery_failed: 'failedAt',
};

/**
 * Folds one event into a message's state. Order-independent: status is the highest rank seen,
 * each timestamp the earliest seen, the send result's fields win over a status's recipient.
 * Throws `INVALID_ARGUMENT` for an event with an unparseable time or a missing id.
 */
export function applyEvent(current: TrackedMessage | undefined, event: TrackerEvent, now: Date): ApplyResult {
  const eventId = requireId(event.eventId, 'eventId');
  const messageId = requireId(messageIdOf(event), 'messageId');
  if (current && current.messageId !== messageId) {
    throw invalid(
      `event for message ${messageId} applied to the state of ${current.messageId}`,
      'messageId',
      messageId,
    );
  }
  if (current?.eventIds.includes(eventId)) return { state: current, changed: false, outcome: 'duplicate' };
  const updatedAt = validNow(now);
  return event.kind === 'result'
    ? applyResult(current, event, eventId, updatedAt)
    : applyStatus(current, event, eventId, updatedAt);
}

function applyResult(
  current: TrackedMessage | undefined,
  event: ResultEvent,
  eventId: string,
  updatedAt: string,
): ApplyResult {
  const r = event.result;
  const acceptedAt = canonicalIso(r.acceptedAt, 'acceptedAt');
  if (!current) {
    const state = blank(r.messageId, requireId(r.businessId, 'businessId'), updatedAt);
    state.requestId = requireId(r.requestId, 'requestId');
    state.recipient = r.recipient;
    state.type = r.type;
    state.acceptedAt = acceptedAt;
    state.send = r.send ?? null;
    return { state: record(state, eventId), changed: true, outcome: 'applied' };
  }
  const next: TrackedMessage = {
    ...current,
    requestId: requireId(r.requestId, 'requestId'),
    businessId: requireId(r.businessId, 'businessId'),
    recipient: r.recipient,
    type: r.type,
    acceptedAt: earliest(current.acceptedAt, acceptedAt),
    send: mergeSend(r.send, current.send),
  };
  const same =
    next.requestId === current.requestId &&
    next.businessId === current.businessId &&
    next.recipient === current.recipient &&
    next.type === current.type &&
    next.acceptedAt === current.acceptedAt &&
    sameSend(next.send, current.send);
  if (same) return { state: current, changed: false, outcome: 'redundant' };
  next.updatedAt = updatedAt;
  return { state: record(next, eventId), changed: true, outcome: 'result_merged' };
}

function applyStatus(
  current: TrackedMessage | undefined,
  event: StatusEvent,
  eventId: string,
  updatedAt: string,
): ApplyResult {
  const at = canonicalIso(event.at, 'at');
  const field = TIME_FIELD[event.status];
  const error = event.status === 'delivery_failed' ? (event.error ?? null) : undefined;
  if (!current) {
    const state = blank(event.messageId, requireId(event.businessId, 'businessId'), updatedAt);
    state.recipient = event.recipient ?? null;
    state.status = event.status;
    state[field] = at;
    if (error !== undefined) state.error = error;
    return { state: record(state, eventId), changed: true, outcome: 'applied' };
  }
  const rank = RANK[event.status];
  const currentRank = RANK[current.status];
  const time = earliest(current[field], at);
  const timeChanged = time !== current[field];
  if (rank <= currentRank && !timeChanged) {
    return { state: current, changed: false, outcome: rank < currentRank ? 'regression_refused' : 'redundant' };
  }
  const next: TrackedMessage = { ...current, updatedAt };
  next[field] = time;
  if (rank > currentRank) next.status = event.status;
  // The error belongs to the failure whose time is kept.
  if (error !== undefined && timeChanged) next.error = error;
  if (next.recipient === null && event.recipient !== undefined) next.recipient = event.recipient;
  const outcome: ApplyOutcome =
    rank > currentRank
      ? 'applied'
      : current.status === 'delivery_failed' && rank < currentRank
        ? 'filled_after_failure'
        : 'filled_timestamp';
  return { state: record(next, eventId), changed: true, outcome };
}

function blank(messageId: string, businessId: string, updatedAt: string): TrackedMessage {
  return {
    messageId,
    requestId: null,
    businessId,
    recipient: null,
    type: null,
    status: 'accepted',
    acceptedAt: null,
    sentAt: null,
    deliveredAt: null,
    readAt: null,
    failedAt: null,
    error: null,
    events: 0,
    updatedAt,
    send: null,
    eventIds: [],
  };
}

/** The result's summary wins; a result without content (a repeat's: src/sender/README.md) keeps the content known. */
function mergeSend(next: SendSummary | undefined, current: SendSummary | null): SendSummary | null {
  if (!next) return current;
  return next.content === undefined && current?.content !== undefined ? { ...next, content: current.content } : next;
}

function sameSend(a: SendSummary | null, b: SendSummary | null): boolean {
  return (
    a === b ||
    (a !== null &&
      b !== null &&
      a.attempts === b.attempts &&
      a.maybeSent === b.maybeSent &&
      a.requestedType === b.requestedType &&
      a.channel === b.channel &&
      JSON.stringify(a.content) === JSON.stringify(b.content))
  );
}

/** Counts the event and remembers its id, dropping the oldest beyond the bound. */
function record(state: TrackedMessage, eventId: string): TrackedMessage {
  const ids = [...state.eventIds, eventId];
  state.eventIds = ids.length > MAX_REMEMBERED_EVENT_IDS ? ids.slice(ids.length - MAX_REMEMBERED_EVENT_IDS) : ids;
  state.events += 1;
  return state;
}

function earliest(existing: string | null, candidate: string): string {
  return existing !== null && Date.parse(existing) <= Date.parse(candidate) ? existing : candidate;
}

function validNow(now: Date): string {
  if (!(now instanceof Date) || !Number.isFinite(now.getTime()))
    throw invalid('now must be a valid Date', 'now', String(now));
  return now.toISOString();
}

function requireId(value: string, field: string): string {
  if (typeof value !== 'string' || value.length === 0)
    throw invalid(`${field} must be a non-empty string`, field, value);
  return value;
}

function invalid(message: string, field: string, value: unknown): MsgbridgeError {
  return new MsgbridgeError('INVALID_ARGUMENT', message, { details: { field, value } });
}
