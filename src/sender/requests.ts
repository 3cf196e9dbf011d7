import {
  eventIdOf,
  resultEventId,
  HEADER,
  SCHEMA_ID,
  sendRequestRecipient,
  sendRequestSchema,
  type AcceptedSendResult,
  type ExpiredSendResult,
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
const RELAY_ONLY_FIELDS = new Set(['requestId', 'businessId', 'type', 'expiresAt', 'ttlMs', 'conversationWindow', 'fallbackTemplate']);

/** When a request stops being worth sending, and what said so. */
export interface Expiry {
  at: number;
  by: ExpiredSendResult['expiredBy'];
}

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
  /** The earliest of its `expiresAt`, record time + `ttlMs`, record time + `maxRequestAgeMs`. */
  expiry: Expiry;
  /** Set when what goes out is not the request itself: its `fallbackTemplate` (the conversation window is closed). */
  sentAs?: 'template';
}

/** Why a request can never be sent: the `error.code` of its rejected result. */
export type DlqCode = 'RELAY_INVALID_JSON' | 'RELAY_INVALID_REQUEST' | 'RELAY_UNKNOWN_TYPE' | 'RELAY_INVALID_FIELD' | 'RELAY_INVALID_EXPIRY' | 'RELAY_UNKNOWN_BUSINESS' | 'RELAY_AMBIGUOUS_BUSINESS';

export interface DlqJob {
  kind: 'dlq';
  reason: string;
  code: DlqCode;
  record: OutgoingRecord;
  receivedAt: number;
  requestId: string | undefined;
  /** The rejected result it owes, when the request id could be read. */
  result: StoredResult | undefined;
}

export interface PrepareOptions {
  /** When the sender took the record (ms). */
  receivedAt: number;
  /** The record's timestamp (ms), when it has one. */
  producedAt?: number | undefined;
  /** Requests older than this (by record timestamp) are never sent. */
  maxRequestAgeMs: number;
}

export type Job = SendJob | DlqJob;

/** Which business a request is for: its `businessId`, or the only one configured. */
export function resolveBusiness(claimed: string | undefined, businesses: ReadonlyMap<string, string>): { id: string } | { error: string; code: DlqCode } {
  if (claimed !== undefined) {
    return businesses.has(claimed) ? { id: claimed } : { error: `unknown business "${claimed}": it is not configured in this sender`, code: 'RELAY_UNKNOWN_BUSINESS' };
  }
  if (businesses.size === 1) return { id: businesses.keys().next().value as string };
  return { error: `businessId is missing and ${businesses.size} businesses are configured: the request must name one`, code: 'RELAY_AMBIGUOUS_BUSINESS' };
}

/**
 * Parses and validates one record. Anything that can never be sent (not JSON, not a send
 * request, unknown or ambiguous business) becomes a DLQ job with the reason, and with the
 * rejected result it owes when its request id can be read.
 */
