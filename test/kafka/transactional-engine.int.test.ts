import { appendFileSync } from 'node:fs';
import { Writable } from 'node:stream';
import { AssignerProtocol } from 'kafkajs';
import { afterEach, describe, expect, it } from 'vitest';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { ensureTopics } from '../../src/kafka/topics.js';
import { createLogger } from '../../src/platform/logger.js';
import { partitionEnds, readChangelog, readChangelogPartition } from '../../src/kafka/changelog-reader.js';
import { checkCoPartitioned, planTasks } from '../../src/kafka/co-partition-assigner.js';
import { startTransactionalEngine } from '../../src/kafka/transactional-engine.js';
import {
  consumeRecords,
  createTopics,
  kafkaBrokers,
  produce,
  testKafka,
  uniqueTopic,
  withAdmin,
} from '../helpers/kafka.js';
import { countingProblems, startCountingEngine, type CountingEngineSettings } from './counting-engine-child.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

async function waitUntil(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: () => string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Two co-partitioned inputs and a compacted output, `partitions` each. */
async function countingSetup(partitions = 3): Promise<CountingEngineSettings> {
  const id = uniqueTopic('eng');
  const settings: CountingEngineSettings = {
    brokers: kafkaBrokers(),
    groupId: `${id}-group`,
    transactionalIdPrefix: `${id}-tx`,
    inputTopics: [`${id}-results`, `${id}-statuses`],
    outputTopic: `${id}-state`,
  };
  await withAdmin((admin) =>
    ensureTopics(admin, [
      ...settings.inputTopics.map((topic) => ({ topic, partitions, replicationFactor: 1 })),
      {
        topic: settings.outputTopic,
        partitions,
        replicationFactor: 1,
        configEntries: [{ name: 'cleanup.policy', value: 'compact' }],
      },
    ]),
  );
  return settings;
}

/** `n` records spread over both inputs and `keys` keys; values are unique (the output's `source`). */
async function produceInputs(
  settings: CountingEngineSettings,
  from: number,
  n: number,
  keys = 40,
): Promise<{ key: string; value: string }[]> {
  const inputs = Array.from({ length: n }, (_, j) => {
    const i = from + j;
    return { topic: settings.inputTopics[i % 2]!, key: `msg-${i % keys}`, value: `in-${i}` };
  });
  for (const topic of settings.inputTopics) {
    await produce(
      topic,
      inputs.filter((r) => r.topic === topic),
    );
  }
  return inputs;
}

function logSink(): { lines: string[]; logger: ReturnType<typeof createLogger> } {
  const lines: string[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString().split('\n').filter(Boolean));
      if (process.env.ENGINE_TEST_LOG) appendFileSync(process.env.ENGINE_TEST_LOG, chunk);
      done();
    },
  });
  return { lines, logger: createLogger({ level: process.env.ENGINE_TEST_LOG ? 'debug' : 'info', destination }) };
}

describe('co-partitioned assignment', () => {
  it('gives whole tasks, balanced, and keeps what members held', () => {
    const first = planTasks(6, [
      { memberId: 'a', previous: [] },
      { memberId: 'b', previous: [] },
    ]);
    expect([...first.values()].map((t) => t.length).sort()).toEqual([3, 3]);
    expect([...first.values()].flat().sort()).toEqual([0, 1, 2, 3, 4, 5]);
    // A third member joins: each of the two gives up exactly one task, nothing else moves.
    const second = planTasks(6, [
      { memberId: 'a', previous: first.get('a')! },
      { memberId: 'b', previous: first.get('b')! },
      { memberId: 'c', previous: [] },
    ]);
    expect(second.get('a')!.every((t) => first.get('a')!.includes(t))).toBe(true);
    expect(second.get('b')!.every((t) => first.get('b')!.includes(t))).toBe(true);
    expect([...second.values()].map((t) => t.length)).toEqual([2, 2, 2]);
    expect([...second.values()].flat().sort()).toEqual([0, 1, 2, 3, 4, 5]);
    // Conflicting or stale claims are ignored, more members than tasks leaves some idle.
    const third = planTasks(2, [
      { memberId: 'a', previous: [0, 1, 7] },
      { memberId: 'b', previous: [0] },
      { memberId: 'c', previous: [] },
    ]);
    expect([...third.values()].flat().sort()).toEqual([0, 1]);
    expect(Math.max(...[...third.values()].map((t) => t.length))).toBe(1);
  });

  it('refuses inputs whose partition counts differ, naming them', () => {
    expect(() =>
      checkCoPartitioned(
        new Map([
          ['send-results', 6],
          ['delivery_status', 3],
        ]),
      ),
    ).toThrow(/send-results: 6, delivery_status: 3/);
    expect(
      checkCoPartitioned(
        new Map([
          ['a', 4],
          ['b', 4],
        ]),
      ),
    ).toBe(4);
  });

  it('fails at start when the input topics are not co-partitioned', async () => {
    const a = uniqueTopic('cp-a');
    const b = uniqueTopic('cp-b');
    await createTopics([a], 3);
    await createTopics([b], 2);
    const start = startTransactionalEngine({
      kafka: testKafka(),
      groupId: uniqueTopic('g'),
      inputTopics: [a, b],
      transactionalIdPrefix: uniqueTopic('tx'),
      process: () => ({ outputs: [] }),
    });
    await expect(start).rejects.toThrow(new RegExp(`same number of partitions.*${a}: 3, ${b}: 2`));
    await expect(start).rejects.toSatisfy((e: unknown) => isMsgbridgeError(e, 'CONFIG_INVALID'));
  });
});

