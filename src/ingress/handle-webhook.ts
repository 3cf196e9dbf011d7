import { randomBytes } from 'node:crypto';
import { type ErrorCode, errorMessage } from '../platform/errors.js';
import { DLQ_HEADER, eventIdOf, HEADER, SCHEMA_ID } from '../contracts/headers.js';
import {
  detectWebhookTopic,
  webhookEventSchemas,
  WEBHOOK_TOPICS,
  type WebhookTopic,
} from '../contracts/webhook-events.js';
import { verifySignature } from '../contracts/signature.js';
import { canonicalCustomerId } from '../contracts/customer-id.js';

/**
 * The ingress decision, free of any HTTP server or Kafka client: given the business and topic
 * of the address, the raw bytes and a few headers, what to answer and what to publish.
 *
 * Order of work (docs/design.md, "Delivery semantics"): size limit → signature over the raw bytes → JSON parse →
 * schema check. Nothing is parsed before the signature verifies, and nothing unsigned is ever
 * turned into a record. An authentic body that cannot be used (not JSON, wrong shape, topic
 * mismatch) becomes a dead-letter record: it is authentic, so it is kept, and retrying it
 * would never succeed.
 */

export interface IngressRules {
  /** Every active signing secret per business id (several during a rotation). */
  businesses: ReadonlyMap<string, readonly string[]>;
  topics: { messages: string; deliveryStatus: string; webhooksDlq: string };
  maxBodyBytes: number;
}

/** What the HTTP adapter knows before the body arrives. */
export interface WebhookPreamble {
  businessId: string;
  /** The `{topic}` path segment; undefined for the per-business address. */
  pathTopic: string | undefined;
  /** The content-length header as sent ('' or undefined when absent). */
  contentLength: string | undefined;
  contentEncoding: string | undefined;
}

export interface WebhookRequest {
  businessId: string;
  pathTopic: string | undefined;
  body: Buffer;
  signature: string | undefined;
  contentType: string | undefined;
  contentEncoding?: string | undefined;
  traceparent: string | undefined;
  /** Milliseconds since the epoch, taken when the request arrived. */
  receivedAt: number;
}

export interface RecordDraft {
  topic: string;
  key: string;
  value: Buffer;
  headers: Record<string, string>;
}

export type RejectReason =
  | 'unknown-topic'
  | 'empty-business'
  | 'unsupported-encoding'
  | 'body-too-large'
  | 'unknown-business'
  | 'no-signing-secret'
  | 'missing-signature'
  | 'bad-signature';

export interface Rejection {
  kind: 'reject';
  code: ErrorCode;
  reason: RejectReason;
  /** Said to the caller; deliberately the same for every signature failure. */
  message: string;
}

export type DeadLetterReason = 'not-json' | 'schema' | 'topic-mismatch' | 'topic-undetectable';

export interface Publication {
  kind: 'publish';
  destination: 'event' | 'dlq';
  /** The webhook topic of the event (for a dead letter: the one the address or body named, if any). */
  webhookTopic: WebhookTopic | undefined;
  eventId: string;
  record: RecordDraft;
  /** Dead letters only: a category, and the full text that goes into the `error-reason` header. */
  deadLetter?: { reason: DeadLetterReason; detail: string };
}

export type WebhookDecision = Rejection | Publication;

/** Secrets no request can know: they pad every verification to the same number of HMACs. */
const decoySecret = () => randomBytes(32).toString('base64');
const SIGNATURE_FAILED = 'signature verification failed';
const MAX_REASON_CHARS = 400;
/** W3C trace context: version-traceid-parentid-flags, future versions may append fields. */
const TRACEPARENT = /^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[\x21-\x7e]{1,200})?$/;

function reject(code: ErrorCode, reason: RejectReason, message: string): Rejection {
  return { kind: 'reject', code, reason, message };
}

export function isWebhookTopic(value: string | undefined): value is WebhookTopic {
  return value !== undefined && (WEBHOOK_TOPICS as readonly string[]).includes(value);
}

function isIdentityEncoding(value: string | undefined): boolean {
  if (value === undefined) return true;
  const v = value.trim().toLowerCase();
  return v === '' || v === 'identity';
}

