// Tracker benchmark (issue 12):
//   - state updates/s of the tracker role end to end on the local broker: M messages, each an
//     accepted result and three statuses (4·M input events) preloaded; a tracker (this process,
//     one core) is started and timed until message-state holds all 4·M changes (transactions,
//     read_committed), for --batch records per transaction;
//   - the same state machine without Kafka (TrackerLogic.process), events/s on one core;
//   - restore: a second tracker group rebuilds its state from message-state (M states) — time,
//     and per million states by proportion;
//   - memory per cached message state (heap growth for 100,000 states in the cache, after gc).
//
//   node --expose-gc --import tsx bench/tracker.ts [--messages 50000] [--batch 500,2000]
// KAFKA_BROKERS=host:port uses an existing Kafka; otherwise the embedded local broker starts.
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { loadConfig } from '../src/config/load.js';
import { startLocalBroker, type LocalBroker } from '../src/local-kafka/local-broker.js';
import { ensureTopics } from '../src/kafka/topics.js';
import type { ConsumedRecord } from '../src/kafka/group-consumer.js';
import { startTracker } from '../src/tracker/index.js';
import { TrackerLogic } from '../src/tracker/tracker-logic.js';
import { TaskStore } from '../src/tracker/state-store.js';
import { messageStateCache } from '../src/tracker/state-cache.js';
import { applyEvent } from '../src/tracker/state-rules.js';
import { messageId } from '../test/ingress/fixtures.js';
import { messageLifeRecords, type LifeRecord } from '../test/tracker/harness.js';
import { benchArgs } from './args.js';

const args = benchArgs(import.meta.url, {
  messages: { type: 'string', default: '50000' },
  batch: { type: 'string', default: '500,2000' },
});
const M = args.wholeNumber('messages', 1);
const BATCHES = args.wholeNumbers('batch');
const PARTITIONS = 6;

let local: LocalBroker | undefined;
const brokers = process.env.KAFKA_BROKERS
  ? process.env.KAFKA_BROKERS.split(',')
  : [(local = await startLocalBroker({ heapMb: 768, partitions: PARTITIONS })).bootstrap];
const kafka = new Kafka({ clientId: 'bench-tracker', brokers, logLevel: logLevel.NOTHING });
const admin = kafka.admin();
await admin.connect();

