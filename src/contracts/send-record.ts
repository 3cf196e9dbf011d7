import { HEADER, SCHEMA_ID } from './headers.js';
import { sendRequestRecipient, sendRequestSchema, type SendRequest } from './send.js';

/** The topic send requests go to unless the deployment renamed it (`kafka.topics.sendRequests`). */
export const DEFAULT_SEND_REQUESTS_TOPIC = 'send-requests';

/**
 * A send request as a Kafka record, the way the relay's own producer (`msgbridge send`) writes
 * it: key = the recipient (the sender runs one request per key at a time, so the key is what
 * keeps a customer's messages in order), value = the request as UTF-8 JSON, headers
 * `content-type` and `schema`. Strings throughout: kafkajs and its API-compatible clients take
 * them as they are; `Buffer.from(value)` for a client that wants bytes.
 */
export interface SendRequestRecord {
  topic: string;
  key: string;
  value: string;
  headers: Record<string, string>;
}

export interface SendRequestRecordOptions {
  /** Default `send-requests`. */
  topic?: string;
  /**
   * More headers (`traceparent`, `correlation-id`...): copied onto the request's result by the sender. `content-type`
   * and `schema` are the relay's.
   */
  headers?: Record<string, string>;
}

/** An invalid send request: `field` names the first field at fault (`recipient.id`), `issues` lists every one. */
export class SendRequestInvalidError extends Error {
  override readonly name = 'SendRequestInvalidError';
  constructor(
    readonly field: string,
    readonly issues: { field: string; message: string }[],
  ) {
    super(`invalid send request: ${field}: ${issues[0]?.message ?? 'invalid'}`);
  }
}

function fieldOf(issue: { path: PropertyKey[] }): string {
  return issue.path.length === 0 ? '(the request)' : issue.path.map(String).join('.');
}

/**
 * The request as the sender reads it (defaults applied, unknown fields kept), or `SendRequestInvalidError` naming the
 * field at fault.
 */
export function parseSendRequest(request: unknown): SendRequest {
  const parsed = sendRequestSchema.safeParse(request);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((issue) => ({ field: fieldOf(issue), message: issue.message }));
  throw new SendRequestInvalidError(issues[0]!.field, issues);
}

/**
 * Validates `request` with the relay's own schema (the one the sender reads with) and returns
 * it as a record; an invalid request throws `SendRequestInvalidError` naming the field, before
 * anything reaches Kafka (the sender would dead-letter it and answer a rejected result).
 */
export function sendRequestRecord(request: unknown, options: SendRequestRecordOptions = {}): SendRequestRecord {
  const valid = parseSendRequest(request);
  return {
    topic: options.topic ?? DEFAULT_SEND_REQUESTS_TOPIC,
    key: sendRequestRecipient(valid),
    value: JSON.stringify(valid),
    headers: { ...options.headers, [HEADER.contentType]: 'application/json', [HEADER.schema]: SCHEMA_ID.sendRequest },
  };
}
