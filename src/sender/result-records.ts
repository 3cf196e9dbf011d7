import { CHANNEL, RELAY_ERROR_TYPE, RELAY_RESULT_CODE, sendRequestChannel, type DlqCode } from '../contracts/index.js';
import {
  DLQ_HEADER,
  eventIdOf,
  requestContentOf,
  resultEventId,
  HEADER,
  SCHEMA_ID,
  type AcceptedSendResult,
  type ExpiredSendResult,
  type RejectedSendResult,
  type SendFailure,
} from '../contracts/index.js';
import type { Claim, HeaderValue, IncomingRecord, OutgoingRecord, RecordHeaders, SendJob } from './requests.js';
import type { AttemptOutcome } from './retry-policy.js';

/**
 * From an outcome to a `send-results` or `send-requests-dlq` record: the result values, their
 * keys and headers (`event-id`), the DLQ copies and their fitting into the DLQ topic. Pure:
 * no Kafka, no HTTP.
 */

/** Header names the relay sets itself; a request's own copies of them are not carried over. */
const RELAY_HEADERS = new Set<string>([
  HEADER.eventId,
  HEADER.businessId,
  HEADER.receivedAt,
  HEADER.contentType,
  HEADER.schema,
  HEADER.errorReason,
]);

/** The request's headers (traceparent, correlation-*, anything else) minus the relay's own names. */
export function copyHeaders(headers: RecordHeaders): Record<string, HeaderValue> {
  const out: Record<string, HeaderValue> = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value === undefined || RELAY_HEADERS.has(name.toLowerCase())) continue;
    const first = Array.isArray(value) ? value[0] : value;
    if (first !== undefined) out[name] = first;
  }
  return out;
}

const MAX_REASON = 1000;

/**
 * The DLQ copy of a request that can never be sent (its key, bytes and headers, with the
 * reason), and the rejected result it owes when its request id could be read.
 */
export function deadLetter(
  record: IncomingRecord,
  code: DlqCode,
  reason: string,
  claim: Claim,
  isJson: boolean,
  receivedAt: number,
): { record: OutgoingRecord; result: StoredResult | undefined } {
  const value = record.value ?? Buffer.alloc(0);
  const shortReason = reason.length > MAX_REASON ? `${reason.slice(0, MAX_REASON)}…` : reason;
  const headers: Record<string, HeaderValue> = {
    ...copyHeaders(record.headers),
    [HEADER.eventId]: eventIdOf(value),
    [HEADER.receivedAt]: String(receivedAt),
    [HEADER.contentType]: isJson ? 'application/json' : 'application/octet-stream',
    [HEADER.schema]: SCHEMA_ID.sendRequestsDlq,
    [HEADER.errorReason]: shortReason,
    // What a redrive needs (msgbridge dlq redrive): the source topic; the key is the record's own.
    [DLQ_HEADER.errorCode]: code,
    [DLQ_HEADER.sourceTopic]: record.topic,
    [DLQ_HEADER.sourcePartition]: String(record.partition),
    [DLQ_HEADER.sourceOffset]: record.offset,
  };
  if (claim.businessId !== undefined) headers[HEADER.businessId] = claim.businessId;
  let result: StoredResult | undefined;
  if (claim.requestId !== undefined) {
    const rejected: RejectedSendResult = {
      requestId: claim.requestId,
      ...(claim.businessId !== undefined ? { businessId: claim.businessId } : {}),
      outcome: 'rejected',
      attempts: 0,
      maybeSent: false,
      rejectedAt: new Date(receivedAt).toISOString(),
      error: {
        message: `the request was sent to the dead-letter topic and will never be sent: ${shortReason}`,
        type: RELAY_ERROR_TYPE.invalidRequest,
        code,
        retriable: false,
      },
    };
    result = storedResult(rejected);
  }
  return { record: { key: record.key, value, headers }, result };
}

/**
 * The DLQ copy of a request that would not fit in a record (`maxBytes`, the topic's
 * max.message.bytes less room for the batch): its value is replaced by a reference to the
 * original record, which stays in the source topic until retention removes it.
 */
export function fitDlqRecord<
  R extends { key: string | Buffer | null; value: string | Buffer; headers: Record<string, HeaderValue> },
