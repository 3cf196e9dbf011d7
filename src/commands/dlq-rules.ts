import type { Config } from '../config/schema.js';
import { DLQ_HEADER, HEADER, SCHEMA_ID, SIGNATURE_HEADER } from '../contracts/headers.js';
import type { WebhookTopic } from '../contracts/webhook-events.js';
import { REDRIVE_REFUSAL_CODE, type DlqCode } from '../contracts/relay-errors.js';
import {
  createWebhookHandler,
  isWebhookTopic,
  rulesFromConfig,
  type RejectReason,
  type WebhookHandler,
} from '../ingress/handle-webhook.js';
import { prepareJob, type RecordHeaders } from '../sender/requests.js';
import type { ConsumedRecord } from '../kafka/group-consumer.js';
import { headersToStrings } from '../kafka/headers.js';

/**
 * What `msgbridge dlq` knows about a dead letter: which role wrote it, why (its code), for which
 * business, and what a redrive would do with it now. The re-check is the roles' own code, not a
 * copy: a webhook goes through the ingress's decision (src/ingress/handle-webhook.ts: signature
 * against the business's active secrets, JSON, topic, schema), a send request through the
 * sender's (src/sender/requests.ts prepareJob: JSON, schema, business) plus its expiry rule.
 * Pure: no Kafka.
 */

export type DlqRole = 'webhooks' | 'send-requests';

/** A dead letter as the commands show it. */
export interface DeadLetter {
  topic: string;
  partition: number;
  offset: string;
  timestamp: number;
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, string>;
  role: DlqRole | undefined;
  business: string | undefined;
  /** The reason's code: `error-code`, else derived from `error-reason` (records of 0.1.0). */
  code: string;
  reason: string;
}

export interface Filters {
  code?: string | undefined;
  business?: string | undefined;
  /** ms since the epoch, inclusive. */
  since?: number | undefined;
  /** ms since the epoch, inclusive. */
  until?: number | undefined;
}

/** The DLQ topics of the configuration, by role. */
export function configuredDlqs(config: Config): Map<string, DlqRole> {
  return new Map<string, DlqRole>([
    [config.kafka.topics.webhooksDlq, 'webhooks'],
    [config.kafka.topics.sendRequestsDlq, 'send-requests'],
  ]);
}

/** The role by the record's `schema` header, else by the topic it is on (undefined: neither says). */
export function roleOf(
  topic: string,
  headers: Record<string, string>,
  dlqs: Map<string, DlqRole>,
): DlqRole | undefined {
  if (headers[HEADER.schema] === SCHEMA_ID.webhooksDlq) return 'webhooks';
  if (headers[HEADER.schema] === SCHEMA_ID.sendRequestsDlq) return 'send-requests';
  return dlqs.get(topic);
}

export function deadLetterOf(record: ConsumedRecord, dlqs: Map<string, DlqRole>): DeadLetter {
  const headers = headersToStrings(record.headers);
  const role = roleOf(record.topic, headers, dlqs);
  const reason = headers[HEADER.errorReason] ?? '';
  const business =
    headers[HEADER.businessId] ?? (role === 'webhooks' && record.key ? record.key.toString() : undefined);
  return {
    topic: record.topic,
    partition: record.partition,
    offset: record.offset,
    timestamp: Number(record.timestamp),
    key: record.key,
    value: record.value,
    headers,
    role,
    business,
    code: headers[DLQ_HEADER.errorCode] ?? codeFromReason(role, reason),
    reason,
  };
}

const WEBHOOK_CODES = new Set(['not-json', 'schema', 'topic-mismatch', 'topic-undetectable']);

/**
 * The code of a record that carries none: the webhook dead letters' reason starts with its
 * category; the sender's reasons of 0.1.0 (before `error-code`) map as its prepareJob decides.
 */
export function codeFromReason(role: DlqRole | undefined, reason: string): string {
  if (role === 'webhooks') {
    const category = reason.split(':')[0]!.trim();
    return WEBHOOK_CODES.has(category) ? category : 'unknown';
  }
  if (role === 'send-requests') return sendRequestCode(reason) ?? 'unknown';
  return 'unknown';
}