describe('changelog reader', () => {
  it('reads committed records only and ends on a trailing abort marker; the end is the high watermark, not the last stable offset', async () => {
    const topic = uniqueTopic('cl');
    await createTopics([topic], 2);
    const kafka = testKafka();
    const producer = kafka.producer({ transactionalId: `${topic}-tx`, idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    cleanups.push(() => producer.disconnect());
    const committed = await producer.transaction();
    await committed.send({
      topic,
      messages: [
        { key: 'k1', value: 'v1', partition: 0 },
        { key: 'k2', value: 'v2', partition: 0 },
      ],
    });
    await committed.commit();
    const aborted = await producer.transaction();
    await aborted.send({ topic, messages: [{ key: 'k1', value: 'ABORTED', partition: 0 }] });
    await aborted.abort();
    // Offsets 0, 1 committed, 2 marker, 3 aborted, 4 abort marker: the log ends with a marker.
    const read: string[] = [];
    const result = await readChangelogPartition({
      kafka,
      topic,
      partition: 0,
      timeoutMs: 15_000,
      onRecord: (r) => read.push(`${r.key}=${r.value}`),
    });
    expect(read).toEqual(['k1=v1', 'k2=v2']);
    // The abort marker may not be written yet when the read starts: then it ends before it.
    expect(result.ends.get(0)).toBeGreaterThanOrEqual(4);

    // Another producer's open transaction, and after it a committed record: the reader waits
    // for the open one to end instead of stopping at the last stable offset (2 records early).
    const other = kafka.producer({ transactionalId: `${topic}-other`, idempotent: true, maxInFlightRequests: 1 });
    await other.connect();
    cleanups.push(() => other.disconnect());
    const open = await other.transaction();
    await open.send({ topic, messages: [{ key: 'k3', value: 'v3', partition: 0 }] });
    const late = await producer.transaction();
    await late.send({ topic, messages: [{ key: 'k4', value: 'v4', partition: 0 }] });
    await late.commit();
    const stable = await withAdmin((admin) => admin.fetchTopicOffsets(topic));
    const ends = await partitionEnds(kafka, topic);
    expect(Number(stable.find((p) => p.partition === 0)!.high)).toBe(5); // kafkajs's admin: the last stable offset
    // the high watermark (7, or 8 once the commit marker is written)
    expect(ends.get(0)!.high).toBeGreaterThanOrEqual(7);
    const seen: string[] = [];
    const reading = readChangelog({
      kafka,
      topic,
      timeoutMs: 15_000,
      onRecord: (r) => seen.push(`${r.key}=${r.value}`),
    });
    await new Promise((r) => setTimeout(r, 1500));
    expect(seen).toEqual(['k1=v1', 'k2=v2']);
    await open.commit();
    await reading;
    expect(seen).toEqual(['k1=v1', 'k2=v2', 'k3=v3', 'k4=v4']);
  });

  it('gives up within its time bound with one clear line while a transaction stays open; filters by predicate', async () => {
    const topic = uniqueTopic('cl-open');
    await createTopics([topic], 3);
    const kafka = testKafka();
    await produce(topic, [
      { key: 'a:1', value: 'x', partition: 0 },
      { key: 'b:1', value: 'y', partition: 1 },
      { key: 'a:2', value: 'z', partition: 2 },
    ]);
    const kept: string[] = [];
    await readChangelog({
      kafka,
      topic,
      timeoutMs: 15_000,
      filter: (r) => r.key!.toString().startsWith('a:'),
      onRecord: (r) => kept.push(r.key!.toString()),
    });
    expect(kept.sort()).toEqual(['a:1', 'a:2']);

    const producer = kafka.producer({
      transactionalId: `${topic}-tx`,
      idempotent: true,
      maxInFlightRequests: 1,
      transactionTimeout: 60_000,
    });
    await producer.connect();
    cleanups.push(() => producer.disconnect());
    const open = await producer.transaction();
    cleanups.push(() => open.abort());
    await open.send({ topic, messages: [{ key: 'a:3', value: 'open', partition: 1 }] });
    const started = Date.now();
    const error = await readChangelog({ kafka, topic, timeoutMs: 2_000, onRecord: () => undefined }).catch(
      (e: unknown) => e,
    );
    expect(Date.now() - started).toBeLessThan(6_000);
    expect(isMsgbridgeError(error, 'KAFKA_UNAVAILABLE')).toBe(true);
    expect((error as Error).message).toMatch(
      /did not reach its end within 2000 ms \(partition 1 at 1 of 2\).*transaction open/,
    );
    expect((error as Error).message).not.toContain('\n');

    const absent = uniqueTopic('missing');
    const missing = await readChangelog({ kafka, topic: absent, timeoutMs: 5_000, onRecord: () => undefined }).catch(
      (e: unknown) => e,
    );
    expect(isMsgbridgeError(missing, 'KAFKA_UNAVAILABLE')).toBe(true);
    expect((missing as Error).message).toMatch(/^cannot read the offsets of topic missing-/);
    expect(await withAdmin((admin) => admin.listTopics())).not.toContain(absent);
  });
});

describe('transactional engine on real Kafka', () => {
  it('counting processor: exactly one output per input, counts without gaps or repeats, state restored after a restart', async () => {
    const settings = await countingSetup(3);
    const first = await produceInputs(settings, 0, 1200);
    const a = await startCountingEngine(settings);
    cleanups.push(() => a.engine.stop());
    await a.engine.ready;
    expect(a.engine.ownedTasks()).toEqual([0, 1, 2]);
    await waitUntil(
      () => a.engine.stats().recordsIn >= first.length,
      40_000,
      () => `all ${first.length} inputs processed (${a.engine.stats().recordsIn})`,
    );
    await a.engine.stop();

    // A restart: counts continue from the changelog, not from zero, and the input is not re-read.
    const second = await produceInputs(settings, 1200, 400);
    const b = await startCountingEngine(settings);
    cleanups.push(() => b.engine.stop());
    await b.engine.ready;
    await waitUntil(
      () => b.engine.stats().recordsIn >= second.length,
      30_000,
      () => `the new inputs processed (${b.engine.stats().recordsIn})`,
    );
    expect(b.engine.stats().recordsIn).toBe(second.length);
    expect(b.engine.stats().taskStarts).toBeGreaterThanOrEqual(3);

    const outputs = await consumeRecords(settings.outputTopic, first.length + second.length, {
      timeoutMs: 20_000,
      settleMs: 1000,
    });
    expect(countingProblems(outputs, [...first, ...second])).toEqual([]);
    const stats = a.engine.stats();
    console.log(
      `[engine] ${stats.recordsIn} records in ${stats.transactions} transactions; task start ${stats.lastTaskStartMs} ms`,
    );
  }, 90_000);

  it('two members: a second member takes whole tasks (the same partition of both inputs), results stay exact', async () => {
    const settings = await countingSetup(4);
    const { lines, logger } = logSink();
    const first = await produceInputs(settings, 0, 800);
    const a = await startCountingEngine(
      { ...settings, delayMs: 10 },
      { logger: logger.child({ member: 'a' }), rebalanceTimeoutMs: 10_000 },
    );
    cleanups.push(() => a.engine.stop());
    await a.engine.ready;
    await waitUntil(
      () => a.engine.stats().recordsIn >= 200,
      30_000,
      () => 'member a under way',
    );

    const b = await startCountingEngine(
      { ...settings, delayMs: 10 },
      { logger: logger.child({ member: 'b' }), rebalanceTimeoutMs: 10_000 },
    );
    cleanups.push(() => b.engine.stop());
    await b.engine.ready;
    await waitUntil(
      () => a.engine.ownedTasks().length === 2 && b.engine.ownedTasks().length === 2,
      30_000,
      () => `tasks split (a ${a.engine.ownedTasks()}, b ${b.engine.ownedTasks()})`,
    );
    expect([...a.engine.ownedTasks(), ...b.engine.ownedTasks()].sort()).toEqual([0, 1, 2, 3]);

    // What the group coordinator holds: each member has the same partitions of both inputs.
    const described = await withAdmin((admin) => admin.describeGroups([settings.groupId]));
    const members = described.groups[0]!.members;
    expect(members).toHaveLength(2);
    for (const m of members) {
      const { assignment } = AssignerProtocol.MemberAssignment.decode(m.memberAssignment)!;
      const [results, statuses] = settings.inputTopics.map((t) => [...(assignment[t] ?? [])].sort());
      expect(results).toEqual(statuses);
      expect(results).toHaveLength(2);
    }

    const second = await produceInputs(settings, 800, 800);
    const all = [...first, ...second];
    await waitUntil(
      () => a.engine.stats().recordsIn + b.engine.stats().recordsIn >= all.length,
      45_000,
      () => `all inputs processed (${a.engine.stats().recordsIn} + ${b.engine.stats().recordsIn})`,
    );
    const outputs = await consumeRecords(settings.outputTopic, all.length, { timeoutMs: 20_000, settleMs: 1000 });
    expect(countingProblems(outputs, all)).toEqual([]);
    // Both members did work after the split, and each batch came from the member that owned its task.
    expect(b.processed.length).toBeGreaterThan(0);
    for (const p of b.processed) expect(p.partition).toBe(p.task);
    expect(lines.some((l) => /"level":50/.test(l))).toBe(false);
  }, 120_000);

  it('a stalled member whose tasks moved cannot commit: its producer is fenced and it drops the task quietly', async () => {
    const settings = await countingSetup(2);
    const { lines, logger } = logSink();
    const first = await produceInputs(settings, 0, 300);
    const a = await startCountingEngine(settings, { logger: logger.child({ member: 'a' }), rebalanceTimeoutMs: 8_000 });
    cleanups.push(() => a.engine.stop());
    await a.engine.ready;
    await waitUntil(
      () => a.engine.stats().recordsIn >= first.length,
      30_000,
      () => 'first inputs processed by a',
    );

    // Hold a's next batch inside process(): no heartbeat, so the group drops it after its session.
    let held: (() => void) | undefined;
    const holding = new Promise<void>((resolve) => {
      a.gate.beforeProcess = async () => {
        a.gate.beforeProcess = undefined;
        resolve();
        await new Promise<void>((release) => (held = release));
      };
    });
    cleanups.push(async () => held?.());
    const second = await produceInputs(settings, 300, 100);
    await holding;
    const b = await startCountingEngine(settings, { logger: logger.child({ member: 'b' }), rebalanceTimeoutMs: 8_000 });
    cleanups.push(() => b.engine.stop());
    // b owns every task: it fenced a's producers when it started them.
    await waitUntil(
      () => b.engine.ownedTasks().length === 2,
      40_000,
      () => `b owns both tasks (${b.engine.ownedTasks()})`,
    );
    // a may have committed part of the second wave before it stalled; b does the rest, held batch included.
    await waitUntil(
      () => a.engine.stats().recordsIn + b.engine.stats().recordsIn >= first.length + second.length,
      30_000,
      () => `b processed the rest (${a.engine.stats().recordsIn} + ${b.engine.stats().recordsIn})`,
    );
    held!();
    await waitUntil(
      () => a.engine.stats().fenced >= 1,
      20_000,
      () => 'a fenced',
    );
    const fencedLines = lines.filter((l) => l.includes('task fenced'));
    expect(fencedLines.length).toBeGreaterThanOrEqual(1);
    expect(JSON.parse(fencedLines[0]!)).toMatchObject({ level: 30, member: 'a' });
    expect(lines.filter((l) => /"level":50/.test(l))).toEqual([]);

    // a rejoins and takes its share back (fencing b in turn); everything stays exact.
    const third = await produceInputs(settings, 400, 300);
    const all = [...first, ...second, ...third];
    await waitUntil(
      () => a.engine.stats().recordsIn + b.engine.stats().recordsIn >= all.length,
      60_000,
      () => `all processed (${a.engine.stats().recordsIn} + ${b.engine.stats().recordsIn})`,
    );
    const outputs = await consumeRecords(settings.outputTopic, all.length, { timeoutMs: 20_000, settleMs: 1500 });
    expect(countingProblems(outputs, all)).toEqual([]);
  }, 150_000);
});
