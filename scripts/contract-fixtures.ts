// Golden records: what this release writes on each topic, built by the project's own record
// builders from fixed inputs, under test/fixtures/contracts/<CURRENT_CONTRACT_VERSION>/.
//   npm run contract-fixtures              writes them
//   npm run contract-fixtures -- --check   exit 1 when the committed ones differ from what the code writes
// The records of released versions are never regenerated: they are what those releases wrote
// (test/fixtures/contracts/README.md). test/contracts/golden-records.test.ts holds every reader
// to every version's records.
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { signBody } from '../src/contracts/signature.js';
import { sendRequestSchema } from '../src/contracts/index.js';
import { createWebhookHandler, type WebhookDecision } from '../src/ingress/handle-webhook.js';
import { headersToStrings } from '../src/kafka/headers.js';
import type { ConsumedRecord } from '../src/kafka/group-consumer.js';
import { prepareJob, type IncomingRecord, type SendJob } from '../src/sender/requests.js';
import {
  acceptedResult,
  expiredResult,
  failureOf,
  rejectedResult,
  resultHeaders,
  storedResult,
  type StoredResult,
} from '../src/sender/result-records.js';
import { outsideWindowFailure } from '../src/sender/conversation-guard.js';
import type { AttemptOutcome } from '../src/sender/retry-policy.js';
import { TrackerLogic, type TaskStateStore } from '../src/tracker/tracker-logic.js';
import type { TrackedMessage } from '../src/contracts/message-state.js';
import type { ConversationWindow } from '../src/contracts/conversation-window.js';
import type { RequestOutcome } from '../src/contracts/request-outcome.js';
import type { InboundMessageRecord } from '../src/contracts/inbound-message.js';
import type { OutputRecord } from '../src/kafka/transactional-engine.js';
import { loadConfig } from '../src/config/load.js';
import { trackerTopics } from '../src/tracker/tracker-topics.js';

/** The version whose records the code writes now (the next release; package.json names the last one). */
export const CURRENT_CONTRACT_VERSION = '0.2.0';

export const FIXTURES_DIR = join(import.meta.dirname, '..', 'test', 'fixtures', 'contracts');

/** Every topic the relay reads or writes, by its default name (kafka.topics.*): one file each. */
export const CONTRACT_TOPICS = [
  'messages',
  'delivery_status',
  'webhooks-dlq',
  'send-requests',
  'send-results',
  'send-requests-dlq',
  'message-state',
  'conversations',
  'request-outcomes',
  'inbound-messages',
] as const;
export type ContractTopic = (typeof CONTRACT_TOPICS)[number];

/** One record as a consumer reads it: the key, the headers as strings, the value's exact text. */
export interface GoldenRecord {
  /** What the record is (not part of the record). */
  note: string;
  key: string | null;
  headers: Record<string, string>;
  /** The value bytes as UTF-8 text, exactly as written (JSON is not re-serialised). */
  value: string;
}

export interface GoldenFile {
  topic: ContractTopic;
  version: string;
  records: GoldenRecord[];
}

// ---- The inputs: the same for every version's generator (a version leaves out what it could not write) ----

export const GOLDEN_BUSINESS = 'biz_1';
/** The business's signing secret: the golden webhook records' signatures verify with it. */
export const GOLDEN_SIGNING_SECRET = 'golden-records-signing-secret';
/** When the relay received the inputs (ms since the epoch). */
export const RECEIVED_AT = Date.parse('2026-11-20T10:00:00.000Z');
const seconds = (iso: string) => String(Date.parse(iso) / 1000);
const TRACEPARENT = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const PROVIDER_CONTENT_TYPE = 'text/plain; charset=utf-8';