export interface WebhookHandler {
  /** Decisions that need no body: unknown topic (404), encoding (415), declared size (413). */
  precheck(preamble: WebhookPreamble): Rejection | undefined;
  /** The decision on a complete body. Pure apart from hashing. */
  handle(request: WebhookRequest): WebhookDecision;
  readonly maxBodyBytes: number;
}

export function createWebhookHandler(rules: IngressRules): WebhookHandler {
  // Every verification costs as many HMACs as the business with the most active secrets: a
  // business with fewer is padded with decoys, an unknown id (or one with no secret) is checked
  // against decoys only. Answer times then tell neither which ids exist nor who is rotating.
  const hmacs = Math.max(1, ...[...rules.businesses.values()].map((secrets) => secrets.length));
  const decoys = Array.from({ length: hmacs }, decoySecret);
  const padded = new Map(
    [...rules.businesses].map(([id, secrets]) => [id, [...secrets, ...decoys.slice(secrets.length)]]),
  );
  const kafkaTopicOf: Record<WebhookTopic, string> = {
    messages: rules.topics.messages,
    delivery_status: rules.topics.deliveryStatus,
  };

  const precheck = (p: WebhookPreamble): Rejection | undefined => {
    if (p.pathTopic !== undefined && !isWebhookTopic(p.pathTopic)) {
      return reject(
        'NOT_FOUND',
        'unknown-topic',
        'no such webhook address: the topic must be messages or delivery_status',
      );
    }
    if (p.businessId === '') return reject('NOT_FOUND', 'empty-business', 'no such webhook address');
    if (!isIdentityEncoding(p.contentEncoding)) {
      return reject('UNSUPPORTED_ENCODING', 'unsupported-encoding', 'content-encoding must be identity');
    }
    if (p.contentLength !== undefined && p.contentLength !== '') {
      const declared = Number(p.contentLength);
      if (!Number.isFinite(declared) || declared > rules.maxBodyBytes) {
        return reject('BODY_TOO_LARGE', 'body-too-large', `the body exceeds ${rules.maxBodyBytes} bytes`);
      }
    }
    return undefined;
  };

  const handle = (req: WebhookRequest): WebhookDecision => {
    const early = precheck({
      businessId: req.businessId,
      pathTopic: req.pathTopic,
      contentLength: undefined,
      contentEncoding: req.contentEncoding,
    });
    if (early) return early;
    if (req.body.length > rules.maxBodyBytes) {
      return reject('BODY_TOO_LARGE', 'body-too-large', `the body exceeds ${rules.maxBodyBytes} bytes`);
    }

    // Verification before anything looks at the bytes, at the same cost for every business id.
    const secrets = rules.businesses.get(req.businessId);
    const verified = verifySignature(padded.get(req.businessId) ?? decoys, req.body, req.signature);
    if (secrets === undefined) return reject('SIGNATURE_INVALID', 'unknown-business', SIGNATURE_FAILED);
    if (secrets.length === 0) return reject('SIGNATURE_INVALID', 'no-signing-secret', SIGNATURE_FAILED);
    if (req.signature === undefined || req.signature === '')
      return reject('SIGNATURE_INVALID', 'missing-signature', SIGNATURE_FAILED);
    if (!verified) return reject('SIGNATURE_INVALID', 'bad-signature', SIGNATURE_FAILED);

    // Authentic from here on: everything below ends in Kafka, as an event or a dead letter.
    const eventId = eventIdOf(req.body);
    const pathTopic = req.pathTopic as WebhookTopic | undefined;
    const common: Record<string, string> = {
      [HEADER.eventId]: eventId,
      [HEADER.businessId]: req.businessId,
      [HEADER.receivedAt]: String(req.receivedAt),
    };
    const deadLetter = (
      reason: DeadLetterReason,
      detail: string,
      webhookTopic: WebhookTopic | undefined,
    ): Publication => {
      const text = `${reason}: ${detail}`.slice(0, MAX_REASON_CHARS);
      const headers: Record<string, string> = {
        ...common,
        [HEADER.contentType]: req.contentType || 'application/octet-stream',
        [HEADER.schema]: SCHEMA_ID.webhooksDlq,
        [HEADER.signature]: req.signature!,
        [HEADER.errorReason]: text,
      };
      // What a redrive needs (msgbridge dlq redrive): the address's topic, and the Kafka topic the event was meant for.
      if (webhookTopic !== undefined) {
        headers[DLQ_HEADER.webhookTopic] = webhookTopic;
        headers[DLQ_HEADER.originalTopic] = kafkaTopicOf[webhookTopic];
      }
      addTraceparent(headers, req.traceparent);
      return {
        kind: 'publish',
        destination: 'dlq',
        webhookTopic,
        eventId,
        record: { topic: rules.topics.webhooksDlq, key: req.businessId, value: req.body, headers },
        deadLetter: { reason, detail: text },
      };
    };

    let json: unknown;
    try {
      json = JSON.parse(req.body.toString('utf8'));
    } catch (err) {
      return deadLetter('not-json', errorMessage(err), pathTopic);
    }
    const detected = detectWebhookTopic(json);
    if (pathTopic !== undefined && detected !== undefined && detected !== pathTopic) {
      return deadLetter(
        'topic-mismatch',
        `the address is for ${pathTopic} but the body is a ${detected} event`,
        pathTopic,
      );
    }
    const topic = pathTopic ?? detected;
    if (topic === undefined) {
      return deadLetter(
        'topic-undetectable',
        'the body has neither topic "delivery_status", a statusUpdate nor a message',
        undefined,
      );
    }
    const parsed = webhookEventSchemas[topic].safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const where = issue && issue.path.length > 0 ? issue.path.map(String).join('.') : '(root)';
      return deadLetter(
        'schema',
        `${where}: ${issue?.message ?? 'invalid'}${parsed.error.issues.length > 1 ? ` (+${parsed.error.issues.length - 1} more)` : ''}`,
        topic,
      );
    }
    const event = parsed.data as { statusUpdate?: { id: string }; sender: { id: string } };
    // An inbound message is keyed by its customer in the canonical form: a number with or without
    // its + is one conversation, kept in order on one partition (docs/topics.md).
    const key = topic === 'delivery_status' ? event.statusUpdate!.id : canonicalCustomerId(event.sender.id);
    const headers: Record<string, string> = {
      ...common,
      // The value is JSON that parsed and matched the schema, whatever label the provider sent.
      [HEADER.contentType]: 'application/json',
      [HEADER.schema]: SCHEMA_ID[topic],
      [HEADER.signature]: req.signature,
    };
    addTraceparent(headers, req.traceparent);
    return {
      kind: 'publish',
      destination: 'event',
      webhookTopic: topic,
      eventId,
      record: { topic: kafkaTopicOf[topic], key, value: req.body, headers },
    };
  };

  return { precheck, handle, maxBodyBytes: rules.maxBodyBytes };
}