/** The code of a sender dead letter written before the `error-code` header, from its reason's wording. */
function sendRequestCode(reason: string): DlqCode | undefined {
  if (reason.startsWith('not valid JSON')) return 'RELAY_INVALID_JSON';
  if (reason.startsWith('unknown business')) return 'RELAY_UNKNOWN_BUSINESS';
  if (reason.startsWith('businessId is missing')) return 'RELAY_AMBIGUOUS_BUSINESS';
  const field = /^not a valid send request: ([^.:;]*)/.exec(reason)?.[1];
  if (field === undefined) return undefined;
  if (field === 'type') return 'RELAY_UNKNOWN_TYPE';
  if (field === 'expiresAt' || field === 'ttlMs') return 'RELAY_INVALID_EXPIRY';
  if (field === '(root)') return 'RELAY_INVALID_REQUEST';
  return 'RELAY_INVALID_FIELD';
}

export function matches(letter: DeadLetter, filters: Filters): boolean {
  if (filters.code !== undefined && letter.code !== filters.code) return false;
  if (filters.business !== undefined && letter.business !== filters.business) return false;
  if (filters.since !== undefined && letter.timestamp < filters.since) return false;
  if (filters.until !== undefined && letter.timestamp > filters.until) return false;
  return true;
}

/** A short, single-line excerpt of the value. */
export function excerpt(value: Buffer | null, max = 80): string {
  if (value === null || value.length === 0) return '(empty)';
  const text = value.subarray(0, max * 4).toString('utf8');
  const flat = text.replace(/\s+/g, ' ');
  return flat.length > max || value.length > max * 4 ? `${flat.slice(0, max - 1)}…` : flat;
}

// ---- the re-check ----

export interface RecheckContext {
  webhooks: WebhookHandler;
  /** Webhook topic → the Kafka topic the ingress writes it to now. */
  webhookTopics: Record<WebhookTopic, string>;
  /** Businesses the sender would send for (business id → API key). */
  senderBusinesses: ReadonlyMap<string, string>;
  sendRequestsTopic: string;
  /** The configured send-requests DLQ: its dead letters go back to where the sender reads now. */
  sendRequestsDlqTopic: string;
  maxRequestAgeMs: number;
  now(): number;
}

export function recheckContext(config: Config, now: () => number = Date.now): RecheckContext {
  const senderBusinesses = new Map<string, string>();
  for (const b of config.businesses) if (b.apiKey) senderBusinesses.set(b.id, b.apiKey);
  return {
    webhooks: createWebhookHandler(rulesFromConfig(config)),
    webhookTopics: { messages: config.kafka.topics.messages, delivery_status: config.kafka.topics.deliveryStatus },
    senderBusinesses,
    sendRequestsTopic: config.kafka.topics.sendRequests,
    sendRequestsDlqTopic: config.kafka.topics.sendRequestsDlq,
    maxRequestAgeMs: config.sender.maxRequestAgeMs,
    now,
  };
}

export interface Redrivable {
  kind: 'redrive';
  topic: string;
  key: Buffer | string | null;
  value: Buffer;
  headers: Record<string, string>;
  /** How something the record lacked was derived (records of an earlier release). */
  derived?: string;
}

export interface StillFailing {
  kind: 'fails';
  code: string;
  reason: string;
}

export type Recheck = Redrivable | StillFailing;

const fails = (code: string, reason: string): StillFailing => ({ kind: 'fails', code, reason });

/** What a redrive would do with the dead letter now: the record to produce, or why it would fail again. */
export function recheck(letter: DeadLetter, context: RecheckContext): Recheck {
  if (letter.role === 'webhooks') return recheckWebhook(letter, context);
  if (letter.role === 'send-requests') return recheckSendRequest(letter, context);
  return fails(
    'NOT_A_DEAD_LETTER',
    `the record has no schema header of a dead letter (${SCHEMA_ID.webhooksDlq} or ${SCHEMA_ID.sendRequestsDlq}) and its topic is not a configured DLQ`,
  );
}

