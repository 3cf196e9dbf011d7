import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Ajv } from 'ajv';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CONTRACT_TOPICS,
  contractVersions,
  CURRENT_CONTRACT_VERSION,
  currentGoldenFiles,
  goldenFilePath,
  GOLDEN_BUSINESS,
  GOLDEN_SIGNING_SECRET,
  renderGoldenFile,
  type ContractTopic,
  type GoldenFile,
  type GoldenRecord,
} from '../../scripts/contract-fixtures.js';
import { canonicalConversationKey, conversationKey } from '../../src/contracts/conversation-window.js';
import { canonicalCustomerId } from '../../src/contracts/customer-id.js';
import { inboundMessageRecordSchema } from '../../src/contracts/inbound-message.js';
import { eventIdOf, HEADER, SCHEMA_ID } from '../../src/contracts/headers.js';
import { messageStateOf, messageStateSchema } from '../../src/contracts/message-state.js';
import { requestOutcomeSchema, type RequestOutcome } from '../../src/contracts/request-outcome.js';
import { sendRequestSchema, sendResultSchema } from '../../src/contracts/send.js';
import { verifySignature } from '../../src/contracts/signature.js';
import { deliveryStatusEventSchema, inboundMessageEventSchema } from '../../src/contracts/webhook-events.js';
import { decodeValue } from '../../src/commands/render.js';
import type { ConsumedRecord } from '../../src/kafka/group-consumer.js';
import { headersToStrings } from '../../src/kafka/headers.js';
import { conversationEntry } from '../../src/sender/conversation-table.js';
import { prepareJob } from '../../src/sender/requests.js';
import { TaskStore } from '../../src/tracker/state-store.js';
import { TrackerLogic, type DecodedEvent, type SkipReason } from '../../src/tracker/tracker-logic.js';
import { loadConfig } from '../../src/config/load.js';
import { trackerTopics } from '../../src/tracker/tracker-topics.js';

/**
 * Every reader in the project accepts every golden record of every release (test/fixtures/contracts/),
 * with the meaning docs/topics.md documents: the tracker, the sender, `msgbridge send`, `status` and
 * `tail`, the JSON Schemas and the AsyncAPI document. docs/topics.md, compatibility rule.
 */

const ROOT = join(import.meta.dirname, '..', '..');
const versions = contractVersions();

function load(version: string, topic: ContractTopic): GoldenFile | undefined {
  const path = goldenFilePath(version, topic);
  return existsSync(path) ? (JSON.parse(readFileSync(path, 'utf8')) as GoldenFile) : undefined;
}

const files = versions
  .flatMap((version) => CONTRACT_TOPICS.map((topic) => ({ version, topic, file: load(version, topic) })))
  .filter((f) => f.file !== undefined) as {
  version: string;
  topic: ContractTopic;
  file: GoldenFile;
}[];
const cases = files.flatMap(({ version, topic, file }) =>
  file.records.map((record) => ({ version, topic, record, name: `${version} ${topic}: ${record.note}` })),
);
const recordsOf = (version: string, topic: ContractTopic) => load(version, topic)?.records ?? [];
const json = (r: GoldenRecord) => JSON.parse(r.value) as Record<string, unknown>;

/**
 * The `schema` header each topic's records carry (send-requests: send-request/v1 from msgbridge send, none required of
 * other producers).
 */
const SCHEMA_OF: Record<ContractTopic, string | undefined> = {
  messages: SCHEMA_ID.messages,
  delivery_status: SCHEMA_ID.delivery_status,
  'webhooks-dlq': SCHEMA_ID.webhooksDlq,
  'send-requests': undefined,
  'send-results': SCHEMA_ID.sendResult,
  'send-requests-dlq': SCHEMA_ID.sendRequestsDlq,
  'message-state': SCHEMA_ID.messageState,
  conversations: SCHEMA_ID.conversations,
  'request-outcomes': SCHEMA_ID.requestOutcomes,
  'inbound-messages': SCHEMA_ID.inboundMessages,
};

