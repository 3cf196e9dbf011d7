import { createHash, randomUUID } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../src/config/load.js';
import { canonicalCustomerId, eventIdOf, resultEventId } from '../../src/contracts/index.js';
import { inboundEvent, statusEvent } from '../ingress/fixtures.js';
import { kafkaBrokers, testKafka } from '../helpers/kafka.js';

/** The tracker tests' shared pieces: a configuration on unique topics, input records, readers, credentials. */

/** The tokens every test tracker knows (src/tracker/README.md, "Console and access"): the queries need one. */
export const TEST_TOKENS = { operator: 'test-operator-token', read: 'test-read-token' } as const;
const sha256 = (token: string) => createHash('sha256').update(token).digest('hex');
export const TEST_ACCESS_TOKENS = [
  { name: 'test-operator', role: 'operator', sha256: sha256(TEST_TOKENS.operator) },
  { name: 'test-reader', role: 'read', sha256: sha256(TEST_TOKENS.read) },
];

/** The Authorization header of a test token. */
export function authHeaders(role: keyof typeof TEST_TOKENS = 'operator'): Record<string, string> {
  return { authorization: `Bearer ${TEST_TOKENS[role]}` };
}

/** A GET of a tracker query with a test token: the status and the JSON body. */
export async function getJson(
  base: string,
  path: string,
  role: keyof typeof TEST_TOKENS = 'operator',
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${base}${path}`, { headers: authHeaders(role) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** The environment of a tracker on unique topics (3 partitions) with its stores in a temporary directory. */
export function trackerEnv(id: string): Record<string, string> {
  return {
    KAFKA_BROKERS: kafkaBrokers().join(','),
    MSGBRIDGE__kafka__topics__sendResults: `tr-results-${id}`,
    MSGBRIDGE__kafka__topics__deliveryStatus: `tr-status-${id}`,
    MSGBRIDGE__kafka__topics__messages: `tr-messages-${id}`,
    MSGBRIDGE__kafka__topics__messageState: `tr-state-${id}`,
    MSGBRIDGE__kafka__topics__conversations: `tr-conv-${id}`,
    MSGBRIDGE__kafka__topics__requestOutcomes: `tr-outcomes-${id}`,
    MSGBRIDGE__kafka__topics__inboundMessages: `tr-inbound-${id}`,
    MSGBRIDGE__kafka__partitions: '3',
    MSGBRIDGE__kafka__replicationFactor: '1',
    MSGBRIDGE__tracker__groupId: `tr-group-${id}`,
    MSGBRIDGE__tracker__transactionalIdPrefix: `tr-tx-${id}`,
    MSGBRIDGE__tracker__host: '127.0.0.1',
    MSGBRIDGE__tracker__port: '0',
    MSGBRIDGE__tracker__adminHost: '127.0.0.1',
    MSGBRIDGE_TRACKER_ADMIN_PORT: '0',
    MSGBRIDGE__tracker__sessionTimeoutMs: '6000',
    MSGBRIDGE_TRACKER_STATE_DIR: join(tmpdir(), 'msgbridge-test-state', id),
    MSGBRIDGE__tracker__accessTokens: JSON.stringify(TEST_ACCESS_TOKENS),
  };
}

export function trackerConfig(id: string, overrides: Record<string, unknown> = {}, env: Record<string, string> = {}) {
  return loadConfig({ env: { ...trackerEnv(id), ...env }, overrides });
}

export type TrackerTestConfig = ReturnType<typeof trackerConfig>;

export const accepted = (
  requestId: string,
  message: string,
  at = '2023-11-14T22:13:00.000Z',
  recipient = '+15550002222',
) =>
  JSON.stringify({
    requestId,
    businessId: 'biz_1',
    outcome: 'accepted',
    messageId: message,
    type: 'text',
    recipient,
    attempts: 1,
    acceptedAt: at,
    maybeSent: false,
  });

export function resultRecord(requestId: string, message: string, at?: string, recipient?: string) {
  return {
    key: message,
    value: accepted(requestId, message, at, recipient),
    headers: { 'event-id': resultEventId('biz_1', requestId, 'accepted'), 'business-id': 'biz_1' },
  };
}

/** A rejected result on send-results, keyed by its request id as the sender writes it (no message was created). */
export function rejectedRecord(
  requestId: string,
  rejectedAt = '2026-11-24T10:00:00.000Z',
  code = 'ERROR_CODE_MESSAGE_TEXT_EMPTY',
) {
  const value = JSON.stringify({
    requestId,
    businessId: 'biz_1',
    outcome: 'rejected',
    type: 'text',
    recipient: '+15550002222',
    attempts: 1,
    maybeSent: false,
    rejectedAt,
    error: {
      httpStatus: 400,
      type: 'ERROR_TYPE_INVALID_REQUEST',
      code,
      message: 'message.text: the message text is empty',
      cntTraceId: `trace-${requestId}`,
      retriable: false,
    },
    content: { text: ' ' },
  });
  return {
    key: requestId,
    value,
    headers: { 'event-id': resultEventId('biz_1', requestId, 'rejected'), 'business-id': 'biz_1' },
  };
}

/** An expired result on send-results, keyed by its request id. */
export function expiredRecord(requestId: string, expiredAt = '2026-11-24T10:00:00.000Z') {
  const value = JSON.stringify({
    requestId,
    businessId: 'biz_1',
    outcome: 'expired',
    type: 'template',
    recipient: '+15550002222',
    attempts: 0,
    maybeSent: false,
    expiresAt: '2026-11-24T09:59:00.000Z',
    expiredBy: 'ttlMs',
    expiredAt,
    content: { templateName: 'order_update', parameters: [{ name: 'order', value: '42' }] },
  });
  return {
    key: requestId,
    value,
    headers: { 'event-id': resultEventId('biz_1', requestId, 'expired'), 'business-id': 'biz_1' },
  };
}

export function statusRecord(message: string, status: string, timestamp: string) {
  const value = statusEvent(message, status, { timestamp });
  return { key: message, value, headers: { 'event-id': eventIdOf(value), 'business-id': 'biz_1' } };
}

/** An input record of the tracker, with the input topic it goes to. */
export interface LifeRecord {
  topic: 'results' | 'status';
  key: string;
  value: string;
  headers: Record<string, string>;
}

/**
 * One message's whole life as input: its accepted result, then sent, delivered and read one second apart from
 * `firstStatusAt` (epoch seconds).
 */
export function messageLifeRecords(
  requestId: string,
  message: string,
  options: { firstStatusAt?: number; acceptedAt?: string } = {},
): LifeRecord[] {
  const first = options.firstStatusAt ?? 1700000001;
  return [
    { topic: 'results', ...resultRecord(requestId, message, options.acceptedAt) },
    ...(['sent', 'delivered', 'read'] as const).map((status, k) => ({
      topic: 'status' as const,
      ...statusRecord(message, status, String(first + k)),
    })),
  ];
}

/**
 * An inbound message as the ingress writes it: keyed by the canonical customer id, the body as the provider sent it.
 */
export function inboundRecord(customer: string, timestamp: string) {
  const value = inboundEvent(customer, 'hi', { timestamp });
  return {
    key: canonicalCustomerId(customer),
    value,
    headers: { 'event-id': eventIdOf(value), 'business-id': 'biz_1' },
  };
}

/** The latest committed value per key of a compacted topic (read_committed, from the beginning). */
export async function latestByKey(
  topic: string,
  settleMs = 1500,
): Promise<{ latest: Map<string, Record<string, unknown>>; records: number }> {
  const consumer = testKafka('tracker-test-reader').consumer({
    groupId: `tr-read-${randomUUID()}`,
    maxWaitTimeInMs: 100,
    readUncommitted: false,
  });
  const latest = new Map<string, Record<string, unknown>>();
  let records = 0;
  let lastAt = Date.now();
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ message }) => {
      records++;
      lastAt = Date.now();
      latest.set(message.key!.toString(), JSON.parse(message.value!.toString()) as Record<string, unknown>);
    },
  });
  while (Date.now() - lastAt < settleMs) await new Promise((r) => setTimeout(r, 100));
  await consumer.disconnect();
  return { latest, records };
}

export async function until(what: string, check: () => Promise<boolean>, timeoutMs = 60_000) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 250));
  }
}

/**
 * Every committed record of a state topic, per key, read until `expected` arrived (90 s at most),
 * then 2 s more: a record beyond the expected count would show.
 */
export async function statesPerKey(
  topic: string,
  expected: number,
): Promise<{ perKey: Map<string, { status: string; events: number }[]>; seen: number }> {
  const consumer = testKafka('tracker-test-states').consumer({
    groupId: `tr-states-${randomUUID()}`,
    maxWaitTimeInMs: 100,
    readUncommitted: false,
  });
  const perKey = new Map<string, { status: string; events: number }[]>();
  let seen = 0;
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ message }) => {
      seen++;
      const key = message.key!.toString();
      perKey.set(key, [
        ...(perKey.get(key) ?? []),
        JSON.parse(message.value!.toString()) as { status: string; events: number },
      ]);
    },
  });
  const deadline = Date.now() + 90_000;
  while (seen < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
  await new Promise((r) => setTimeout(r, 2000));
  await consumer.disconnect();
  return { perKey, seen };
}