/** Message ids the provider created (26-character sortable ids, as the provider's). */
export const MESSAGE_IDS = {
  confirmation: '01JD0G7Q3V4M8X2K5N9P1R6T01',
  template: '01JD0G7Q3V4M8X2K5N9P1R6T02',
  notThroughRelay: '01JD0G7Q3V4M8X2K5N9P1R6T03',
  fallback: '01JD0G7Q3V4M8X2K5N9P1R6T04',
  afterLostAnswer: '01JD0G7Q3V4M8X2K5N9P1R6T05',
  sms: '01JD0G7Q3V4M8X2K5N9P1R6T06',
} as const;

const business = { channelType: 'whatsapp', id: '+15550001111' };
const customer = { channelType: 'whatsapp', id: '+15550002222' };

export interface WebhookInput {
  note: string;
  /** The `{topic}` segment of the address; undefined for `/webhooks/{businessId}`. */
  pathTopic: 'messages' | 'delivery_status' | undefined;
  body: string;
  traceparent?: string;
  /** First version that could write it (absent: every version). */
  since?: string;
}

const providerError = {
  message: 'Template input invalid',
  type: 'ERROR_TYPE_INVALID_REQUEST',
  code: 'ERROR_CODE_MESSAGE_TEMPLATE_INPUT_INVALID',
  userTitle: 'Invalid template input',
  userMessage: 'The template parameters do not match the template.',
  cntTraceId: '7f3c2a1e9b',
  details: {},
};