>(record: R, maxBytes: number): R | OutgoingRecord {
  if (recordSize(record) <= maxBytes) return record;
  const headers = { ...record.headers };
  const original = Buffer.byteLength(record.value);
  const reference = {
    truncated: true,
    originalBytes: original,
    sourceTopic: String(headers['source-topic'] ?? ''),
    sourcePartition: Number(headers['source-partition'] ?? -1),
    sourceOffset: String(headers['source-offset'] ?? ''),
  };
  headers[HEADER.errorReason] =
    `${String(headers[HEADER.errorReason] ?? '')} (the original ${original} bytes do not fit in the DLQ topic: value replaced by a reference to the source record)`.slice(
      0,
      MAX_REASON + 200,
    );
  headers[HEADER.contentType] = 'application/json';
  headers['dlq-value'] = 'reference';
  let fitted: OutgoingRecord = { key: record.key, value: Buffer.from(JSON.stringify(reference)), headers };
  // Headers copied from the request can be large too: keep only the relay's own.
  if (recordSize(fitted) > maxBytes) {
    const own: Record<string, HeaderValue> = {};
    for (const name of [
      ...RELAY_HEADERS,
      'error-code',
      'source-topic',
      'source-partition',
      'source-offset',
      'dlq-value',
    ])
      if (headers[name] !== undefined) own[name] = headers[name];
    fitted = {
      key: typeof record.key === 'string' || record.key === null ? record.key : record.key.subarray(0, 1024),
      value: fitted.value,
      headers: own,
    };
  }
  return fitted;
}

function recordSize(record: {
  key: string | Buffer | null;
  value: string | Buffer;
  headers: Record<string, HeaderValue>;
}): number {
  let size = Buffer.byteLength(record.value) + (record.key === null ? 0 : Buffer.byteLength(record.key)) + 64;
  for (const [name, value] of Object.entries(record.headers))
    size += Buffer.byteLength(name) + Buffer.byteLength(value) + 8;
  return size;
}

export function acceptedResult(
  job: SendJob,
  messageId: string,
  attempts: number,
  maybeSent: boolean,
  at: Date,
): AcceptedSendResult {
  return {
    requestId: job.request.requestId,
    businessId: job.businessId,
    outcome: 'accepted',
    messageId,
    type: job.request.type,
    recipient: job.recipient,
    // What went out: a text sent as its fallback template went out on WhatsApp.
    channel: job.operation === 'template' ? CHANNEL.whatsapp : sendRequestChannel(job.request),
    attempts,
    maybeSent,
    acceptedAt: at.toISOString(),
    ...sentAs(job),
    content: requestContentOf(job.request),
  };
}

export function rejectedResult(
  job: SendJob,
  error: SendFailure,
  attempts: number,
  maybeSent: boolean,
  at: Date,
): RejectedSendResult {
  return {
    requestId: job.request.requestId,
    businessId: job.businessId,
    outcome: 'rejected',
    type: job.request.type,
    recipient: job.recipient,
    attempts,
    maybeSent,
    rejectedAt: at.toISOString(),
    error: maybeSent
      ? {
          ...error,
          maybeSent: true,
          message: `${error.message} (an earlier attempt may have created the message: do not resend blindly)`,
        }
      : error,
    ...sentAs(job),
    content: requestContentOf(job.request),
  };
}

export function expiredResult(job: SendJob, attempts: number, maybeSent: boolean, at: Date): ExpiredSendResult {
  return {
    requestId: job.request.requestId,
    businessId: job.businessId,
    outcome: 'expired',
    type: job.request.type,
    recipient: job.recipient,
    attempts,
    maybeSent,
    expiresAt: new Date(job.expiry.at).toISOString(),
    expiredBy: job.expiry.by,
    expiredAt: at.toISOString(),
    ...sentAs(job),
    content: requestContentOf(job.request),
  };
}

function sentAs(job: SendJob): { sentAs?: 'template' } {
  return job.sentAs ? { sentAs: job.sentAs } : {};
}

