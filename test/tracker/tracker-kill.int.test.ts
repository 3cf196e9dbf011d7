import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { messageId } from '../ingress/fixtures.js';
import { startCli } from '../helpers/cli.js';
import { createTopics, kafkaBrokers, produce, testKafka } from '../helpers/kafka.js';
import {
  getJson,
  inboundRecord,
  messageLifeRecords,
  rejectedRecord,
  statesPerKey,
  TEST_ACCESS_TOKENS,
} from './harness.js';

/**
 * `msgbridge tracker` killed with SIGKILL mid-stream, twice, then restarted: every message ends
 * in its right state and message-state (read_committed) holds exactly one record per state
 * change — none lost, none published twice. Each message gets an accepted result and three
 * statuses in a shuffled order; whatever the order, each of the four events changes the state
 * once (a status move, a timestamp filled or the result merged), so exactly four records a key.
 * Rejected results among them (keyed by request id) make exactly one request-outcomes record
 * each, and every one is found by its request id at the end. Inbound messages among them, each
 * delivered twice (the provider retries), make exactly one inbound-messages record each, and
 * every customer's conversation holds all of theirs at the end.
 */
describe('tracker under kill -9', () => {
  it('loses no state change and publishes none twice across two kill -9 and restarts', async () => {
    const id = randomUUID().slice(0, 8);
    const topics = {
      results: `tk-results-${id}`,
      status: `tk-status-${id}`,
      messages: `tk-messages-${id}`,
      state: `tk-state-${id}`,
      conv: `tk-conv-${id}`,
    };
    const env: Record<string, string> = {
      KAFKA_BROKERS: kafkaBrokers().join(','),
      MSGBRIDGE__kafka__topics__sendResults: topics.results,
      MSGBRIDGE__kafka__topics__deliveryStatus: topics.status,
      MSGBRIDGE__kafka__topics__messages: topics.messages,
      MSGBRIDGE__kafka__topics__messageState: topics.state,
      MSGBRIDGE__kafka__topics__conversations: topics.conv,
      MSGBRIDGE__kafka__topics__requestOutcomes: `${topics.conv}-outcomes`,
      MSGBRIDGE__kafka__topics__inboundMessages: `${topics.conv}-inbound`,
      MSGBRIDGE__tracker__accessTokens: JSON.stringify(TEST_ACCESS_TOKENS),
      MSGBRIDGE__kafka__partitions: '3',
      MSGBRIDGE__kafka__replicationFactor: '1',
      MSGBRIDGE__tracker__groupId: `tk-group-${id}`,
      MSGBRIDGE__tracker__transactionalIdPrefix: `tk-tx-${id}`,
      MSGBRIDGE__tracker__maxBatchRecords: '50',
      MSGBRIDGE__tracker__sessionTimeoutMs: '6000',
      MSGBRIDGE_TRACKER_PORT: '0',
      MSGBRIDGE_TRACKER_ADMIN_PORT: '0',
      MSGBRIDGE_LOG_LEVEL: 'warn',
    };
    await createTopics([topics.results, topics.status, topics.messages], 3);
    const N = 1500;
    const ids = Array.from({ length: N }, () => messageId());
    const inputTopic = { results: topics.results, status: topics.status };
    const R = 300;
    // 30 customers writing 10 times each (either form of their number), every event delivered twice.
    const customer = (c: number) => `${c % 2 === 0 ? '+' : ''}1555${String(7000000 + c).padStart(7, '0')}`;
    const I = 300;
    const inbound = Array.from({ length: I }, (_, i) => ({
      ...inboundRecord(customer(i % 30), String(1795168680 + i)),
      topic: topics.messages,
    }));
    const events = [
      ...ids.flatMap((m, i) => messageLifeRecords(`req-${i}`, m).map((r) => ({ ...r, topic: inputTopic[r.topic] }))),
      ...Array.from({ length: R }, (_, i) => ({ ...rejectedRecord(`rej-${i}`), topic: topics.results })),
      ...inbound,
      ...inbound,
    ];
    // Shuffled: statuses before their result, read before delivered...
    for (let i = events.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [events[i], events[j]] = [events[j]!, events[i]!];
    }
    const half = events.length / 2;
    for (const topic of [topics.results, topics.status, topics.messages])
      await produce(
        topic,
        events.slice(0, half).filter((e) => e.topic === topic),
      );

    const countState = async () => {
      const admin = testKafka('tk-admin').admin();
      await admin.connect();
      const offsets = await admin.fetchTopicOffsets(topics.state).catch(() => []);
      await admin.disconnect();
      return offsets.reduce((n, p) => n + Number(p.offset), 0);
    };
    const kills: number[] = [];
    for (let round = 0; round < 2; round++) {
      const tracker = startCli(['tracker'], env);
      await tracker.waitFor(/"tracker":/);
      if (round === 1)
        for (const topic of [topics.results, topics.status, topics.messages])
          await produce(
            topic,
            events.slice(half).filter((e) => e.topic === topic),
          );
      // Let it work for a moment, then kill it without warning.
      const before = await countState();
      const deadline = Date.now() + 30_000;
      while ((await countState()) < before + 300 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      tracker.child.kill('SIGKILL');
      await tracker.stop('SIGKILL');
      kills.push(await countState());
    }
    const last = startCli(['tracker'], env);
    const url = (await last.waitFor(/"url":"(http:[^"]+)"/))[1]!;

    const { perKey, seen } = await statesPerKey(topics.state, 4 * N);
    const outcomes = await statesPerKey(`${topics.conv}-outcomes`, R);
    const kept = await statesPerKey(`${topics.conv}-inbound`, I);
    const unknown: string[] = [];
    for (let i = 0; i < R; i++)
      if ((await getJson(url, `/requests/rej-${i}`, 'read')).status !== 200) unknown.push(`rej-${i}`);
    const conversations: number[] = [];
    for (let c = 0; c < 30; c++)
      conversations.push(
        (
          (await getJson(url, `/inbound?customer=${encodeURIComponent(customer(c))}&limit=100`, 'read')).body
            .messages as unknown[]
        ).length,
      );
    expect(await last.stop('SIGTERM')).toBe(0);
    expect(outcomes.perKey.size).toBe(R);
    expect(outcomes.seen).toBe(R);
    expect(unknown.slice(0, 3)).toEqual([]);
    expect(kept.perKey.size).toBe(I);
    expect(kept.seen).toBe(I);
    expect(conversations).toEqual(Array(30).fill(10));

    const wrongCount = [...perKey].filter(([, states]) => states.length !== 4);
    const wrongFinal = [...perKey].filter(
      ([, states]) => states.at(-1)!.status !== 'read' || states.at(-1)!.events !== 4,
    );
    console.log(
      `[tracker-kill] ${N} messages, ${events.length} events; killed at ${kills.join(' and ')} state records; ${seen} state records in all (read_committed), ${perKey.size} messages; ${outcomes.seen} request outcomes for ${R} rejected requests; ${kept.seen} inbound-messages records for ${I} inbound messages delivered twice`,
    );
    expect(perKey.size).toBe(N);
    expect(wrongCount.slice(0, 3)).toEqual([]);
    expect(wrongFinal.slice(0, 3)).toEqual([]);
    expect(seen).toBe(4 * N);
  }, 240_000);
});
