import {
  eventIdOf,
  HEADER,
  SCHEMA_ID,
  sendRequestRecipient,
  sendRequestSchema,
  type AcceptedSendResult,
  type RejectedSendResult,
  type SendFailure,
  type SendOperation,
  type SendRequest,
} from '../contracts/index.js';
import type { AttemptOutcome } from './retry-policy.js';

/**
 * From a `send-requests` record to a provider call, and from an outcome to a `send-results`
 * or `send-requests-dlq` record. Pure: no Kafka, no HTTP.
 */

export type HeaderValue = string | Buffer;
export type RecordHeaders = Record<string, HeaderValue | (string | Buffer)[] | undefined>;

export interface IncomingRecord {
  topic: string;
  partition: number;
  offset: string;
  key: Buffer | null;
  value: Buffer | null;
  headers: RecordHeaders;
}

export interface OutgoingRecord {
  key: string | Buffer | null;
  value: Buffer;
  headers: Record<string, HeaderValue>;
}

/** Fields that belong to the relay, never sent to the provider. */
const RELAY_ONLY_FIELDS = new Set(['requestId', 'businessId', 'type']);

export interface SendJob {
  kind: 'send';
  request: SendRequest;
  businessId: string;
  operation: SendOperation;
  recipient: string;
  /** The body of the provider call: the request minus the relay's own fields, unknown fields included. */
  body: Record<string, unknown>;
  headers: RecordHeaders;
  receivedAt: number;
  /** Kafka timestamp of the request record (ms), for the request-to-result latency. */
  producedAt: number | undefined;
}

export interface DlqJob {
  kind: 'dlq';
  reason: string;
  record: OutgoingRecord;
}

export type Job = SendJob | DlqJob;

/** Which business a request is for: its `businessId`, or the only one configured. */
export function resolveBusiness(claimed: string | undefined, businesses: ReadonlyMap<string, string>): { id: string } | { error: string } {
  if (claimed !== undefined) {
    return businesses.has(claimed) ? { id: claimed } : { error: `unknown business "${claimed}": it is not configured in this sender` };
  }
  if (businesses.size === 1) return { id: businesses.keys().next().value as string };
  return { error: `businessId is missing and ${businesses.size} businesses are configured: the request must name one` };
}

/**
 * Parses and validates one record. Anything that can never be sent (not JSON, not a send
 * request, unknown or ambiguous business) becomes a DLQ job with the reason.
 */