const REJECTED: Record<RejectReason, string> = {
  'unknown-topic': 'the recorded webhook topic is not messages or delivery_status',
  'empty-business': 'the record names no business',
  'unsupported-encoding': 'the body has a content-encoding the ingress refuses',
  'body-too-large': 'the body is larger than ingress.maxBodyBytes',
  'unknown-business': 'the business is not configured: the ingress would answer 403',
  'no-signing-secret': 'the business has no signing secret configured: the ingress would answer 403',
  'missing-signature': 'the record carries no signature header: the ingress would answer 403',
  'bad-signature':
    "the signature does not verify against any of the business's active signing secrets (rotated since?): the ingress would answer 403",
};

function recheckWebhook(letter: DeadLetter, context: RecheckContext): Recheck {
  const h = letter.headers;
  const businessId = h[HEADER.businessId] ?? letter.key?.toString();
  if (businessId === undefined || businessId === '') return fails('empty-business', REJECTED['empty-business']);
  const body = letter.value ?? Buffer.alloc(0);
  const recorded = h[DLQ_HEADER.webhookTopic];
  // The address's topic as the ingress saw it: `webhook-topic` records it (0.1.0 and after).
  const pathTopic = isWebhookTopic(recorded) ? recorded : undefined;
  const receivedAt = Number(h[HEADER.receivedAt]);
  const decision = context.webhooks.handle({
    businessId,
    pathTopic,
    body,
    signature: h[SIGNATURE_HEADER],
    contentType: h[HEADER.contentType],
    traceparent: h[HEADER.traceparent],
    receivedAt: Number.isFinite(receivedAt) && receivedAt > 0 ? receivedAt : letter.timestamp,
  });
  if (decision.kind === 'reject') return fails(decision.reason, REJECTED[decision.reason]);
  if (decision.destination === 'dlq') {
    const code = decision.deadLetter?.reason ?? 'unknown';
    const detail = decision.deadLetter?.detail ?? 'the ingress would dead-letter it again';
    return fails(code, detail.startsWith(`${code}: `) ? detail.slice(code.length + 2) : detail);
  }
  const target = decision.record.topic;
  const original = h[DLQ_HEADER.originalTopic];
  if (original !== undefined && original !== target) {
    return fails(
      'topic-changed',
      `it was meant for topic ${original}, but the ingress now writes ${decision.webhookTopic} events to ${target}: redrive it by hand if that is right`,
    );
  }
  const derived =
    original === undefined
      ? `target topic derived from ${pathTopic !== undefined ? 'webhook-topic' : 'the body'} (a record without original-topic)`
      : undefined;
  return {
    kind: 'redrive',
    topic: target,
    key: decision.record.key,
    value: body,
    headers: { ...decision.record.headers },
    ...(derived ? { derived } : {}),
  };
}

/** Headers the sender set on the dead letter: not the request's, so not carried back. */
const SENDER_DLQ_HEADERS = new Set<string>([
  HEADER.businessId,
  HEADER.receivedAt,
  HEADER.contentType,
  HEADER.schema,
  HEADER.errorReason,
  DLQ_HEADER.errorCode,
  DLQ_HEADER.sourceTopic,
  DLQ_HEADER.sourcePartition,
  DLQ_HEADER.sourceOffset,
  DLQ_HEADER.dlqValue,
]);