/** The published JSON Schema of each topic's value (the DLQs hold raw bytes: none). */
const JSON_SCHEMA_OF: Partial<Record<ContractTopic, string>> = {
  messages: 'inbound-message-event.schema.json',
  delivery_status: 'delivery-status-event.schema.json',
  'send-requests': 'send-request.schema.json',
  'send-results': 'send-result.schema.json',
  'message-state': 'message-state.schema.json',
  conversations: 'conversation-window.schema.json',
  'request-outcomes': 'request-outcome.schema.json',
  'inbound-messages': 'inbound-message-record.schema.json',
};

const TOPICS = trackerTopics(loadConfig({ env: {} })); // the default topic names

/** The tracker's decoding of consumed records (TrackerLogic.decodeBatch), with what it skipped and why. */
function trackerDecode(
  topic: string,
  records: GoldenRecord[],
): { events: DecodedEvent[]; skipped: { reason: SkipReason; detail: string }[] } {
  const skipped: { reason: SkipReason; detail: string }[] = [];
  const logic = trackerLogic((reason, _record, detail) => skipped.push({ reason, detail }));
  return { events: logic.decodeBatch(records.map((r, i) => consumed(topic, r, i))), skipped };
}

function trackerLogic(onSkip?: (reason: SkipReason, record: ConsumedRecord, detail: string) => void): TrackerLogic {
  return new TrackerLogic({
    topics: TOPICS,
    partitions: 1,
    maxCachedMessages: 1000,
    maxCachedConversations: 1000,
    counters: { event() {}, skipped() {}, evicted() {} },
    onSkip,
    now: () => new Date('2026-11-21T00:00:00.000Z'),
  });
}

function consumed(topic: string, r: GoldenRecord, offset: number): ConsumedRecord {
  // As a Kafka client hands them over: key, value and header values as bytes.
  const headers = Object.fromEntries(Object.entries(r.headers).map(([name, value]) => [name, Buffer.from(value)]));
  return {
    topic,
    partition: 0,
    offset: String(offset),
    timestamp: '1795168800000',
    key: r.key === null ? null : Buffer.from(r.key),
    value: Buffer.from(r.value),
    headers,
  };
}

// ---- The JSON Schemas and the AsyncAPI document, compiled by a validator other than zod ----

const jsonSchemaValidators = new Map<string, ValidateFunction>();
function jsonSchemaValidator(file: string): ValidateFunction {
  let validate = jsonSchemaValidators.get(file);
  if (!validate) {
    // Ajv has no format validators of its own; the pattern zod emits carries the date-time rule.
    const ajv = new Ajv2020({ strict: true, allErrors: true, formats: { 'date-time': true } });
    validate = ajv.compile(JSON.parse(readFileSync(join(ROOT, 'schemas', file), 'utf8')));
    jsonSchemaValidators.set(file, validate);
  }
  return validate;
}