export function prepareJob(record: IncomingRecord, businesses: ReadonlyMap<string, string>, receivedAt: number, producedAt?: number): Job {
  const raw = record.value ?? Buffer.alloc(0);
  let json: unknown;
  try {
    json = JSON.parse(raw.toString('utf8'));
  } catch (error) {
    return dlqJob(record, `not valid JSON: ${(error as Error).message}`, undefined, false, receivedAt);
  }
  const claimedBusiness = claimedBusinessId(json);
  const parsed = sendRequestSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.slice(0, 5).map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`);
    return dlqJob(record, `not a valid send request: ${issues.join('; ')}`, claimedBusiness, true, receivedAt);
  }
  const request = parsed.data;
  const business = resolveBusiness(request.businessId, businesses);
  if ('error' in business) return dlqJob(record, business.error, claimedBusiness, true, receivedAt);
  const body: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(request)) if (!RELAY_ONLY_FIELDS.has(field)) body[field] = value;
  return {
    kind: 'send',
    request,
    businessId: business.id,
    operation: request.type,
    recipient: sendRequestRecipient(request),
    body,
    headers: record.headers,
    receivedAt,
    producedAt,
  };
}

function claimedBusinessId(json: unknown): string | undefined {
  if (typeof json !== 'object' || json === null) return undefined;
  const value = (json as Record<string, unknown>).businessId;
  return typeof value === 'string' && value.length > 0 && value.length <= 128 ? value : undefined;
}

/** Header names the relay sets itself; a request's own copies of them are not carried over. */
const RELAY_HEADERS = new Set<string>([HEADER.eventId, HEADER.businessId, HEADER.receivedAt, HEADER.contentType, HEADER.schema, HEADER.errorReason]);

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

function dlqJob(record: IncomingRecord, reason: string, businessId: string | undefined, isJson: boolean, receivedAt: number): DlqJob {
  const value = record.value ?? Buffer.alloc(0);
  const headers: Record<string, HeaderValue> = {
    ...copyHeaders(record.headers),
    [HEADER.eventId]: eventIdOf(value),
    [HEADER.receivedAt]: String(receivedAt),
    [HEADER.contentType]: isJson ? 'application/json' : 'application/octet-stream',
    [HEADER.schema]: SCHEMA_ID.sendRequestsDlq,
    [HEADER.errorReason]: reason.length > MAX_REASON ? `${reason.slice(0, MAX_REASON)}…` : reason,
    'source-topic': record.topic,
    'source-partition': String(record.partition),
    'source-offset': record.offset,
  };
  if (businessId !== undefined) headers[HEADER.businessId] = businessId;
  return { kind: 'dlq', reason, record: { key: record.key, value, headers } };
}

export function acceptedResult(job: SendJob, messageId: string, attempts: number, at: Date): AcceptedSendResult {
  return {
    requestId: job.request.requestId,
    businessId: job.businessId,
    outcome: 'accepted',
    messageId,
    type: job.request.type,
    recipient: job.recipient,
    attempts,
    acceptedAt: at.toISOString(),
  };
}

export function rejectedResult(job: SendJob, error: SendFailure, attempts: number, at: Date): RejectedSendResult {
  return {
    requestId: job.request.requestId,
    businessId: job.businessId,
    outcome: 'rejected',
    type: job.request.type,
    recipient: job.recipient,
    attempts,
    rejectedAt: at.toISOString(),
    error,
  };
}

/** The `error` of a rejected result: the provider's error object when it sent one, else the relay's description. */
export function failureOf(outcome: AttemptOutcome, retriable: boolean): SendFailure {
  switch (outcome.kind) {
    case 'http-error':
      if (outcome.error) {
        const { message, type, code, userTitle, userMessage, cntTraceId, details } = outcome.error;
        return dropUndefined({ httpStatus: outcome.status, message, type, code, userTitle, userMessage, cntTraceId, details, retriable });
      }
      return dropUndefined({
        httpStatus: outcome.status,
        message: `the provider answered HTTP ${outcome.status}${outcome.bodySnippet ? `: ${outcome.bodySnippet}` : ''}`,
        type: 'RELAY_HTTP_ERROR',
        code: `RELAY_HTTP_${outcome.status}`,
        retriable,
      });
    case 'invalid-response':
      return {
        httpStatus: outcome.status,
        message: `the provider answered HTTP ${outcome.status} without a message id; the message may or may not exist${outcome.bodySnippet ? `: ${outcome.bodySnippet}` : ''}`,
        type: 'RELAY_INVALID_RESPONSE',
        code: 'RELAY_CREATED_WITHOUT_ID',
        retriable,
      };
    case 'timeout':
      return { message: outcome.message, type: 'RELAY_TRANSPORT_ERROR', code: 'RELAY_TIMEOUT', retriable };
    case 'network':
      return { message: `${outcome.code}: ${outcome.message}`, type: 'RELAY_TRANSPORT_ERROR', code: 'RELAY_NETWORK_ERROR', retriable };
    case 'accepted':
      throw new Error('an accepted outcome is not a failure');
  }
}

function dropUndefined<T extends Record<string, unknown>>(value: T): T {
  for (const key of Object.keys(value)) if (value[key] === undefined) delete value[key];
  return value;
}

/** The `send-results` record: keyed by the message id (the request id when there is none). */
export function resultRecord(result: AcceptedSendResult | RejectedSendResult): { key: string; value: Buffer } {
  const value = Buffer.from(JSON.stringify(result));
  return { key: result.outcome === 'accepted' ? result.messageId : result.requestId, value };
}

/**
 * Headers of a result record: the request's headers, then the relay's. `event-id` is the hash
 * of the result bytes, so a result republished for a duplicate request carries the same id.
 */
export function resultHeaders(stored: { value: Buffer; businessId: string }, requestHeaders: RecordHeaders, receivedAt: number): Record<string, HeaderValue> {
  return {
    ...copyHeaders(requestHeaders),
    [HEADER.eventId]: eventIdOf(stored.value),
    [HEADER.businessId]: stored.businessId,
    [HEADER.receivedAt]: String(receivedAt),
    [HEADER.contentType]: 'application/json',
    [HEADER.schema]: SCHEMA_ID.sendResult,
  };
}
