import {
  sendRequestRecipient,
  sendRequestSchema,
  type DlqCode,
  type ExpiredSendResult,
  type SendOperation,
  type SendRequest,
} from '../contracts/index.js';
import { deadLetter, type StoredResult } from './result-records.js';
import { errorMessage } from '../platform/errors.js';

/**
 * From a `send-requests` record to a job: a provider call, or a DLQ record for a request that
 * can never be sent (the records themselves are built in result-records.ts). Pure: no Kafka,
 * no HTTP.
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
const RELAY_ONLY_FIELDS = new Set([
  'requestId',
  'businessId',
  'type',
  'expiresAt',
  'ttlMs',
  'conversationWindow',
  'fallbackTemplate',
]);

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

/** Why a request can never be sent: the `error.code` of its rejected result (src/contracts/relay-errors.ts). */
export type { DlqCode };

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
export function resolveBusiness(
  claimed: string | undefined,
  businesses: ReadonlyMap<string, string>,
): { id: string } | { error: string; code: DlqCode } {
  if (claimed !== undefined) {
    return businesses.has(claimed)
      ? { id: claimed }
      : { error: `unknown business "${claimed}": it is not configured in this sender`, code: 'RELAY_UNKNOWN_BUSINESS' };
  }
  if (businesses.size === 1) return { id: businesses.keys().next().value as string };
  return {
    error: `businessId is missing and ${businesses.size} businesses are configured: the request must name one`,
    code: 'RELAY_AMBIGUOUS_BUSINESS',
  };
}

/**
 * Parses and validates one record. Anything that can never be sent (not JSON, not a send
 * request, unknown or ambiguous business) becomes a DLQ job with the reason, and with the
 * rejected result it owes when its request id can be read.
 */
export function prepareJob(
  record: IncomingRecord,
  businesses: ReadonlyMap<string, string>,
  options: PrepareOptions,
): Job {
  const { receivedAt } = options;
  const producedAt =
    options.producedAt !== undefined && Number.isFinite(options.producedAt) && options.producedAt > 0
      ? options.producedAt
      : undefined;
  const raw = record.value ?? Buffer.alloc(0);
  const text = raw.toString('utf8');
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (error) {
    const claim = { requestId: requestIdInBrokenJson(text), businessId: undefined };
    return dlqJob(record, 'RELAY_INVALID_JSON', `not valid JSON: ${errorMessage(error)}`, claim, false, receivedAt);
  }
  const claim = claimedIds(json);
  const parsed = sendRequestSchema.safeParse(json);
  if (!parsed.success) {
    const issues = parsed.error.issues
      .slice(0, 5)
      .map((i) => `${i.path.map(String).join('.') || '(root)'}: ${i.message}`);
    return dlqJob(
      record,
      invalidCode(parsed.error.issues),
      `not a valid send request: ${issues.join('; ')}`,
      claim,
      true,
      receivedAt,
    );
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
export function expiryOf(
  request: Pick<SendRequest, 'expiresAt' | 'ttlMs'>,
  recordTime: number,
  maxRequestAgeMs: number,
): Expiry {
  let expiry: Expiry = { at: recordTime + maxRequestAgeMs, by: 'maxRequestAgeMs' };
  if (request.ttlMs !== undefined && recordTime + request.ttlMs <= expiry.at)
    expiry = { at: recordTime + request.ttlMs, by: 'ttlMs' };
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

/** The ids a record claims, read even when it is not a valid request. */
export interface Claim {
  requestId: string | undefined;
  businessId: string | undefined;
}

function claimedIds(json: unknown): Claim {
  if (typeof json !== 'object' || json === null) return { requestId: undefined, businessId: undefined };
  const value = json as Record<string, unknown>;
  return { requestId: readableId(value.requestId, 256), businessId: readableId(value.businessId, 128) };
}

function dlqJob(
  record: IncomingRecord,
  code: DlqCode,
  reason: string,
  claim: Claim,
  isJson: boolean,
  receivedAt: number,
): DlqJob {
  const { record: copy, result } = deadLetter(record, code, reason, claim, isJson, receivedAt);
  return { kind: 'dlq', reason, code, record: copy, receivedAt, requestId: claim.requestId, result };
}