const status = (id: string, s: string, at: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({
    topic: 'delivery_status',
    timestamp: seconds(at),
    sender: business,
    recipient: customer,
    statusUpdate: { id, status: s, error: s === 'delivery_failed' ? providerError : null },
    ...extra,
  });

/** Webhook bodies as the provider sends them (as its API documentation gives them), good and bad. */
export const WEBHOOK_INPUTS: WebhookInput[] = [
  {
    note: 'sent, with a traceparent',
    pathTopic: 'delivery_status',
    body: status(MESSAGE_IDS.confirmation, 'sent', '2026-11-20T10:00:02Z'),
    traceparent: TRACEPARENT,
  },
  {
    note: 'delivered, the recipient in the opaque numeric form',
    pathTopic: 'delivery_status',
    body: JSON.stringify({
      topic: 'delivery_status',
      timestamp: seconds('2026-11-20T10:00:05Z'),
      sender: business,
      recipient: { channelType: 'whatsapp', id: '15550002222' },
      statusUpdate: { id: MESSAGE_IDS.confirmation, status: 'delivered', error: null },
    }),
  },
  {
    note: 'read',
    pathTopic: 'delivery_status',
    body: status(MESSAGE_IDS.confirmation, 'read', '2026-11-20T10:03:00Z'),
  },
  {
    note: 'delivery_failed with the provider error object',
    pathTopic: 'delivery_status',
    body: status(MESSAGE_IDS.template, 'delivery_failed', '2026-11-20T10:00:09Z'),
  },
  {
    note: 'delivered, a message not sent through the relay, with metadata, to the per-business address',
    pathTopic: undefined,
    body: status(MESSAGE_IDS.notThroughRelay, 'delivered', '2026-11-20T10:01:00Z', {
      metadata: { campaign: 'winter' },
    }),
  },
  {
    note: 'sent, the message of a fallback template',
    pathTopic: 'delivery_status',
    body: status(MESSAGE_IDS.fallback, 'sent', '2026-11-20T10:00:30Z'),
  },
  {
    note: 'inbound text (no topic field, as the provider sends it)',
    pathTopic: 'messages',
    body: JSON.stringify({
      timestamp: seconds('2026-11-20T09:58:00Z'),
      sender: customer,
      recipient: business,
      message: { text: 'Hi! Where is my order?' },
    }),
  },
  {
    note: 'inbound button response, with topic and a named sender, to the per-business address',
    pathTopic: undefined,
    body: JSON.stringify({
      topic: 'messages',
      timestamp: seconds('2026-11-20T10:05:00Z'),
      sender: { ...customer, name: 'Ada' },
      recipient: business,
      message: { text: 'Yes', button: { payload: 'confirm-order-42' } },
    }),
  },
  {
    note: 'inbound button reply as the simulator sends it: isButtonResponse, the payload in callbackData, the sender without +',
    pathTopic: 'messages',
    body: JSON.stringify({
      timestamp: seconds('2026-11-20T10:05:30Z'),
      sender: { channelType: 'whatsapp', id: '15550002222' },
      recipient: business,
      message: { text: 'Track my order' },
      isButtonResponse: true,
      callbackData: 'track-order-42',
    }),
    since: '0.2.0',
  },
  {
    note: 'inbound attachment without text, the sender in the opaque numeric form',
    pathTopic: 'messages',
    body: JSON.stringify({
      timestamp: seconds('2026-11-20T10:06:00Z'),
      sender: { channelType: 'whatsapp', id: '15550003333', name: null },
      recipient: business,
      message: { attachment: { type: 'image', url: 'https://cdn.example/p/1.jpg' } },
      callbackData: 'cb-1',
    }),
  },
  {
    note: 'dead letter: not JSON (cut short)',
    pathTopic: 'delivery_status',
    body: '{"topic":"delivery_status","timestamp":',
  },
  {
    note: 'dead letter: delivery_failed without its error object',
    pathTopic: 'delivery_status',
    body: JSON.stringify({
      topic: 'delivery_status',
      timestamp: seconds('2026-11-20T10:00:10Z'),
      sender: business,
      recipient: customer,
      statusUpdate: { id: MESSAGE_IDS.template, status: 'delivery_failed', error: null },
    }),
  },
  {
    note: 'dead letter: a status posted to the messages address',
    pathTopic: 'messages',
    body: status(MESSAGE_IDS.confirmation, 'read', '2026-11-20T10:03:00Z'),
  },
  {
    note: 'dead letter: neither a status nor a message, to the per-business address',
    pathTopic: undefined,
    body: JSON.stringify({ hello: 'world' }),
  },
];

export interface RequestInput {
  note: string;
  /** The record's key (producers key by the recipient). */
  key: string;
  value: Record<string, unknown>;
  headers: Record<string, string>;
  outcome: OutcomeInput;
  since?: string;
}

export type OutcomeInput =
  | { kind: 'accepted'; messageId: string; attempts: number; maybeSent: boolean; sentAs?: 'template' }
  | { kind: 'rejected'; attempt: AttemptOutcome; retriable: boolean; attempts: number; maybeSent: boolean }
  | { kind: 'outside-window'; openUntil: number | null }
  | { kind: 'expired'; attempts: number; maybeSent: boolean };

/** What `msgbridge send` produces: the parsed request (defaults filled), content-type, schema and traceparent. */
const cliHeaders = { 'content-type': 'application/json', schema: 'send-request/v1', traceparent: TRACEPARENT };

/** Send requests as producers write them, each with the outcome the provider gave it. */
export const REQUEST_INPUTS: RequestInput[] = [
  {
    note: 'text, as msgbridge send writes it',
    key: '+15550002222',
    value: sendRequestSchema.parse({
      requestId: 'order-42-confirmation',
      businessId: GOLDEN_BUSINESS,
      type: 'text',
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      message: { text: 'Your order shipped' },
    }),
    headers: cliHeaders,
    outcome: { kind: 'accepted', messageId: MESSAGE_IDS.confirmation, attempts: 1, maybeSent: false },
  },
  {
    note: 'template without businessId (one business configured), with a correlation header',
    key: '+15550002222',
    value: {
      requestId: 'order-42-template',
      type: 'template',
      number: '+15550002222',
      templateName: 'order_update',
      parameters: [{ name: 'order', value: '42' }],
    },
    headers: { 'correlation-id': 'order-42' },
    outcome: { kind: 'accepted', messageId: MESSAGE_IDS.template, attempts: 3, maybeSent: false },
  },
  {
    note: 'text with fields that pass through to the provider; the provider refuses it',
    key: '+15550004444',
    value: {
      requestId: 'order-43-note',
      businessId: GOLDEN_BUSINESS,
      type: 'text',
      recipient: { channelType: 'whatsapp', id: '+15550004444' },
      message: { text: 'A note about your order', previewUrl: false },
      callbackData: 'order-43',
      campaignName: 'orders',
    },
    headers: { 'content-type': 'application/json' },
    outcome: {
      kind: 'rejected',
      attempt: {
        kind: 'http-error',
        status: 400,
        error: {
          ...providerError,
          message: 'Recipient is not on WhatsApp',
          code: 'ERROR_CODE_RECIPIENT_NOT_ON_CHANNEL',
        },
      },
      retriable: false,
      attempts: 1,
      maybeSent: false,
    },
  },
  {
    note: 'text whose attempts timed out until the retry budget ran out',
    key: '+15550005555',
    value: {
      requestId: 'order-44-reminder',
      businessId: GOLDEN_BUSINESS,
      type: 'text',
      recipient: { channelType: 'whatsapp', id: '+15550005555' },
      message: { text: 'Reminder' },
    },
    headers: { traceparent: TRACEPARENT },
    outcome: {
      kind: 'rejected',
      attempt: { kind: 'timeout', message: 'the provider did not answer within 10000 ms', requestWritten: true },
      retriable: true,
      attempts: 6,
      maybeSent: true,
    },
  },
  {
    note: 'template accepted on a second attempt after a lost answer',
    key: '+15550002222',
    value: {
      requestId: 'order-45-receipt',
      businessId: GOLDEN_BUSINESS,
      type: 'template',
      number: '+15550002222',
      templateName: 'receipt',
      parameters: [],
      language: 'en',
    },
    headers: {},
    outcome: { kind: 'accepted', messageId: MESSAGE_IDS.afterLostAnswer, attempts: 2, maybeSent: true },
  },
  {
    note: 'text with a fallback template and expiresAt; the window was closed, the template went out',
    key: '+15550002222',
    value: {
      requestId: 'order-46-update',
      businessId: GOLDEN_BUSINESS,
      type: 'text',
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      message: { text: 'Your order is on its way' },
      expiresAt: '2026-11-20T12:00:00Z',
      fallbackTemplate: { templateName: 'order_update', parameters: [{ name: 'order', value: '46' }] },
    },
    headers: cliHeaders,
    outcome: { kind: 'accepted', messageId: MESSAGE_IDS.fallback, attempts: 1, maybeSent: false, sentAs: 'template' },
    since: '0.2.0',
  },
  {
    note: 'SMS text: no conversation window; the provider answers an id and sends no status for it',
    key: '+15550008888',
    value: sendRequestSchema.parse({
      requestId: 'otp-8',
      businessId: GOLDEN_BUSINESS,
      type: 'text',
      recipient: { channelType: 'sms', id: '+15550008888' },
      message: { text: 'Your code is 123456' },
    }),
    headers: cliHeaders,
    outcome: { kind: 'accepted', messageId: MESSAGE_IDS.sms, attempts: 1, maybeSent: false },
    since: '0.2.0',
  },
  {
    note: 'template with ttlMs, expired before it could be sent',
    key: '+15550006666',
    value: {
      requestId: 'promo-7',
      businessId: GOLDEN_BUSINESS,
      type: 'template',
      number: '+15550006666',
      templateName: 'promo',
      parameters: [],
      ttlMs: 60000,
    },
    headers: {},
    outcome: { kind: 'expired', attempts: 2, maybeSent: false },
    since: '0.2.0',
  },
  {
    note: 'text refused without a call: the conversation window is closed',
    key: '+15550007777',
    value: {
      requestId: 'chat-9',
      businessId: GOLDEN_BUSINESS,
      type: 'text',
      recipient: { channelType: 'whatsapp', id: '+15550007777' },
      message: { text: 'Are you there?' },
    },
    headers: {},
    outcome: { kind: 'outside-window', openUntil: Date.parse('2026-11-19T08:00:00.000Z') },
    since: '0.2.0',
  },
  {
    note: 'text that ignores the conversation window',
    key: '+15550007777',
    value: {
      requestId: 'chat-10',
      businessId: GOLDEN_BUSINESS,
      type: 'text',
      recipient: { channelType: 'whatsapp', id: '+15550007777' },
      message: { text: 'Are you there?' },
      conversationWindow: 'ignore',
    },
    headers: {},
    outcome: {
      kind: 'rejected',
      attempt: {
        kind: 'http-error',
        status: 400,
        error: {
          message: 'Outside the 24-hour window',
          type: 'ERROR_TYPE_INVALID_REQUEST',
          code: 'ERROR_CODE_CONVERSATION_NOT_INITIATED',
        },
      },
      retriable: false,
      attempts: 1,
      maybeSent: false,
    },
    since: '0.2.0',
  },
];

export interface InvalidRequestInput {
  note: string;
  key: string | null;
  value: string;
  headers: Record<string, string>;
  since?: string;
}

/** Records on send-requests that can never be sent (they go to send-requests-dlq). */
export const INVALID_REQUEST_INPUTS: InvalidRequestInput[] = [
  // Cut where V8 says "Unexpected end of JSON input" in every Node version (the reason is in the records).
  {
    note: 'not JSON (cut short), its requestId readable',
    key: '+15550002222',
    value: '{"requestId":"order-47","type":',
    headers: { traceparent: TRACEPARENT },
  },
  {
    note: 'a field is invalid (recipient id)',
    key: 'someone',
    value: JSON.stringify({
      requestId: 'order-48',
      businessId: GOLDEN_BUSINESS,
      type: 'text',
      recipient: { channelType: 'whatsapp', id: 'someone' },
      message: { text: 'Hi' },
    }),
    headers: { 'correlation-id': 'order-48' },
  },
  {
    note: 'an unknown type, no businessId',
    key: '+15550002222',
    value: JSON.stringify({ requestId: 'order-49', type: 'sms', to: '+15550002222', text: 'Hi' }),
    headers: {},
  },
  {
    note: 'an unknown business',
    key: '+15550002222',
    value: JSON.stringify({
      requestId: 'order-50',
      businessId: 'biz_9',
      type: 'template',
      number: '+15550002222',
      templateName: 'order_update',
    }),
    headers: {},
  },
];

// ---- The current version's records, by the code's own builders ----

const BUSINESSES = new Map([[GOLDEN_BUSINESS, 'golden-api-key']]);
const REQUEST_TOPIC = 'send-requests';
/** When the request records were produced (their Kafka timestamp). */
const PRODUCED_AT = RECEIVED_AT - 1000;
const MAX_REQUEST_AGE_MS = 24 * 3600 * 1000;

export const inVersion = (since: string | undefined, version: string) =>
  since === undefined || compareVersions(since, version) <= 0;

/** Orders `x.y.z` versions. */
export function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) - (pb[i] ?? 0);
  return 0;
}