type Event = LifeRecord;
function events(count: number): Event[] {
  return Array.from({ length: count }, (_, i) => messageLifeRecords(`req-${i}`, messageId())).flat();
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const sumOffsets = async (topic: string) =>
  (await admin.fetchTopicOffsets(topic)).reduce((n, p) => n + Number(p.offset), 0);
const rows: string[] = [];

// 0. Memory per cached state (first: nothing else allocated yet).
{
  const gc = (globalThis as { gc?: () => void }).gc;
  if (gc) {
    const now = new Date();
    const sample = events(100_000).filter((e) => e.topic === 'results');
    let cache: ReturnType<typeof messageStateCache> | undefined = messageStateCache(1_000_000);
    for (const e of sample) {
      const r = JSON.parse(e.value) as { messageId: string; requestId: string; acceptedAt: string };
      const { state } = applyEvent(
        undefined,
        {
          kind: 'result',
          eventId: e.headers['event-id']!,
          result: {
            requestId: r.requestId,
            businessId: 'biz_1',
            messageId: r.messageId,
            type: 'text',
            recipient: '+15550002222',
            acceptedAt: r.acceptedAt,
          },
        },
        now,
      );
      cache.set(r.messageId, state);
    }
    const size = cache.size;
    gc();
    const withCache = process.memoryUsage().heapUsed;
    // What the cache alone holds: the heap it gives back when dropped.
    cache = undefined;
    gc();
    const perState = (withCache - process.memoryUsage().heapUsed) / size;
    rows.push(
      `| memory per cached message state (accepted, one event id; request-id index included) | ${Math.round(perState)} bytes | heap released by dropping ${size.toLocaleString('en')} cached states, after gc |`,
    );
  } else rows.push('| memory per cached message state | (run with node --expose-gc) | |');
}

// 1. The state machine alone.
{
  const input = events(20_000);
  const logic = new TrackerLogic({
    topics: {
      sendResults: 'r',
      deliveryStatus: 's',
      messages: 'm',
      messageState: 'ms',
      conversations: 'c',
      requestOutcomes: 'ro',
      inboundMessages: 'im',
    },
    partitions: 1,
    maxCachedMessages: 1_000_000,
    maxCachedConversations: 1000,
    counters: { event() {}, skipped() {}, evicted() {} },
  });
  const rates: number[] = [];
  for (let round = 0; round < 3; round++) {
    const store = TaskStore.open(mkdtempSync(join(tmpdir(), 'bench-store-')), {
      clusterId: 'bench',
      task: 0,
      partitions: 1,
      messageStateTopic: 'ms',
      conversationsTopic: 'c',
      requestOutcomesTopic: 'ro',
      inboundMessagesTopic: 'im',
    });
    logic.startTask(0, store);
    const records: ConsumedRecord[] = input.map((e, i) => ({
      topic: e.topic === 'results' ? 'r' : 's',
      partition: 0,
      offset: String(i),
      timestamp: '0',
      key: Buffer.from(e.key),
      value: Buffer.from(e.value),
      headers: e.headers,
    }));
    const started = performance.now();
    for (let i = 0; i < records.length; i += 500)
      logic.process(0, logic.decodeBatch(records.slice(i, i + 500))).commit?.(new Map());
    await store.flushed();
    rates.push(records.length / ((performance.now() - started) / 1000));
    await store.close();
  }
  rows.push(
    `| state machine alone (parse, apply, serialise; no Kafka) | ${Math.round(median(rates)).toLocaleString('en')} events/s | median of 3 × 80,000 events |`,
  );
}

// 2. End to end, per batch size.
const input = events(M);
for (const batch of BATCHES) {
  const id = randomUUID().slice(0, 8);
  const t = {
    results: `bt-results-${id}`,
    status: `bt-status-${id}`,
    messages: `bt-messages-${id}`,
    state: `bt-state-${id}`,
    conv: `bt-conv-${id}`,
  };
  await ensureTopics(
    admin,
    [t.results, t.status, t.messages].map((topic) => ({ topic, partitions: PARTITIONS, replicationFactor: 1 })),
  );
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  for (let i = 0; i < input.length; i += 5000) {
    const chunk = input.slice(i, i + 5000);
    await producer.sendBatch({
      acks: -1,
      topicMessages: [
        { topic: t.results, messages: chunk.filter((e) => e.topic === 'results') },
        { topic: t.status, messages: chunk.filter((e) => e.topic === 'status') },
      ],
    });
  }
  await producer.disconnect();
  const config = loadConfig({
    env: {
      KAFKA_BROKERS: brokers.join(','),
      MSGBRIDGE__kafka__topics__sendResults: t.results,
      MSGBRIDGE__kafka__topics__deliveryStatus: t.status,
      MSGBRIDGE__kafka__topics__messages: t.messages,
      MSGBRIDGE__kafka__topics__messageState: t.state,
      MSGBRIDGE__kafka__topics__conversations: t.conv,
      MSGBRIDGE__kafka__partitions: String(PARTITIONS),
      MSGBRIDGE__kafka__replicationFactor: '1',
      MSGBRIDGE__tracker__groupId: `bt-${id}`,
      MSGBRIDGE__tracker__transactionalIdPrefix: `bt-${id}`,
      MSGBRIDGE__tracker__maxBatchRecords: String(batch),
      MSGBRIDGE__tracker__maxCachedMessages: String(M),
    },
  });
  const cpuBefore = process.cpuUsage();
  const started = performance.now();
  const tracker = await startTracker({ config, http: false, admin: false });
  await tracker.ready;
  // Committed offsets of the outputs: one record per change plus one marker per transaction.
  while ((await sumOffsets(t.state)) < 4 * M) await new Promise((r) => setTimeout(r, 200));
  const seconds = (performance.now() - started) / 1000;
  const cpu = process.cpuUsage(cpuBefore);
  const cpuUs = (cpu.user + cpu.system) / (4 * M);
  await tracker.drain();
  rows.push(
    `| end to end, ${batch} records per transaction | ${Math.round((4 * M) / seconds).toLocaleString('en')} events/s | ${(4 * M).toLocaleString('en')} events in ${seconds.toFixed(1)} s, ${cpuUs.toFixed(0)} µs CPU/event in this process |`,
  );

  if (batch === BATCHES[0]) {
    // 3. Restore: a new group (new transactional ids) rebuilds every task from message-state.
    const restoreConfig = {
      ...config,
      tracker: { ...config.tracker, groupId: `bt-restore-${id}`, transactionalIdPrefix: `bt-restore-${id}` },
    };
    const restoreStarted = performance.now();
    const second = await startTracker({ config: restoreConfig, http: false, admin: false });
    await second.ready;
    const restoreSeconds = (performance.now() - restoreStarted) / 1000;
    const states = await sumOffsets(t.state);
    await second.drain();
    rows.push(
      `| restore of ${M.toLocaleString('en')} message states (${states.toLocaleString('en')} records before compaction), ${PARTITIONS} tasks | ${restoreSeconds.toFixed(1)} s | ≈ ${((restoreSeconds * 1_000_000) / states).toFixed(0)} s per million records read |`,
    );
  }
}

await admin.disconnect();
await local?.stop();
console.log(`\n| measure | result | detail |\n|---|---|---|\n${rows.join('\n')}`);
process.exit(0);