function recheckSendRequest(letter: DeadLetter, context: RecheckContext): Recheck {
  const h = letter.headers;
  if (h[DLQ_HEADER.dlqValue] === 'reference') {
    // The command replaces a reference by its source record first (withSource); unresolved here.
    return fails(
      REDRIVE_REFUSAL_CODE.reference,
      `the dead letter holds a reference, not the request (too large for the DLQ topic): the original is ${h[DLQ_HEADER.sourceTopic] ?? '?'}/${h[DLQ_HEADER.sourcePartition] ?? '?'}/${h[DLQ_HEADER.sourceOffset] ?? '?'}, while retention keeps it`,
    );
  }
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(h)) if (!SENDER_DLQ_HEADERS.has(name)) headers[name] = value;
  // A dead letter of the configured DLQ goes back where the sender reads now; one taken from
  // another topic (renamed since) is refused rather than sent where nobody reads (the webhooks'
  // rule, topic-changed). Another DLQ (--allow-any-topic) goes back to its recorded topic.
  const source = h[DLQ_HEADER.sourceTopic];
  const configured = letter.topic === context.sendRequestsDlqTopic;
  const target = configured ? context.sendRequestsTopic : (source ?? context.sendRequestsTopic);
  if (configured && source !== undefined && source !== target) {
    return fails(
      'topic-changed',
      `it was taken from topic ${source}, but the sender now reads ${target}: redrive it by hand if that is right`,
    );
  }
  const now = context.now();
  const job = prepareJob(
    {
      topic: target,
      partition: letter.partition,
      offset: letter.offset,
      key: letter.key,
      value: letter.value,
      headers: headers as RecordHeaders,
    },
    context.senderBusinesses,
    // The request's time is the dead letter's (the sender wrote it as it took the request): ttlMs,
    // expiresAt and sender.maxRequestAgeMs count as they would have.
    { receivedAt: now, producedAt: letter.timestamp, maxRequestAgeMs: context.maxRequestAgeMs },
  );
  if (job.kind === 'dlq') return fails(job.code, job.reason);
  if (job.expiry.at <= now) {
    return fails(
      REDRIVE_REFUSAL_CODE.expired,
      `it expired at ${new Date(job.expiry.at).toISOString()} (${job.expiry.by}): the sender would answer expired and not send it`,
    );
  }
  let key: Buffer | string | null = letter.key;
  let derived: string | undefined;
  if (key === null) {
    key = job.recipient;
    derived = 'key derived: the recipient (the dead letter had none)';
  }
  return {
    kind: 'redrive',
    topic: target,
    key,
    value: letter.value ?? Buffer.alloc(0),
    headers,
    ...(derived ? { derived } : {}),
  };
}

/** A send-request dead letter whose value is a reference to its source record (it was too large for the DLQ topic). */
export function isReference(letter: DeadLetter): boolean {
  return letter.role === 'send-requests' && letter.headers[DLQ_HEADER.dlqValue] === 'reference';
}

/** Where the source record of a reference is: topic, partition, offset (undefined when the headers do not say). */
export function referenceSource(letter: DeadLetter): { topic: string; partition: number; offset: number } | undefined {
  const topic = letter.headers[DLQ_HEADER.sourceTopic];
  const partition = Number(letter.headers[DLQ_HEADER.sourcePartition]);
  const offset = Number(letter.headers[DLQ_HEADER.sourceOffset]);
  if (!topic || !Number.isInteger(partition) || partition < 0 || !Number.isSafeInteger(offset) || offset < 0)
    return undefined;
  return { topic, partition, offset };
}

/**
 * The dead letter with the request itself in place of the reference: the source record's key,
 * bytes and headers (the request's own), with the dead letter's `event-id` and source; or why it
 * cannot be (the source record is gone: retention).
 */
export function withSource(letter: DeadLetter, source: ConsumedRecord | undefined): DeadLetter | StillFailing {
  const where = `${letter.headers[DLQ_HEADER.sourceTopic] ?? '?'}/${letter.headers[DLQ_HEADER.sourcePartition] ?? '?'}/${letter.headers[DLQ_HEADER.sourceOffset] ?? '?'}`;
  if (source === undefined || source.value === null) {
    return fails(
      REDRIVE_REFUSAL_CODE.reference,
      `the dead letter holds a reference (the request was too large for the DLQ topic) and the source record ${where} is no longer in its topic (retention): nothing to redrive`,
    );
  }
  const headers: Record<string, string> = { ...headersToStrings(source.headers) };
  for (const name of [HEADER.eventId, DLQ_HEADER.sourceTopic, DLQ_HEADER.sourcePartition, DLQ_HEADER.sourceOffset]) {
    const value = letter.headers[name];
    if (value !== undefined) headers[name] = value;
  }
  return { ...letter, key: source.key ?? letter.key, value: source.value, headers };
}

/** The headers a redriven record adds (docs/topics.md, "Headers"): where it came from, and when. */
export function redriveHeaders(
  letter: Pick<DeadLetter, 'topic' | 'partition' | 'offset'>,
  at: number,
): Record<string, string> {
  return {
    [DLQ_HEADER.redrivenFrom]: `${letter.topic}/${letter.partition}/${letter.offset}`,
    [DLQ_HEADER.redrivenAt]: String(at),
  };
}