const text = (value: Buffer | string) => {
  const s = value.toString();
  if (!Buffer.from(s, 'utf8').equals(Buffer.from(value))) throw new Error('a golden value must be UTF-8 text');
  return s;
};

const golden = (
  note: string,
  record: { key: string | Buffer | null; value: Buffer | string; headers: Record<string, string | Buffer> },
): GoldenRecord => ({
  note,
  key: record.key === null ? null : record.key.toString(),
  headers: headersToStrings(record.headers),
  value: text(record.value),
});

function ingressRecords(): Record<'messages' | 'delivery_status' | 'webhooks-dlq', GoldenRecord[]> {
  const handler = createWebhookHandler({
    businesses: new Map([[GOLDEN_BUSINESS, [GOLDEN_SIGNING_SECRET]]]),
    topics: { messages: 'messages', deliveryStatus: 'delivery_status', webhooksDlq: 'webhooks-dlq' },
    maxBodyBytes: 1024 * 1024,
  });
  const out = {
    messages: [] as GoldenRecord[],
    delivery_status: [] as GoldenRecord[],
    'webhooks-dlq': [] as GoldenRecord[],
  };
  WEBHOOK_INPUTS.forEach((input, i) => {
    const body = Buffer.from(input.body);
    const decision: WebhookDecision = handler.handle({
      businessId: GOLDEN_BUSINESS,
      pathTopic: input.pathTopic,
      body,
      signature: signBody(GOLDEN_SIGNING_SECRET, body),
      contentType: PROVIDER_CONTENT_TYPE,
      traceparent: input.traceparent,
      receivedAt: RECEIVED_AT + i,
    });
    if (decision.kind !== 'publish') throw new Error(`${input.note}: the ingress refused it (${decision.reason})`);
    out[decision.record.topic as keyof typeof out].push(golden(input.note, decision.record));
  });
  return out;
}