export function prepareJob(record: IncomingRecord, businesses: ReadonlyMap<string, string>, options: PrepareOptions): Job {
  const { receivedAt } = options;
  const producedAt = options.producedAt !== undefined && Number.isFinite(options.producedAt) && options.producedAt > 0 ? options.producedAt : undefined;
  const raw = record.value ?? Buffer.alloc(0);
  const text = raw.toString('utf8');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    const claim = { requestId: requestIdInBrokenJson(text), businessId: undefined };
    return dlqJob(record, 'RELAY_INVALID_JSON', `not valid JSON: ${(error as Error).message}`, claim, false, receivedAt);
  }
  const claim = claimedIds(json);
  const parsed = sendRequestSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues.slice(0, 5).map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`);
    return dlqJob(record, invalidCode(parsed.error.issues), `not a valid send request: ${issues.join('; ')}`, claim, true, receivedAt);
  }
  const request = parsed.data;
  const business = resolveBusiness(request.businessId, businesses);
  if ('error' in business) return dlqJob(record, business.code, business.error, claim, true, receivedAt);
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
    expiry: expiryOf(request, producedAt ?? receivedAt, options.maxRequestAgeMs),
  };
}

/** The earliest deadline among the request's own and the sender's age limit. */
export function expiryOf(request: Pick<SendRequest, 'expiresAt' | 'ttlMs'>, recordTime: number, maxRequestAgeMs: number): Expiry {
  let expiry: Expiry = { at: recordTime + maxRequestAgeMs, by: 'maxRequestAgeMs' };
  if (request.ttlMs !== undefined && recordTime + request.ttlMs <= expiry.at) expiry = { at: recordTime + request.ttlMs, by: 'ttlMs' };
  if (request.expiresAt !== undefined) {
    const at = Date.parse(request.expiresAt);
    if (at <= expiry.at) expiry = { at, by: 'expiresAt' };
  }
  return expiry;
}

function invalidCode(issues: readonly { path: readonly PropertyKey[]; code: string }[]): DlqCode {
  const first = issues[0];
  const field = first?.path[0];
  if (field === 'type') return 'RELAY_UNKNOWN_TYPE';
  if (field === 'expiresAt' || field === 'ttlMs') return 'RELAY_INVALID_EXPIRY';
  if (field === undefined) return 'RELAY_INVALID_REQUEST';
  return 'RELAY_INVALID_FIELD';
}

/** A request id that a producer can correlate on, from a body that is not JSON (best effort). */
function requestIdInBrokenJson(text: string): string | undefined {
  const match = /"requestId"\s*:\s*"((?:[^"\\\u0000-\u001f]|\\.){1,256})"/.exec(text.slice(0, 64 * 1024));
  if (!match) return undefined;
  try {
    const id = JSON.parse(`"${match[1]}"`) as string;
    return readableId(id, 256);
  } catch {
    return undefined;
  }
}

function readableId(value: unknown, max: number): string | undefined {
  return typeof value === 'string' && value.length > 0 && value.length <= max ? value : undefined;
}

interface Claim {
  requestId: string | undefined;
  businessId: string | undefined;
}

function claimedIds(json: unknown): Claim {
  if (typeof json !== 'object' || json === null) return { requestId: undefined, businessId: undefined };
  const value = json as Record<string, unknown>;
  return { requestId: readableId(value.requestId, 256), businessId: readableId(value.businessId, 128) };
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

function dlqJob(record: IncomingRecord, code: DlqCode, reason: string, claim: Claim, isJson: boolean, receivedAt: number): DlqJob {
  const value = record.value ?? Buffer.alloc(0);
  const shortReason = reason.length > MAX_REASON ? `${reason.slice(0, MAX_REASON)}…` : reason;
  const headers: Record<string, HeaderValue> = {
    ...copyHeaders(record.headers),
    [HEADER.eventId]: eventIdOf(value),
    [HEADER.receivedAt]: String(receivedAt),
    [HEADER.contentType]: isJson ? 'application/json' : 'application/octet-stream',
    [HEADER.schema]: SCHEMA_ID.sendRequestsDlq,
    [HEADER.errorReason]: shortReason,
    'error-code': code,
    'source-topic': record.topic,
    'source-partition': String(record.partition),
    'source-offset': record.offset,
  };
  if (claim.businessId !== undefined) headers[HEADER.businessId] = claim.businessId;
  let result: DlqJob['result'];
  if (claim.requestId !== undefined) {
    const rejected: RejectedSendResult = {
      requestId: claim.requestId,
      ...(claim.businessId !== undefined ? { businessId: claim.businessId } : {}),
      outcome: 'rejected',
      attempts: 0,
      maybeSent: false,
      rejectedAt: new Date(receivedAt).toISOString(),
      error: { message: `the request was sent to the dead-letter topic and will never be sent: ${shortReason}`, type: 'RELAY_INVALID_REQUEST', code, retriable: false },
    };
    result = storedResult(rejected);
  }
  return { kind: 'dlq', reason, code, record: { key: record.key, value, headers }, receivedAt, requestId: claim.requestId, result };
}

/**
 * The DLQ copy of a request that would not fit in a record (`maxBytes`, the topic's
 * max.message.bytes less room for the batch): its value is replaced by a reference to the
 * original record, which stays in the source topic until retention removes it.
 */
export function fitDlqRecord<R extends { key: string | Buffer | null; value: string | Buffer; headers: Record<string, HeaderValue> }>(record: R, maxBytes: number): R | OutgoingRecord {
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
  headers[HEADER.errorReason] = `${String(headers[HEADER.errorReason] ?? '')} (the original ${original} bytes do not fit in the DLQ topic: value replaced by a reference to the source record)`.slice(
    0,
    MAX_REASON + 200,
  );
  headers[HEADER.contentType] = 'application/json';
  headers['dlq-value'] = 'reference';
  let fitted: OutgoingRecord = { key: record.key, value: Buffer.from(JSON.stringify(reference)), headers };
  // Headers copied from the request can be large too: keep only the relay's own.
  if (recordSize(fitted) > maxBytes) {
    const own: Record<string, HeaderValue> = {};
    for (const name of [...RELAY_HEADERS, 'error-code', 'source-topic', 'source-partition', 'source-offset', 'dlq-value']) if (headers[name] !== undefined) own[name] = headers[name];
    fitted = { key: typeof record.key === 'string' || record.key === null ? record.key : record.key.subarray(0, 1024), value: fitted.value, headers: own };
  }
  return fitted;
}

function recordSize(record: { key: string | Buffer | null; value: string | Buffer; headers: Record<string, HeaderValue> }): number {
  let size = Buffer.byteLength(record.value) + (record.key === null ? 0 : Buffer.byteLength(record.key)) + 64;
  for (const [name, value] of Object.entries(record.headers)) size += Buffer.byteLength(name) + Buffer.byteLength(value) + 8;
  return size;
}

export function acceptedResult(job: SendJob, messageId: string, attempts: number, maybeSent: boolean, at: Date): AcceptedSendResult {
  return {
    requestId: job.request.requestId,
    businessId: job.businessId,
    outcome: 'accepted',
    messageId,
    type: job.request.type,
    recipient: job.recipient,
    attempts,
    maybeSent,
    acceptedAt: at.toISOString(),
    ...sentAs(job),
  };
}

export function rejectedResult(job: SendJob, error: SendFailure, attempts: number, maybeSent: boolean, at: Date): RejectedSendResult {
  return {
    requestId: job.request.requestId,
    businessId: job.businessId,
    outcome: 'rejected',
    type: job.request.type,
    recipient: job.recipient,
    attempts,
    maybeSent,
    rejectedAt: at.toISOString(),
    error: maybeSent ? { ...error, maybeSent: true, message: `${error.message} (an earlier attempt may have created the message: do not resend blindly)` } : error,
    ...sentAs(job),
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
export function resultRecord(result: AcceptedSendResult | RejectedSendResult | ExpiredSendResult): { key: string; value: Buffer } {
  const value = Buffer.from(JSON.stringify(result));
  return { key: result.outcome === 'accepted' ? result.messageId : result.requestId, value };
}

/** A result ready to publish (and to keep for repeats of its request). */
export interface StoredResult {
  key: string;
  value: Buffer;
  businessId: string | undefined;
  eventId: string;
}

export function storedResult(result: AcceptedSendResult | RejectedSendResult | ExpiredSendResult): StoredResult {
  return { ...resultRecord(result), businessId: result.businessId, eventId: resultEventId(result.businessId ?? '', result.requestId, result.outcome) };
}

/**
 * Headers of a result record: the request's headers, then the relay's. `event-id` is derived
 * from (business, request id, outcome), so a result written again carries the same id.
 */
export function resultHeaders(stored: Pick<StoredResult, 'businessId' | 'eventId'>, requestHeaders: RecordHeaders, receivedAt: number): Record<string, HeaderValue> {
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