/** The `error` of a rejected result: the provider's error object when it sent one, else the relay's description. */
export function failureOf(outcome: AttemptOutcome, retriable: boolean): SendFailure {
  switch (outcome.kind) {
    case 'http-error':
      if (outcome.error) {
        const { message, type, code, userTitle, userMessage, cntTraceId, details } = outcome.error;
        return dropUndefined({
          httpStatus: outcome.status,
          message,
          type,
          code,
          userTitle,
          userMessage,
          cntTraceId,
          details,
          retriable,
        });
      }
      return dropUndefined({
        httpStatus: outcome.status,
        message: `the provider answered HTTP ${outcome.status}${outcome.bodySnippet ? `: ${outcome.bodySnippet}` : ''}`,
        type: RELAY_ERROR_TYPE.httpError,
        code: `RELAY_HTTP_${outcome.status}`,
        retriable,
      });
    case 'invalid-response':
      return {
        httpStatus: outcome.status,
        message: `the provider answered HTTP ${outcome.status} without a message id; the message may or may not exist${outcome.bodySnippet ? `: ${outcome.bodySnippet}` : ''}`,
        type: RELAY_ERROR_TYPE.invalidResponse,
        code: RELAY_RESULT_CODE.createdWithoutId,
        retriable,
      };
    case 'timeout':
      return {
        message: outcome.message,
        type: RELAY_ERROR_TYPE.transportError,
        code: RELAY_RESULT_CODE.timeout,
        retriable,
      };
    case 'network':
      return {
        message: `${outcome.code}: ${outcome.message}`,
        type: RELAY_ERROR_TYPE.transportError,
        code: RELAY_RESULT_CODE.networkError,
        retriable,
      };
    case 'accepted':
      throw new Error('an accepted outcome is not a failure');
  }
}

function dropUndefined<T extends Record<string, unknown>>(value: T): T {
  for (const key of Object.keys(value)) if (value[key] === undefined) delete value[key];
  return value;
}

/** The `send-results` record: keyed by the message id (the request id when there is none). */
export function resultRecord(result: AcceptedSendResult | RejectedSendResult | ExpiredSendResult): {
  key: string;
  value: Buffer;
} {
  const value = Buffer.from(JSON.stringify(result));
  return { key: result.outcome === 'accepted' ? result.messageId : result.requestId, value };
}

/**
 * A result ready to publish; `withoutContent` is what the request ledger keeps for repeats
 * of its request. The value is a string, not a Buffer: the producer encodes it as the same
 * UTF-8 bytes, and a small Buffer would be a slice of a shared 8 KiB pool.
 */
export interface StoredResult {
  key: string;
  value: string;
  /**
   * `value` without its `content`: what is kept for repeats (completedRequestIdsMax of them), as
   * the content could make each kept result up to ~30 times larger (src/sender/README.md,
   * "Duplicates"). A repeat's result therefore says "not recorded" for the content; the first
   * has it. Only this string is kept: `fromRepeat` reads the key, business and event id back
   * from it when a request is repeated, which is rare (about 180 bytes less per entry).
   */
  withoutContent: string;
  businessId: string | undefined;
  eventId: string;
}

/**
 * The result's JSON is built in two parts, the fields before `content` (the last field of every
 * result) and `content`, so the part kept for repeats is a string of its own: a slice of the whole
 * JSON would keep the whole JSON, content and all, alive in the LRU (V8's sliced strings hold
 * their parent). `value` is `JSON.stringify(result)` byte for byte.
 */
export function storedResult(result: AcceptedSendResult | RejectedSendResult | ExpiredSendResult): StoredResult {
  const key = result.outcome === 'accepted' ? result.messageId : result.requestId;
  const { content, ...fields } = result;
  const withoutContent = JSON.stringify(fields);
  const value =
    content === undefined ? withoutContent : `${withoutContent.slice(0, -1)},"content":${JSON.stringify(content)}}`;
  return {
    key,
    value,
    withoutContent,
    businessId: result.businessId,
    eventId: resultEventId(result.businessId ?? '', result.requestId, result.outcome),
  };
}

/** A kept result (`withoutContent`) as a result to publish again. */
export function fromRepeat(value: string): StoredResult {
  const result = JSON.parse(value) as { outcome: string; requestId: string; businessId?: string; messageId?: string };
  const key = result.outcome === 'accepted' && result.messageId !== undefined ? result.messageId : result.requestId;
  return {
    key,
    value,
    withoutContent: value,
    businessId: result.businessId,
    eventId: resultEventId(result.businessId ?? '', result.requestId, result.outcome),
  };
}

/**
 * Headers of a result record: the request's headers, then the relay's. `event-id` is derived
 * from (business, request id, outcome), so a result written again carries the same id.
 */
export function resultHeaders(
  stored: Pick<StoredResult, 'businessId' | 'eventId'>,
  requestHeaders: RecordHeaders,
  receivedAt: number,
): Record<string, HeaderValue> {
  const headers: Record<string, HeaderValue> = {
    ...copyHeaders(requestHeaders),
    [HEADER.eventId]: stored.eventId,
    [HEADER.receivedAt]: String(receivedAt),
    [HEADER.contentType]: 'application/json',
    [HEADER.schema]: SCHEMA_ID.sendResult,
  };
  if (stored.businessId !== undefined) headers[HEADER.businessId] = stored.businessId;
  return headers;
}