function incoming(key: string | null, value: string, headers: Record<string, string>, offset: number): IncomingRecord {
  return {
    topic: REQUEST_TOPIC,
    partition: 0,
    offset: String(offset),
    key: key === null ? null : Buffer.from(key),
    value: Buffer.from(value),
    headers,
  };
}

function senderRecords(): Record<'send-requests' | 'send-results' | 'send-requests-dlq', GoldenRecord[]> {
  const requests: GoldenRecord[] = [];
  const results: GoldenRecord[] = [];
  const dlq: GoldenRecord[] = [];
  const publishResult = (
    note: string,
    stored: StoredResult,
    requestHeaders: Record<string, string>,
    receivedAt: number,
  ) =>
    results.push(
      golden(note, {
        key: stored.key,
        value: stored.value,
        headers: resultHeaders(stored, requestHeaders, receivedAt),
      }),
    );
  REQUEST_INPUTS.forEach((input, i) => {
    const value = JSON.stringify(input.value);
    requests.push(golden(input.note, { key: input.key, value, headers: input.headers }));
    const receivedAt = RECEIVED_AT + 100 * i;
    const job = prepareJob(incoming(input.key, value, input.headers, i), BUSINESSES, {
      receivedAt,
      producedAt: PRODUCED_AT,
      maxRequestAgeMs: MAX_REQUEST_AGE_MS,
    });
    if (job.kind !== 'send') throw new Error(`${input.note}: the sender dead-lettered it (${job.reason})`);
    const at = new Date(receivedAt + 250);
    const o = input.outcome;
    let stored: StoredResult;
    if (o.kind === 'accepted') {
      const sent: SendJob = o.sentAs ? { ...job, operation: 'template', sentAs: o.sentAs } : job;
      stored = storedResult(acceptedResult(sent, o.messageId, o.attempts, o.maybeSent, at));
    } else if (o.kind === 'rejected')
      stored = storedResult(rejectedResult(job, failureOf(o.attempt, o.retriable), o.attempts, o.maybeSent, at));
    else if (o.kind === 'outside-window')
      stored = storedResult(
        rejectedResult(job, outsideWindowFailure({ state: 'closed', openUntil: o.openUntil }), 0, false, at),
      );
    else stored = storedResult(expiredResult(job, o.attempts, o.maybeSent, new Date(job.expiry.at + 5)));
    publishResult(`${o.kind}: ${input.note}`, stored, input.headers, receivedAt);
  });
  INVALID_REQUEST_INPUTS.forEach((input, i) => {
    const offset = REQUEST_INPUTS.length + i;
    const receivedAt = RECEIVED_AT + 100 * offset;
    const job = prepareJob(incoming(input.key, input.value, input.headers, offset), BUSINESSES, {
      receivedAt,
      producedAt: PRODUCED_AT,
      maxRequestAgeMs: MAX_REQUEST_AGE_MS,
    });
    if (job.kind !== 'dlq') throw new Error(`${input.note}: the sender accepted it`);
    dlq.push(golden(input.note, job.record));
    if (job.result) publishResult(`rejected, dead-lettered: ${input.note}`, job.result, input.headers, receivedAt);
  });
  return { 'send-requests': requests, 'send-results': results, 'send-requests-dlq': dlq };
}