interface AsyncApiMessage {
  name: string;
  headers?: object;
  payload: { $ref?: string };
}
const asyncapi = JSON.parse(readFileSync(join(ROOT, 'docs', 'asyncapi.json'), 'utf8')) as {
  channels: Record<string, { address: string; messages: Record<string, { $ref: string }> }>;
  components: { messages: Record<string, AsyncApiMessage>; schemas: Record<string, object> };
};
const resolve = <T>(ref: string): T =>
  ref
    .replace(/^#\//, '')
    .split('/')
    .reduce<unknown>((node, part) => (node as Record<string, unknown>)[part], asyncapi) as T;
/**
 * The messages the AsyncAPI document declares on a topic's channel, each with validators of its payload and headers.
 */
function asyncApiMessages(topic: string) {
  const channel = Object.values(asyncapi.channels).find((c) => c.address === topic);
  if (!channel) return [];
  // AsyncAPI 3 payloads default to JSON Schema draft 7 (the document is generated with target draft-7).
  const ajv = new Ajv({ strict: true, allErrors: true, formats: { 'date-time': true } });
  return Object.values(channel.messages).map(({ $ref }) => {
    const message = resolve<AsyncApiMessage>($ref);
    const payload = message.payload.$ref ? resolve<object>(message.payload.$ref) : message.payload;
    return {
      name: message.name,
      payload: ajv.compile(payload),
      headers: message.headers ? ajv.compile(message.headers) : undefined,
    };
  });
}

let store: TaskStore;
let storeDir: string;
beforeAll(() => {
  storeDir = mkdtempSync(join(tmpdir(), 'golden-store-'));
  store = TaskStore.open(storeDir, {
    clusterId: 'golden',
    task: 0,
    partitions: 1,
    messageStateTopic: 'message-state',
    conversationsTopic: 'conversations',
    requestOutcomesTopic: 'request-outcomes',
    inboundMessagesTopic: 'inbound-messages',
  });
});
afterAll(async () => {
  await store.close();
  rmSync(storeDir, { recursive: true, force: true });
});

describe('golden records', () => {
  it('are kept for the last release (0.1.0) and this one, every topic of this one', () => {
    expect(versions).toContain('0.1.0');
    expect(versions.at(-1)).toBe(CURRENT_CONTRACT_VERSION);
    expect(files.filter((f) => f.version === CURRENT_CONTRACT_VERSION).map((f) => f.topic)).toEqual([
      ...CONTRACT_TOPICS,
    ]);
    // 0.1.0 had no tracker: its topics are the ones the ingress and the sender wrote.
    expect(files.filter((f) => f.version === '0.1.0').map((f) => f.topic)).toEqual([
      'messages',
      'delivery_status',
      'webhooks-dlq',
      'send-requests',
      'send-results',
      'send-requests-dlq',
    ]);
    for (const { version, topic, file } of files) {
      expect(file.version, `${version}/${topic}.json`).toBe(version);
      expect(file.topic, `${version}/${topic}.json`).toBe(topic);
      expect(file.records.length, `${version}/${topic}.json`).toBeGreaterThan(0);
    }
    // What the issue is about: the last release's results have no maybeSent.
    expect(recordsOf('0.1.0', 'send-results').every((r) => !('maybeSent' in json(r)))).toBe(true);
  });

  it(`of ${CURRENT_CONTRACT_VERSION} are what the code writes now (after a deliberate change: npm run contract-fixtures, and say it in the release notes)`, () => {
    for (const file of currentGoldenFiles()) {
      expect(readFileSync(goldenFilePath(file.version, file.topic), 'utf8'), `${file.version}/${file.topic}.json`).toBe(
        renderGoldenFile(file),
      );
    }
  });
});

describe.each(cases)('$name', ({ topic, record }) => {
  it('has string headers, and a schema header naming a version the code knows', () => {
    for (const value of Object.values(record.headers)) expect(typeof value).toBe('string');
    // msgbridge send names send-request/v1; other producers of send requests need not.
    if (topic === 'send-requests' && record.headers[HEADER.schema] !== undefined)
      expect(record.headers[HEADER.schema]).toBe(SCHEMA_ID.sendRequest);
    else expect(record.headers[HEADER.schema]).toBe(SCHEMA_OF[topic]);
    if (SCHEMA_OF[topic] !== undefined) expect(Object.values(SCHEMA_ID)).toContain(record.headers[HEADER.schema]);
  });

  it('is printed by msgbridge tail: key, headers as strings, the value decoded', () => {
    const headers = headersToStrings(
      Object.fromEntries(Object.entries(record.headers).map(([n, v]) => [n, Buffer.from(v)])),
    );
    expect(headers).toEqual(record.headers);
    let parsed: unknown;
    try {
      parsed = JSON.parse(record.value);
    } catch {
      parsed = record.value;
    }
    expect(decodeValue(Buffer.from(record.value))).toEqual(parsed);
  });

  it('matches its channel in the AsyncAPI document: payload, headers and message name', () => {
    const messages = asyncApiMessages(topic);
    expect(messages.length, `no channel ${topic} in docs/asyncapi.json`).toBeGreaterThan(0);
    const value = decodeValue(Buffer.from(record.value));
    const fitting = messages.filter((m) => m.payload(value) && (m.headers?.(record.headers) ?? true));
    const why = messages.map((m) =>
      JSON.stringify([
        m.name,
        m.payload(value) || m.payload.errors,
        m.headers ? m.headers(record.headers) || m.headers.errors : 'no headers',
      ]),
    );
    expect(fitting.length, why.join('\n')).toBeGreaterThan(0);
    if (record.headers[HEADER.schema] !== undefined)
      expect(fitting.map((m) => m.name)).toContain(record.headers[HEADER.schema]);
  });

  if (JSON_SCHEMA_OF[topic] !== undefined)
    it('is valid under its published JSON Schema', () => {
      const validate = jsonSchemaValidator(JSON_SCHEMA_OF[topic]!);
      expect(validate(json(record)), JSON.stringify(validate.errors)).toBe(true);
    });

  if (topic === 'delivery_status' || topic === 'messages' || topic === 'webhooks-dlq')
    it('is the webhook body byte for byte: event-id is its SHA-256, the signature verifies it', () => {
      expect(record.headers[HEADER.eventId]).toBe(eventIdOf(record.value));
      expect(
        verifySignature([GOLDEN_SIGNING_SECRET], Buffer.from(record.value), record.headers[HEADER.signature]),
      ).toBe(true);
      expect(record.headers[HEADER.businessId]).toBe(GOLDEN_BUSINESS);
      expect(Number(record.headers[HEADER.receivedAt])).toBeGreaterThan(0);
      if (topic === 'webhooks-dlq') {
        expect(record.key).toBe(record.headers[HEADER.businessId]);
        expect(record.headers[HEADER.errorReason]).toBeTruthy();
      }
    });

  if (topic === 'delivery_status')
    it('is read by the tracker as the status of the message its key names, and by msgbridge send', () => {
      const body = deliveryStatusEventSchema.parse(json(record));
      expect(record.key).toBe(body.statusUpdate.id);
      const { events, skipped } = trackerDecode(TOPICS.deliveryStatus, [record]);
      expect(skipped).toEqual([]);
      expect(events[0]).toMatchObject({
        kind: 'message',
        event: {
          kind: 'status',
          messageId: record.key,
          status: body.statusUpdate.status,
          businessId: record.headers[HEADER.businessId],
          eventId: record.headers[HEADER.eventId],
        },
      });
    });

  if (topic === 'messages')
    it("is read by the tracker as an inbound message of the customer its key names (the conversation's key), kept as it was sent", () => {
      const body = inboundMessageEventSchema.parse(json(record));
      // 0.1.0 keyed by sender.id as sent, 0.2.0 by its canonical form: either names the customer.
      expect(canonicalCustomerId(record.key!)).toBe(canonicalCustomerId(body.sender.id));
      const { events, skipped } = trackerDecode(TOPICS.messages, [record]);
      expect(skipped).toEqual([]);
      expect(events[0]).toMatchObject({
        kind: 'conversation',
        input: { businessId: record.headers[HEADER.businessId], customer: canonicalCustomerId(record.key!) },
        inbound: {
          eventId: record.headers[HEADER.eventId],
          customer: canonicalCustomerId(body.sender.id),
          from: body.sender.id,
        },
      });
    });

  if (topic === 'send-requests')
    it('is sent by the sender to the recipient its key names, and is a request msgbridge send could write', () => {
      const value = json(record);
      expect(sendRequestSchema.safeParse(value).success).toBe(true);
      const job = prepareJob(
        {
          topic,
          partition: 0,
          offset: '0',
          key: record.key === null ? null : Buffer.from(record.key),
          value: Buffer.from(record.value),
          headers: record.headers,
        },
        new Map([[GOLDEN_BUSINESS, 'key']]),
        {
          receivedAt: Date.parse('2026-11-20T10:00:00.000Z'),
          producedAt: Date.parse('2026-11-20T09:59:59.000Z'),
          maxRequestAgeMs: 86_400_000,
        },
      );
      expect(job.kind, job.kind === 'dlq' ? job.reason : '').toBe('send');
      if (job.kind !== 'send') return;
      expect(job.recipient).toBe(record.key);
      // businessId may be left out with one business configured.
      expect(job.businessId).toBe(value.businessId ?? GOLDEN_BUSINESS);
      expect(job.request.requestId).toBe(value.requestId);
    });

  if (topic === 'send-results')
    it('is read by the tracker and msgbridge send with its documented meaning (maybeSent absent: false)', () => {
      const value = json(record);
      const result = sendResultSchema.parse(value);
      expect(result.maybeSent).toBe(value.maybeSent ?? false);
      expect(record.key).toBe(result.outcome === 'accepted' ? result.messageId : result.requestId);
      expect(record.headers[HEADER.eventId]).toMatch(/^[0-9a-f]{64}$/);
      const { events, skipped } = trackerDecode(TOPICS.sendResults, [record]);
      if (result.outcome === 'accepted') {
        expect(skipped).toEqual([]);
        // sentAs absent: what went out is the request's type.
        expect(events[0]).toMatchObject({
          kind: 'message',
          event: {
            kind: 'result',
            eventId: record.headers[HEADER.eventId],
            result: {
              requestId: result.requestId,
              messageId: record.key,
              type: result.sentAs ?? result.type,
              businessId: result.businessId,
              acceptedAt: result.acceptedAt,
            },
          },
        });
      } else {
        // Rejected and expired results created no message: kept as their requests' outcomes, never skipped.
        expect(skipped).toEqual([]);
        expect(events[0]).toMatchObject({
          kind: 'outcome',
          event: {
            requestId: result.requestId,
            outcome: result.outcome,
            attempts: result.attempts,
            maybeSent: result.maybeSent ?? false,
            error: result.outcome === 'rejected' ? result.error : null,
          },
        });
      }
    });

  if (topic === 'send-requests-dlq')
    it('keeps the original bytes and says why, with where they came from', () => {
      expect(record.headers[HEADER.eventId]).toBe(eventIdOf(record.value));
      expect(record.headers[HEADER.errorReason]).toBeTruthy();
      expect(record.headers['source-topic']).toBe('send-requests');
      expect(record.headers['source-offset']).toMatch(/^\d+$/);
    });

  if (topic === 'message-state')
    it('is read by msgbridge send and status and restored by the tracker, as the state of the message its key names', () => {
      const state = messageStateSchema.parse(json(record));
      expect(record.key).toBe(state.messageId);
      expect(record.headers[HEADER.businessId]).toBe(state.businessId);
      // msgbridge status prints the public state: the tracker's bookkeeping left out.
      const shown = messageStateOf(state);
      expect(shown).not.toHaveProperty('eventIds');
      expect(shown).toMatchObject({ messageId: state.messageId, status: state.status, requestId: state.requestId });
      store.applyChangelog('messageState', [{ key: record.key!, value: Buffer.from(record.value) }], {}, 0);
      expect(store.message(record.key!)).toEqual(state);
    });

  if (topic === 'conversations')
    it("is read by the sender's conversation table and restored by the tracker, as the window its key names", () => {
      const window = json(record) as { businessId: string; customer: string; windowOpenUntil: string };
      expect(record.key).toBe(conversationKey(window.businessId, window.customer));
      const entry = conversationEntry(record.key, record.value);
      expect(entry).toMatchObject({ businessId: window.businessId, openUntil: Date.parse(window.windowOpenUntil) });
      store.applyChangelog('conversations', [{ key: record.key!, value: Buffer.from(record.value) }], {}, 0);
      expect(store.conversation(canonicalConversationKey(record.key!))).toMatchObject({
        ...window,
        customer: canonicalCustomerId(window.customer),
      });
    });

  if (topic === 'inbound-messages')
    it('is restored by the tracker, as the inbound message its key names, found by its customer', () => {
      const kept = inboundMessageRecordSchema.parse(json(record));
      expect(record.key).toBe(kept.eventId);
      store.applyChangelog('inboundMessages', [{ key: record.key!, value: Buffer.from(record.value) }], {}, 0);
      expect(store.inboundMessage(record.key!)).toEqual(kept);
      expect(store.inboundOfCustomer(kept.customer, 100).map((f) => f.record.eventId)).toContain(kept.eventId);
    });

  if (topic === 'request-outcomes')
    it('is restored by the tracker, as the outcome of the request its key names', () => {
      const outcome = requestOutcomeSchema.parse(json(record));
      expect(record.key).toBe(outcome.requestId);
      store.applyChangelog('requestOutcomes', [{ key: record.key!, value: Buffer.from(record.value) }], {}, 0);
      expect(store.requestOutcome(record.key!)).toEqual(outcome);
    });
});

describe.each(versions)('the tracker on the records of %s', (version) => {
  it('folds every result and status into states that carry their requests, and keeps the outcome of each request that created no message', () => {
    const results = recordsOf(version, 'send-results');
    const statuses = recordsOf(version, 'delivery_status');
    const inbound = recordsOf(version, 'messages');
    const skipped: SkipReason[] = [];
    const logic = trackerLogic((reason) => skipped.push(reason));
    const states = new Map<string, ReturnType<typeof messageStateSchema.parse>>();
    const outcomes = new Map<string, RequestOutcome>();
    logic.startTask(0, {
      message: (id) => states.get(id),
      conversation: () => undefined,
      requestOutcome: (id) => outcomes.get(id),
      messageIdsOfRequest: () => [],
      indexesComplete: () => true,
      listedMessages: () => [],
      outcomesOfRecipient: () => [],
      inboundMessage: () => undefined,
      inboundOfCustomer: () => [],
      write: (change) => {
        for (const m of change.messages) states.set(m.id, m.state);
        for (const o of change.outcomes ?? []) outcomes.set(o.requestId, o.outcome);
        return Promise.resolve();
      },
    });
    let offset = 0;
    const batch = (topic: string, records: GoldenRecord[]) => {
      const processed = logic.process(0, logic.decodeBatch(records.map((r) => consumed(topic, r, offset++))));
      processed.commit?.(new Map());
      return processed.outputs;
    };
    const outputs = [
      ...batch(TOPICS.sendResults, results),
      ...batch(TOPICS.deliveryStatus, statuses),
      ...batch(TOPICS.messages, inbound),
    ];
    const accepted = results.map(json).filter((r) => r.outcome === 'accepted');
    expect(skipped).toEqual([]);
    for (const r of results.map(json).filter((r) => r.outcome !== 'accepted'))
      expect(outcomes.get(r.requestId as string)?.outcome, `outcome of ${String(r.requestId)}`).toBeDefined();
    for (const r of accepted)
      expect(states.get(r.messageId as string)?.requestId, `state of ${String(r.messageId)}`).toBe(r.requestId);
    expect(outputs.filter((o) => o.topic === TOPICS.conversations).length).toBeGreaterThan(0);
    // What it writes is read back as this version's states are.
    for (const o of outputs.filter((o) => o.topic === TOPICS.messageState))
      expect(messageStateSchema.safeParse(JSON.parse(String(o.value))).success).toBe(true);
    for (const o of outputs.filter((o) => o.topic === TOPICS.requestOutcomes))
      expect(requestOutcomeSchema.safeParse(JSON.parse(String(o.value))).success).toBe(true);
    // Every inbound message (a text, a button reply, an attachment) is kept once, for its customer's conversation.
    const kept = outputs
      .filter((o) => o.topic === TOPICS.inboundMessages)
      .map((o) => inboundMessageRecordSchema.parse(JSON.parse(String(o.value))));
    expect(kept.map((k) => k.eventId).sort()).toEqual(inbound.map((r) => r.headers[HEADER.eventId]).sort());
  });
});

describe('records of the code before canonical customer ids', () => {
  it("reads the conversations key of the release before canonical customer ids (the provider's form) as the same customer, in the sender and the store", () => {
    const value = JSON.stringify({
      businessId: 'biz_1',
      customer: '+15550009999',
      lastInboundAt: '2026-11-20T09:58:00.000Z',
      windowOpenUntil: '2026-11-21T09:58:00.000Z',
    });
    expect(conversationEntry('biz_1:+15550009999', value)).toMatchObject({
      key: 'biz_1:15550009999',
      openUntil: Date.parse('2026-11-21T09:58:00.000Z'),
    });
    store.applyChangelog('conversations', [{ key: 'biz_1:+15550009999', value: Buffer.from(value) }], {}, 0);
    expect(store.conversation('biz_1:15550009999')).toMatchObject({
      customer: '15550009999',
      windowOpenUntil: '2026-11-21T09:58:00.000Z',
    });
  });
});
