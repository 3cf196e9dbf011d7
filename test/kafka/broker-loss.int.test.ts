import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mkdtempSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Kafka, logLevel, type Admin } from 'kafkajs';
import { loadConfig } from '../../src/config/load.js';
import { startLocalCluster, type LocalCluster, type LocalNode } from '../../src/local-kafka/local-broker.js';
import { createLogger } from '../../src/platform/logger.js';
import { startSender, type Sender } from '../../src/sender/index.js';
import { startSimulator, type RunningSimulator as Simulator } from '../../src/simulator/index.js';
import { startTracker, type Tracker } from '../../src/tracker/index.js';
import { messageLifeRecords, TEST_ACCESS_TOKENS } from '../tracker/harness.js';
import { groupCoordinator, testKafka, uniqueTopic } from '../helpers/kafka.js';
import { partitionEnds, readChangelogPartition } from '../../src/kafka/changelog-reader.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';

/**
 * Two live senders and one broker of three killed (-9) or frozen (SIGSTOP): neither member
 * crashes, restarts or rejoins, the group never rebalances, and every request is sent exactly
 * once (the provider counts the messages it created). src/kafka/README.md, "Losing a broker".
 */
describe('one broker of three lost under two live senders', () => {
  let cluster: LocalCluster;
  let admin: Admin;
  let simulator: Simulator;

  /**
   * A client for writing a test's records: a topic just created may be unknown for a moment to a
   * broker just restarted (UNKNOWN_TOPIC_OR_PARTITION); a client asked to give up soon (the code
   * under test) must not fail the set-up for it.
   */
  const writer = () => testKafka('broker-loss-writer', cluster.bootstrap.split(','), { retries: 10 });

  /** Every broker up again, then a new topic of one partition on all three. */
  const onePartitionTopic = async (prefix: string, configEntries: { name: string; value: string }[] = []) => {
    await Promise.all(cluster.nodes.filter((n) => !n.alive).map((n) => n.start()));
    await untilBrokers(3);
    const topic = uniqueTopic(prefix);
    await admin.createTopics({
      topics: [{ topic, numPartitions: 1, replicationFactor: 3, configEntries }],
      waitForLeaders: false,
    });
    return topic;
  };

  /** The node leading partition 0 of `topic`. */
  const leaderOf = async (topic: string) => {
    const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
    return cluster.nodes.find((n) => n.id === metadata.topics[0]!.partitions[0]!.leader)!;
  };

  const untilBrokers = async (n: number) => {
    const deadline = Date.now() + 90_000;
    for (;;) {
      const count = await admin
        .describeCluster()
        .then((c) => c.brokers.length)
        .catch(() => -1);
      if (count === n) return;
      if (Date.now() > deadline) throw new Error(`the cluster counts ${count} brokers, not ${n}`);
      await new Promise((r) => setTimeout(r, 250));
    }
  };

  beforeAll(async () => {
    cluster = await startLocalCluster({ nodes: 3, heapMb: 320, partitions: 3 });
    admin = new Kafka({
      clientId: 'broker-loss-test',
      brokers: cluster.bootstrap.split(','),
      logLevel: logLevel.NOTHING,
      retry: { retries: 10 },
    }).admin();
    await admin.connect();
    simulator = await startSimulator({
      host: '127.0.0.1',
      port: 0,
      businesses: [{ id: 'biz_1', apiKey: 'key-1', signingSecret: 's' }],
      history: { sends: 50_000 },
    });
  }, 240_000);
  afterAll(async () => {
    await simulator?.close();
    await admin?.disconnect().catch(() => undefined);
    await cluster?.stop();
  });

  /**
   * Runs N requests through two rate-limited senders, applies `fault` to the broker `pick` names
   * once a fifth are done, and answers what the members logged and what the provider saw.
   */
  async function run(
    pick: (coordinator: number, leaders: number[]) => number,
    fault: (node: LocalNode) => Promise<void>,
  ) {
    await Promise.all(cluster.nodes.filter((n) => !n.alive).map((n) => n.start()));
    await untilBrokers(3);
    const id = randomUUID().slice(0, 8);
    const config = loadConfig({
      env: {
        KAFKA_BROKERS: cluster.bootstrap,
        MSGBRIDGE_BUSINESS_ID: 'biz_1',
        MSGBRIDGE_API_KEY: 'key-1',
        MSGBRIDGE_PROVIDER_URL: simulator.url,
        MSGBRIDGE__kafka__topics__sendRequests: `bl-req-${id}`,
        MSGBRIDGE__kafka__topics__sendResults: `bl-res-${id}`,
        MSGBRIDGE__kafka__topics__sendRequestsDlq: `bl-rdlq-${id}`,
        MSGBRIDGE__kafka__topics__sendLedger: `bl-ledger-${id}`,
        MSGBRIDGE__kafka__partitions: '6',
        MSGBRIDGE__kafka__replicationFactor: '3',
        MSGBRIDGE__sender__groupId: `bl-sender-${id}`,
        MSGBRIDGE__sender__ratePerSecond: '60',
      },
    });
    const lines: { t: number; line: Record<string, unknown> }[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const text of chunk.toString().split('\n').filter(Boolean))
          lines.push({ t: Date.now(), line: JSON.parse(text) as Record<string, unknown> });
        done();
      },
    });
    const logger = createLogger({ level: 'info', name: 'sender', destination });
    const before = simulator.sends().length;
    const senders: Sender[] = [];
    // Each member its own state directory, as on its own machine (one process must not open an LMDB environment twice).
    for (const member of ['A', 'B']) {
      const stateDir = mkdtempSync(join(tmpdir(), `msgbridge-bl-sender-${member}-`));
      const own = { ...config, sender: { ...config.sender, stateDir } };
      senders.push(await startSender({ config: own, admin: false, logger: logger.child({ member }) }));
    }
    const N = 2400;
    try {
      await Promise.all(senders.map((s) => s.ready));
      const kafka = new Kafka({
        clientId: 'broker-loss-producer',
        brokers: cluster.bootstrap.split(','),
        logLevel: logLevel.NOTHING,
        retry: { retries: 10 },
      });
      const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      for (let i = 0; i < N; i += 400) {
        await producer.send({
          topic: config.kafka.topics.sendRequests,
          acks: -1,
          messages: Array.from({ length: 400 }, (_, k) => {
            const n = i + k;
            const to = `+1555${String(4_000_000 + (n % 300)).padStart(7, '0')}`;
            return {
              key: to,
              value: JSON.stringify({
                requestId: `bl-${id}-${n}`,
                type: 'template',
                number: to,
                templateName: 'order_update',
                parameters: [{ name: 'n', value: `${id}-${n}` }],
              }),
            };
          }),
        });
      }
      await producer.disconnect();
      const calls = () =>
        simulator
          .sends()
          .slice(before)
          .filter((s) => s.messageId !== null && JSON.stringify(s.body).includes(`"${id}-`));
      while (calls().length < N / 5) await new Promise((r) => setTimeout(r, 100));
      const metadata = await admin.fetchTopicMetadata({ topics: [config.kafka.topics.sendRequests] });
      const coordinator = await groupCoordinator(admin, config.sender.groupId);
      const victim = cluster.nodes.find(
        (n) =>
          n.id ===
          pick(
            coordinator,
            metadata.topics[0]!.partitions.map((p) => p.leader),
          ),
      )!;
      const faultAt = Date.now();
      await fault(victim);
      const deadline = Date.now() + 150_000;
      const distinct = () => new Set(calls().map((s) => JSON.stringify(s.body))).size;
      while (distinct() < N && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
      await new Promise((r) => setTimeout(r, 2000));
      const perRequest = new Map<string, number>();
      for (const s of calls()) {
        const n = String((s.body as { parameters: { value: string }[] }).parameters[0]!.value);
        perRequest.set(n, (perRequest.get(n) ?? 0) + 1);
      }
      const after = lines.filter((l) => l.t >= faultAt).map((l) => l.line);
      const summary = new Map<string, number>();
      for (const l of after)
        summary.set(
          `${String(l.level)} ${String(l.msg).slice(0, 120)}`,
          (summary.get(`${String(l.level)} ${String(l.msg).slice(0, 120)}`) ?? 0) + 1,
        );
      console.log(
        `[broker-loss] ${perRequest.size}/${N} requests called, ${[...perRequest.values()].filter((c) => c > 1).length} twice; log after the fault:\n${[...summary].map(([k, v]) => `  ${v} x ${k}`).join('\n')}`,
      );
      return { perRequest, after, N };
    } finally {
      await Promise.all(senders.map((s) => s.drain()));
    }
  }

  function expectRiddenOut({ perRequest, after, N }: Awaited<ReturnType<typeof run>>) {
    expect(perRequest.size).toBe(N);
    expect([...perRequest.values()].filter((c) => c > 1)).toEqual([]);
    // No rebalance, no crash, no new membership: the members kept their partitions.
    expect(
      after.filter((l) => /joined the consumer group|crashed|stopped for good|rebalancing/.test(String(l.msg))),
    ).toEqual([]);
    // A dead broker is one warning per member and broker, not an error per retry.
    const kafkaErrors = after.filter((l) => l.library === 'kafkajs' && Number(l.level) >= 50);
    expect(kafkaErrors).toEqual([]);
  }

  it('kill -9 of the group coordinator: no crash, no rebalance, each request sent once', async () => {
    const outcome = await run(
      (coordinator) => coordinator,
      async (node) => void process.kill(node.pid, 'SIGKILL'),
    );
    expectRiddenOut(outcome);
  }, 300_000);

  it('a partition leader frozen 15 s (SIGSTOP): no crash, no rebalance, each request sent once', async () => {
    let frozen: LocalNode | undefined;
    try {
      const outcome = await run(
        (coordinator, leaders) => leaders.find((l) => l !== coordinator) ?? leaders[0]!,
        async (node) => {
          frozen = node;
          process.kill(node.pid, 'SIGSTOP');
          setTimeout(() => process.kill(node.pid, 'SIGCONT'), 15_000).unref();
        },
      );
      expectRiddenOut(outcome);
    } finally {
      if (frozen) process.kill(frozen.pid, 'SIGCONT');
    }
  }, 300_000);

  it('two trackers, the leader of most partitions killed (-9): no crash, no rebalance, every state exact', async () => {
    await Promise.all(cluster.nodes.filter((n) => !n.alive).map((n) => n.start()));
    await untilBrokers(3);
    const id = randomUUID().slice(0, 8);
    const config = loadConfig({
      env: {
        KAFKA_BROKERS: cluster.bootstrap,
        MSGBRIDGE__kafka__topics__sendResults: `blt-results-${id}`,
        MSGBRIDGE__kafka__topics__deliveryStatus: `blt-status-${id}`,
        MSGBRIDGE__kafka__topics__messages: `blt-messages-${id}`,
        MSGBRIDGE__kafka__topics__messageState: `blt-state-${id}`,
        MSGBRIDGE__kafka__topics__conversations: `blt-conv-${id}`,
        MSGBRIDGE__kafka__topics__requestOutcomes: `blt-outcomes-${id}`,
        MSGBRIDGE__kafka__partitions: '6',
        MSGBRIDGE__kafka__replicationFactor: '3',
        MSGBRIDGE__tracker__groupId: `blt-group-${id}`,
        MSGBRIDGE__tracker__transactionalIdPrefix: `blt-tx-${id}`,
        MSGBRIDGE__tracker__sessionTimeoutMs: '6000',
        MSGBRIDGE__tracker__accessTokens: JSON.stringify(TEST_ACCESS_TOKENS),
      },
    });
    const lines: { t: number; line: Record<string, unknown> }[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const text of chunk.toString().split('\n').filter(Boolean))
          lines.push({ t: Date.now(), line: JSON.parse(text) as Record<string, unknown> });
        done();
      },
    });
    const logger = createLogger({ level: 'info', name: 'tracker', destination });
    const trackers: Tracker[] = [];
    const N = 1200;
    const kafka = new Kafka({
      clientId: 'broker-loss-tracker',
      brokers: cluster.bootstrap.split(','),
      logLevel: logLevel.NOTHING,
      retry: { retries: 10 },
    });
    try {
      for (const member of ['A', 'B']) {
        const stateDir = mkdtempSync(join(tmpdir(), `msgbridge-blt-${member}-`));
        trackers.push(
          await startTracker({
            config: { ...config, tracker: { ...config.tracker, stateDir } },
            http: false,
            admin: false,
            logger: logger.child({ member }),
          }),
        );
      }
      // The inputs at a steady pace, through a producer replaced when it fails (as any producer must be).
      let producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await producer.connect();
      let faultAt = 0;
      for (let i = 0; i < N; i += 40) {
        const records = Array.from({ length: 40 }, (_, k) =>
          messageLifeRecords(`blt-r-${id}-${i + k}`, `blt-m-${id}-${i + k}`),
        ).flat();
        for (;;) {
          try {
            await producer.send({
              topic: config.kafka.topics.sendResults,
              acks: -1,
              messages: records.filter((r) => r.topic === 'results'),
            });
            await producer.send({
              topic: config.kafka.topics.deliveryStatus,
              acks: -1,
              messages: records.filter((r) => r.topic === 'status'),
            });
            break;
          } catch {
            await producer.disconnect().catch(() => undefined);
            producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
            await producer.connect().catch(() => undefined);
          }
        }
        if (i === 400) {
          const metadata = await admin.fetchTopicMetadata({ topics: [config.kafka.topics.messageState] });
          const leaders = metadata.topics[0]!.partitions.map((p) => p.leader);
          const counts = new Map<number, number>();
          for (const l of leaders) counts.set(l, (counts.get(l) ?? 0) + 1);
          const victim = cluster.nodes.find((n) => n.id === [...counts].sort((a, b) => b[1] - a[1])[0]![0])!;
          faultAt = Date.now();
          process.kill(victim.pid, 'SIGKILL');
        }
        await new Promise((r) => setTimeout(r, 100));
      }
      await producer.disconnect();
      // Every message's one state, read, in message-state (read_committed).
      const reader = kafka.consumer({
        groupId: `blt-read-${randomUUID()}`,
        maxWaitTimeInMs: 100,
        readUncommitted: false,
      });
      const latest = new Map<string, { status: string }>();
      await reader.connect();
      await reader.subscribe({ topics: [config.kafka.topics.messageState], fromBeginning: true });
      await reader.run({
        eachMessage: async ({ message }) =>
          void latest.set(message.key!.toString(), JSON.parse(message.value!.toString()) as { status: string }),
      });
      const deadline = Date.now() + 150_000;
      while ([...latest.values()].filter((v) => v.status === 'read').length < N && Date.now() < deadline)
        await new Promise((r) => setTimeout(r, 250));
      await reader.disconnect();
      const after = lines.filter((l) => l.t >= faultAt).map((l) => l.line);
      const summary = new Map<string, number>();
      for (const l of after)
        summary.set(
          `${String(l.level)} ${String(l.msg).slice(0, 120)}`,
          (summary.get(`${String(l.level)} ${String(l.msg).slice(0, 120)}`) ?? 0) + 1,
        );
      console.log(
        `[broker-loss] trackers: ${[...latest.values()].filter((v) => v.status === 'read').length}/${N} states read; log after the fault:\n${[...summary].map(([k, v]) => `  ${v} x ${k}`).join('\n')}`,
      );
      expect(latest.size).toBe(N);
      expect([...latest.values()].filter((v) => v.status !== 'read')).toEqual([]);
      expect(
        after.filter((l) => /joined the consumer group|crashed|stopped for good|rebalancing/.test(String(l.msg))),
      ).toEqual([]);
      expect(after.filter((l) => l.library === 'kafkajs' && Number(l.level) >= 50)).toEqual([]);
    } finally {
      await Promise.all(trackers.map((t) => t.drain()));
    }
  }, 300_000);

  it("a partition's ends are read through its leader's kill -9: asked again until a new leader answers", async () => {
    await Promise.all(cluster.nodes.filter((n) => !n.alive).map((n) => n.start()));
    await untilBrokers(3);
    const topic = uniqueTopic('bl-ends');
    await admin.createTopics({ topics: [{ topic, numPartitions: 3, replicationFactor: 3 }], waitForLeaders: false });
    const kafka = testKafka('broker-loss-ends', cluster.bootstrap.split(','), { retries: 2 });
    const producer = writer().producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    for (const partition of [0, 1, 2])
      await producer.send({
        topic,
        acks: -1,
        messages: Array.from({ length: 5 * (partition + 1) }, (_, i) => ({ partition, value: `r${i}` })),
      });
    await producer.disconnect();
    const written = new Map([0, 1, 2].map((p) => [p, { low: 0, high: 5 * (p + 1) }]));
    expect(await partitionEnds(kafka, topic)).toEqual(written);

    const metadata = await admin.fetchTopicMetadata({ topics: [topic] });
    const leader = metadata.topics[0]!.partitions.find((p) => p.partitionId === 0)!.leader;
    process.kill(cluster.nodes.find((n) => n.id === leader)!.pid, 'SIGKILL');
    // Asked once, the metadata still names the dead leader: the fault is real.
    const once = await partitionEnds(kafka, topic, { leaderWaitMs: 0 }).then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(isMsgbridgeError(once, 'KAFKA_UNAVAILABLE')).toBe(true);
    expect((once as Error).message).toMatch(new RegExp(`^cannot read the offsets of topic ${topic}: `));
    // Asked again with fresh metadata, it answers once a new leader is elected.
    const started = Date.now();
    expect(await partitionEnds(kafka, topic)).toEqual(written);
    console.log(`[broker-loss] ends read ${Date.now() - started} ms after the leader's kill -9`);
  }, 120_000);
  it("a changelog read follows its partition's leader through a kill -9: each committed record once, in order, no group", async () => {
    const topic = await onePartitionTopic('bl-read', [{ name: 'min.insync.replicas', value: '2' }]);
    const kafka = testKafka('broker-loss-read', cluster.bootstrap.split(','), { retries: 2 });
    const value = 'v'.repeat(200);
    const records = (from: number, count: number) =>
      Array.from({ length: count }, (_, i) => ({ partition: 0, key: `k${from + i}`, value }));
    const producer = writer().producer({ idempotent: true, maxInFlightRequests: 1 });
    const transactional = writer().producer({
      transactionalId: `${topic}-tx`,
      idempotent: true,
      maxInFlightRequests: 1,
    });
    await Promise.all([producer.connect(), transactional.connect()]);
    // Committed records, an aborted transaction's (kafkajs filters them out of the fetched bytes), committed again.
    // Record batches of 10 (about 2.3 KB): a 16 KiB fetch holds 7 whole ones and cuts the 8th short.
    for (let from = 0; from < 3000; from += 10) await producer.send({ topic, acks: -1, messages: records(from, 10) });
    const aborted = await transactional.transaction();
    await aborted.send({ topic, acks: -1, messages: records(100_000, 500) });
    await aborted.abort();
    for (let from = 3000; from < 6000; from += 10)
      await producer.send({ topic, acks: -1, messages: records(from, 10) });
    await Promise.all([producer.disconnect(), transactional.disconnect()]);
    const groupsBefore = new Set((await admin.listGroups()).groups.map((g) => g.groupId));

    const leader = await leaderOf(topic);
    const keys: string[] = [];
    let killedAt = 0;
    // Small fetches (about 70 records), so that the leader dies with most of the log still to read.
    const result = await readChangelogPartition({
      kafka,
      topic,
      partition: 0,
      timeoutMs: 90_000,
      maxBytesPerPartition: 16_384,
      onRecord: (r) => {
        keys.push(r.key!.toString());
        if (keys.length === 1000) {
          process.kill(leader.pid, 'SIGKILL');
          killedAt = Date.now();
        }
      },
    });
    expect(killedAt).toBeGreaterThan(0);
    expect(keys).toEqual(Array.from({ length: 6000 }, (_, i) => `k${i}`));
    expect(result.delivered).toBe(6000);
    // No consumer group: the broker holds nothing, and a new group's first join delay never applies.
    expect((await admin.listGroups()).groups.filter((g) => !groupsBefore.has(g.groupId))).toEqual([]);
    console.log(`[broker-loss] changelog read finished ${Date.now() - killedAt} ms after its leader's kill -9`);
  }, 180_000);
  it('a read whose leader is frozen (SIGSTOP) ends at its cancel, not at the request timeout', async () => {
    const topic = await onePartitionTopic('bl-frozen-read');
    const kafka = new Kafka({
      clientId: 'broker-loss-frozen-read',
      brokers: cluster.bootstrap.split(','),
      logLevel: logLevel.NOTHING,
      requestTimeout: 30_000,
      retry: { retries: 2 },
    });
    const producer = writer().producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    await producer.send({ topic, acks: -1, messages: [{ partition: 0, key: 'k', value: 'v' }] });
    await producer.disconnect();
    const leader = await leaderOf(topic);
    process.kill(leader.pid, 'SIGSTOP');
    try {
      const cancel = new AbortController();
      const reading = readChangelogPartition({
        kafka,
        topic,
        partition: 0,
        timeoutMs: 120_000,
        signal: cancel.signal,
        onRecord: () => undefined,
      }).then(
        () => 'read to its end',
        (error: unknown) => error,
      );
      await new Promise((resolve) => setTimeout(resolve, 3000));
      const cancelledAt = Date.now();
      cancel.abort();
      expect(await reading).toMatchObject({ code: 'SHUTTING_DOWN' });
      // A request to the frozen leader is still out: it would answer only at the 30 s request timeout.
      expect(Date.now() - cancelledAt).toBeLessThan(5000);
    } finally {
      process.kill(leader.pid, 'SIGCONT');
    }
  }, 120_000);
});