/** A task store in memory: the tracker's rules need one, the golden records only its outputs. */
class MemoryStore implements TaskStateStore {
  private readonly messages = new Map<string, TrackedMessage>();
  private readonly windows = new Map<string, ConversationWindow>();
  private readonly outcomes = new Map<string, RequestOutcome>();
  private readonly inbound = new Map<string, InboundMessageRecord>();
  message = (id: string) => this.messages.get(id);
  conversation = (key: string) => this.windows.get(key);
  requestOutcome = (id: string) => this.outcomes.get(id);
  messageIdsOfRequest = () => [];
  indexesComplete = () => true;
  listedMessages = () => [];
  outcomesOfRecipient = () => [];
  inboundMessage = (eventId: string) => this.inbound.get(eventId);
  inboundOfCustomer = () => [];
  write(change: Parameters<TaskStateStore['write']>[0]): Promise<void> {
    for (const m of change.messages) this.messages.set(m.id, m.state);
    for (const c of change.conversations) this.windows.set(c.key, c.window);
    for (const o of change.outcomes ?? []) this.outcomes.set(o.requestId, o.outcome);
    for (const i of change.inbound ?? []) this.inbound.set(i.record.eventId, i.record);
    return Promise.resolve();
  }
}

/** The tracker's records: its logic run over this version's results, statuses and inbound messages. */
function trackerRecords(inputs: {
  results: GoldenRecord[];
  statuses: GoldenRecord[];
  inbound: GoldenRecord[];
}): Record<'message-state' | 'conversations' | 'request-outcomes' | 'inbound-messages', GoldenRecord[]> {
  const topics = trackerTopics(loadConfig({ env: {} })); // the default topic names
  const logic = new TrackerLogic({
    topics,
    partitions: 1,
    maxCachedMessages: 1000,
    maxCachedConversations: 1000,
    counters: { event() {}, skipped() {}, evicted() {} },
    now: () => new Date(RECEIVED_AT + 60_000),
  });
  logic.startTask(0, new MemoryStore());
  let offset = 0;
  const consumed = (topic: string, r: GoldenRecord): ConsumedRecord => ({
    topic,
    partition: 0,
    offset: String(offset++),
    timestamp: String(RECEIVED_AT),
    key: r.key === null ? null : Buffer.from(r.key),
    value: Buffer.from(r.value),
    headers: r.headers,
  });
  const byMessage = (id: string) => (r: GoldenRecord) => r.key === id;
  const results = inputs.results.filter((r) => (JSON.parse(r.value) as { outcome: string }).outcome === 'accepted');
  // An order with every rule in it: a status before its result, duplicates none, a failure, a message without a result.
  const order: ConsumedRecord[] = [
    ...inputs.statuses
      .filter(byMessage(MESSAGE_IDS.confirmation))
      .slice(0, 1)
      .map((r) => consumed(topics.deliveryStatus, r)),
    ...results.filter(byMessage(MESSAGE_IDS.confirmation)).map((r) => consumed(topics.sendResults, r)),
    ...inputs.statuses
      .filter(byMessage(MESSAGE_IDS.confirmation))
      .slice(1)
      .map((r) => consumed(topics.deliveryStatus, r)),
    ...results.filter((r) => r.key !== MESSAGE_IDS.confirmation).map((r) => consumed(topics.sendResults, r)),
    ...inputs.statuses.filter((r) => r.key !== MESSAGE_IDS.confirmation).map((r) => consumed(topics.deliveryStatus, r)),
    ...inputs.inbound.map((r) => consumed(topics.messages, r)),
    // The results that created no message: kept as their requests' outcomes.
    ...inputs.results
      .filter((r) => (JSON.parse(r.value) as { outcome: string }).outcome !== 'accepted')
      .map((r) => consumed(topics.sendResults, r)),
  ];
  const outputs: OutputRecord[] = [];
  for (const record of order) {
    const processed = logic.process(0, logic.decodeBatch([record]));
    processed.commit?.(new Map());
    outputs.push(...processed.outputs);
  }
  const out = {
    'message-state': [] as GoldenRecord[],
    conversations: [] as GoldenRecord[],
    'request-outcomes': [] as GoldenRecord[],
    'inbound-messages': [] as GoldenRecord[],
  };
  for (const o of outputs) {
    if (o.value === null) throw new Error('the tracker wrote a tombstone');
    const value = JSON.parse(o.value.toString()) as {
      status?: string;
      requestId?: string | null;
      customer?: string;
      lastInboundAt?: string;
      outcome?: string;
      error?: { code?: string } | null;
      from?: string;
      at?: string;
      button?: unknown;
    };
    const note =
      o.topic === topics.messageState
        ? `${value.status}${value.requestId === null ? ', no send result (yet)' : ''}`
        : o.topic === topics.requestOutcomes
          ? `${value.outcome} request ${value.requestId}${value.error?.code ? ` (${value.error.code})` : ''}`
          : o.topic === topics.inboundMessages
            ? `${value.button ? 'button reply' : 'message'} from ${value.from} at ${value.at}`
            : `window of ${value.customer} from ${value.lastInboundAt}`;
    out[o.topic as keyof typeof out].push(golden(note, { key: o.key, value: o.value, headers: o.headers ?? {} }));
  }
  return out;
}

