import { describe, expect, it } from 'vitest';
import { eventIdOf } from '../../src/contracts/index.js';
import { loadConfig } from '../../src/config/load.js';
import type { ConsumedRecord } from '../../src/kafka/group-consumer.js';
import { javaCompatibleHash } from '../../src/kafka/partitioner.js';
import { QueryService } from '../../src/tracker/query-service.js';
import { TrackerLogic } from '../../src/tracker/tracker-logic.js';
import { trackerTopics } from '../../src/tracker/tracker-topics.js';
import { inboundEvent } from '../ingress/fixtures.js';
import { MemoryStore } from './memory-store.js';

/**
 * Which member answers for a customer (no Kafka, no other member): the task of the canonical id,
 * whichever form the query names. This member owns only that task; a query sent to any other
 * task's owner would be forwarded to an address that does not answer (503), so a 200 or a 404
 * here proves it was answered where the customer lives.
 */
const PARTITIONS = 3;
const SELF = 'http://self.invalid';
const OTHER = 'http://127.0.0.1:9';
const task = (key: string) => javaCompatibleHash(Buffer.from(key)) % PARTITIONS;

// A customer whose two forms hash to different tasks: the raw form would name the wrong one.
const digits = ['15550007777', '15550004444', '15550001234', '15550009876'].find((d) => task(d) !== task(`+${d}`))!;

function member() {
  const topics = trackerTopics(loadConfig({ env: {} }));
  const logic = new TrackerLogic({
    topics,
    partitions: PARTITIONS,
    maxCachedMessages: 100,
    maxCachedConversations: 100,
    counters: { event() {}, skipped() {}, evicted() {} },
    now: () => new Date('2026-11-27T10:00:00.000Z'),
  });
  const owned = task(digits);
  logic.startTask(owned, new MemoryStore());
  const body = inboundEvent(`+${digits}`, 'hello', { timestamp: '1795168680' });
  const record: ConsumedRecord = {
    topic: topics.messages,
    partition: owned,
    offset: '0',
    timestamp: '0',
    key: Buffer.from(digits),
    value: Buffer.from(body),
    headers: { 'event-id': eventIdOf(body), 'business-id': 'biz_1' },
  };
  logic.process(owned, logic.decodeBatch([record])).commit!(new Map());
  const queries = new QueryService(logic, 500);
  const owners = new Map(Array.from({ length: PARTITIONS }, (_, t) => [t, t === owned ? SELF : OTHER]));
  queries.attach(
    { ownedTasks: () => [owned] },
    { owners: async () => owners, members: async () => [SELF], invalidate() {} },
    SELF,
    async () => {},
  );
  return queries;
}

const ask = (queries: QueryService, path: string) => {
  const url = new URL(path, SELF);
  return queries.route(url.pathname, url.searchParams, {});
};

describe('queries by customer: the task of the canonical id, whichever form is asked', () => {
  it.each([`+${digits}`, digits])('%s: the window, the inbound messages and the thread answer here', async (form) => {
    const queries = member();
    expect(await ask(queries, `/conversations/biz_1/${encodeURIComponent(form)}`)).toMatchObject({
      status: 200,
      body: { customer: digits },
    });
    expect(await ask(queries, `/inbound?customer=${encodeURIComponent(form)}`)).toMatchObject({
      status: 200,
      body: { messages: [{ text: 'hello', from: `+${digits}` }] },
    });
    expect(await ask(queries, `/thread?customer=${encodeURIComponent(form)}`)).toMatchObject({
      status: 200,
      body: { items: [{ direction: 'inbound', inbound: { text: 'hello' } }] },
    });
  });

  it('a customer of another task is asked of its owner (here: one that does not answer, so 503, never a false 404)', async () => {
    const other = ['15550001111', '15550002222', '15550003333', '15550005555'].find((d) => task(d) !== task(digits))!;
    expect(await ask(member(), `/inbound?customer=${other}`)).toMatchObject({
      status: 503,
      body: { error: 'UNAVAILABLE' },
    });
  });
});