function addTraceparent(headers: Record<string, string>, traceparent: string | undefined): void {
  if (traceparent !== undefined && TRACEPARENT.test(traceparent)) headers[HEADER.traceparent] = traceparent;
}

/**
 * A handler whose rules can be replaced while it serves (the live businesses file): the swap is
 * one assignment, so a request sees either the old rules or the new ones, never half of each.
 */
export function createLiveWebhookHandler(rules: IngressRules): WebhookHandler & { replace(rules: IngressRules): void } {
  let current = createWebhookHandler(rules);
  return {
    precheck: (preamble) => current.precheck(preamble),
    handle: (request) => current.handle(request),
    get maxBodyBytes() {
      return current.maxBodyBytes;
    },
    replace(next) {
      current = createWebhookHandler(next);
    },
  };
}

/** Rules from the configuration: every business with its active secrets. */
export function rulesFromConfig(config: {
  businesses: readonly { id: string; signingSecrets: readonly string[] }[];
  kafka: { topics: { messages: string; deliveryStatus: string; webhooksDlq: string } };
  ingress: { maxBodyBytes: number };
}): IngressRules {
  return {
    businesses: new Map(config.businesses.map((b) => [b.id, [...b.signingSecrets]])),
    topics: {
      messages: config.kafka.topics.messages,
      deliveryStatus: config.kafka.topics.deliveryStatus,
      webhooksDlq: config.kafka.topics.webhooksDlq,
    },
    maxBodyBytes: config.ingress.maxBodyBytes,
  };
}