/** What the code writes now, per topic. */
export function currentGoldenFiles(): GoldenFile[] {
  const version = CURRENT_CONTRACT_VERSION;
  const ingress = ingressRecords();
  const sender = senderRecords();
  const tracker = trackerRecords({
    results: sender['send-results'],
    statuses: ingress.delivery_status,
    inbound: ingress.messages,
  });
  const all: Record<ContractTopic, GoldenRecord[]> = { ...ingress, ...sender, ...tracker };
  return CONTRACT_TOPICS.map((topic) => ({ topic, version, records: all[topic] }));
}

export function renderGoldenFile(file: GoldenFile): string {
  return `${JSON.stringify(file, null, 2)}\n`;
}

/** The versions (x.y.z folders) under test/fixtures/contracts, oldest first. */
export function contractVersions(): string[] {
  return readdirSync(FIXTURES_DIR)
    .filter((name) => /^\d+\.\d+\.\d+$/.test(name))
    .sort(compareVersions);
}

export function goldenFilePath(version: string, topic: string): string {
  return join(FIXTURES_DIR, version, `${topic}.json`);
}

function main(): void {
  const check = process.argv.includes('--check');
  const stale: string[] = [];
  for (const file of currentGoldenFiles()) {
    const path = goldenFilePath(file.version, file.topic);
    const text = renderGoldenFile(file);
    if (check) {
      if (!existsSync(path) || readFileSync(path, 'utf8') !== text) stale.push(path);
      continue;
    }
    mkdirSync(join(FIXTURES_DIR, file.version), { recursive: true });
    writeFileSync(path, text);
    console.log(`wrote ${path} (${file.records.length} records)`);
  }
  if (stale.length > 0) {
    console.error(
      `golden records differ from what the code writes (run npm run contract-fixtures if the change is deliberate, and say it in the release notes):\n  ${stale.join('\n  ')}`,
    );
    process.exitCode = 1;
  } else if (check) console.log(`the ${CURRENT_CONTRACT_VERSION} golden records are what the code writes`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) main();
