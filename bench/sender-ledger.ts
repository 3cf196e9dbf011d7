// The sender's request ledger (src/sender/README.md "Sent once"): how fast a member that takes a
// partition restores its memory from `send-ledger`, and how long a restart with it on disk takes.
//   1. --entries requests are recorded in one partition of a fresh ledger topic as the sender
//      records them: for every --batch requests, a batch record of their `calling` records (the
//      calls a member starts in one turn), then one of their `done` records (results of about 330
//      bytes, the outcomes of calls answered in one turn).
//   2. bulk: RequestLedger.assign on an empty directory (a new member): entries (requests
//      remembered) and records restored per second, end to end from the call to the ledger being
//      ready.
//   3. restart: the same directory closed, opened again and caught up (delta from its checkpoint),
//      after --delta more requests were recorded meanwhile: milliseconds to ready.
//   4. restart after a kill -9: --delta more requests recorded, a child process (this script,
//      BENCH_LEDGER_CHILD set) catches the directory up, says it is ready and is killed with
//      SIGKILL: no close saved the index of minutes; then milliseconds to ready again.
// Each round on a fresh topic and directory; medians of the rounds.
// --ids random (the default) gives requests random UUIDs, as `msgbridge send` and most producers
// make them: the store's writes land all over its key space. --ids ordered numbers them
// (`req-0`, `req-1`…), which a store keyed by request id writes almost in order.
// --rate is the requests a second the ledger was written at: their times spread over the
// --entries / --rate seconds before the round (1,000,000 at 100/s: 2.8 hours), as a ledger
// written over hours has them, not all in the same millisecond.
//
//   npx tsx bench/sender-ledger.ts [--entries 1000000] [--batch 20] [--delta 1000] [--rounds 3]
//                                  [--ids random|ordered] [--rate 100] [--group-delay-ms 3000]
// KAFKA_BROKERS=host:port uses an existing Kafka; otherwise the embedded local broker starts, with
// Kafka's default `group.initial.rebalance.delay.ms` of 3000 (--group-delay-ms), as a production
// broker has it: a restore that joined a consumer group waited that long.
// The bulk restore's CPU (this process: user and system) is printed per entry; BENCH_PROFILE=<file>
// writes a CPU profile of the main thread over the first round's bulk restore.
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { Kafka, logLevel } from 'kafkajs';
import { ChangelogRestorer } from '../src/kafka/changelog-restore.js';
import { withKafkajsAdmin } from '../src/kafka/client.js';
import { startLocalBroker, type LocalBroker } from '../src/local-kafka/local-broker.js';
import { ensureTopics } from '../src/kafka/topics.js';
import { silentLogger } from '../src/platform/logger.js';
import { batchKey, encodeBatch, ledgerKey, type BatchedRecord } from '../src/sender/ledger-records.js';
import { RequestLedger } from '../src/sender/request-ledger.js';
import { benchArgs } from './args.js';

const args = benchArgs(import.meta.url, {
  entries: { type: 'string', default: '1000000' },
  batch: { type: 'string', default: '20' },
  delta: { type: 'string', default: '1000' },
  rounds: { type: 'string', default: '3' },
  ids: { type: 'string', default: 'random' },
  rate: { type: 'string', default: '100' },
  'group-delay-ms': { type: 'string', default: '3000' },
});
const ENTRIES = args.wholeNumber('entries', 1);
const BATCH = args.wholeNumber('batch', 1);
const DELTA = args.wholeNumber('delta', 0);
const ROUNDS = args.wholeNumber('rounds', 1);
const IDS = args.oneOf('ids', ['random', 'ordered'] as const);
const RATE = args.wholeNumber('rate', 1);
const GROUP_DELAY_MS = args.wholeNumber('group-delay-ms', 0);
const PARTITION = 0;
const OWNER = 'bench/1/abcdef12';

/** Request ids by number, made once: the `done` records name the ids of their `calling` records. */
const ids: string[] = [];
const requestId = (i: number) => {
  if (IDS === 'ordered') return `req-${i}`;
  while (ids.length <= i) ids.push(randomUUID());
  return ids[i]!;
};
const median = (values: number[]) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]!;
const log = (line: string) => process.stderr.write(`${line}\n`);

/**
 * The records of requests `from`…`from + count - 1`: per BATCH requests, a batch of their
 * `calling` records, then one of their `done` records. Request i was sent at `startedAt` + i / RATE
 * seconds (never later than now).
 */
function records(from: number, count: number, startedAt: number) {
  const out: { key: string; value: string; partition: number }[] = [];
  for (let first = from; first < from + count; first += BATCH) {
    const at = Math.min(Date.now(), startedAt + Math.floor((first * 1000) / RATE));
    const ids = Array.from({ length: Math.min(BATCH, from + count - first) }, (_, j) => first + j);
    const calls: BatchedRecord[] = ids.map((i) => ({
      key: ledgerKey('biz_1', requestId(i)),
      entry: { state: 'calling', offset: i, at, owner: OWNER },
    }));
    const done: BatchedRecord[] = ids.map((i) => ({
      key: ledgerKey('biz_1', requestId(i)),
      entry: {
        state: 'done',
        offset: i,
        at: at + 1,
        remember: true,
        result: JSON.stringify({
          requestId: requestId(i),
          businessId: 'biz_1',
          outcome: 'accepted',
          messageId: `01JX${String(i).padStart(22, '0')}`,
          type: 'text',
          recipient: `+1555${String(i % 100_000).padStart(7, '0')}`,
          attempts: 1,
          maybeSent: false,
          acceptedAt: new Date(at).toISOString(),
        }),
      },
    }));
    out.push({ key: batchKey(OWNER, 2 * first), value: encodeBatch(OWNER, calls), partition: PARTITION });
    out.push({ key: batchKey(OWNER, 2 * first + 1), value: encodeBatch(OWNER, done), partition: PARTITION });
  }
  return out;
}

async function produce(kafka: Kafka, topic: string, from: number, count: number, startedAt: number): Promise<void> {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const step = Math.max(BATCH, Math.floor(1_000 / BATCH) * BATCH);
  for (let i = from; i < from + count; i += step)
    await producer.send({ topic, acks: -1, messages: records(i, Math.min(step, from + count - i), startedAt) });
  await producer.disconnect();
}

/** What the kill -9 child needs, in BENCH_LEDGER_CHILD. */
interface ChildTask {
  brokers: string;
  topic: string;
  stateDir: string;
}

function ledgerOf(kafka: Kafka, topic: string, stateDir: string): RequestLedger {
  return new RequestLedger({
    changelogs: new ChangelogRestorer(kafka),
    owner: OWNER,
    topic,
    partitions: 1,
    stateDir,
    groupId: 'bench',
    windowMs: 24 * 3_600_000,
    maxEntries: 100_000_000,
    logger: silentLogger,
  });
}

/** The child: catches the directory up, says so, and waits for its kill -9. */
async function child(task: ChildTask): Promise<void> {
  const kafka = new Kafka({
    clientId: 'bench-ledger-child',
    brokers: task.brokers.split(','),
    logLevel: logLevel.NOTHING,
  });
  await ledgerOf(kafka, task.topic, task.stateDir).assign(PARTITION);
  process.stdout.write('ready\n');
  setInterval(() => undefined, 60_000);
}

/** Runs the child on `task` and kills it with SIGKILL once it is ready. */
async function catchUpAndKill(task: ChildTask): Promise<void> {
  const script = fileURLToPath(import.meta.url);
  const proc = spawn(process.execPath, ['--import', 'tsx', script], {
    env: { ...process.env, BENCH_LEDGER_CHILD: JSON.stringify(task) },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  await new Promise<void>((resolve, reject) => {
    proc.stdout.on('data', (d: Buffer) => {
      if (d.toString().includes('ready')) resolve();
    });
    void exited.then(() => reject(new Error('the kill -9 child exited before it was ready')));
  });
  proc.kill('SIGKILL');
  await exited;
}

async function main() {
  let local: LocalBroker | undefined;
  let brokers = process.env.KAFKA_BROKERS ?? '';
  if (brokers === '') {
    local = await startLocalBroker({ heapMb: 1024, groupInitialRebalanceDelayMs: GROUP_DELAY_MS });
    brokers = local.bootstrap;
  }
  const kafka = new Kafka({
    clientId: 'bench-ledger',
    brokers: brokers.split(','),
    logLevel: logLevel.NOTHING,
    retry: { retries: 10 },
  });
  const recordsPerRound = 2 * Math.ceil(ENTRIES / BATCH);
  const bulk: number[] = [];
  const bulkEntries: number[] = [];
  const bulkMs: number[] = [];
  const bulkCpuUs: number[] = [];
  const restartMs: number[] = [];
  const killedMs: number[] = [];
  const entriesKept: number[] = [];
  try {
    for (let round = 1; round <= ROUNDS; round++) {
      const topic = `bench-ledger-${randomUUID().slice(0, 8)}`;
      await withKafkajsAdmin(kafka, (admin) =>
        ensureTopics(admin, [
          {
            topic,
            partitions: 1,
            replicationFactor: 1,
            configEntries: [{ name: 'cleanup.policy', value: 'compact,delete' }],
          },
        ]),
      );
      log(`[round ${round}] producing ${ENTRIES} requests (${recordsPerRound} records)…`);
      const startedAt = Date.now() - Math.ceil((ENTRIES * 1000) / RATE);
      await produce(kafka, topic, 0, ENTRIES, startedAt);
      // The broker's log on disk before the restore reads it, as a changelog written over hours
      // is: its write-back would otherwise share the disk with the store's writes.
      execFileSync('sync');
      const stateDir = mkdtempSync(join(tmpdir(), 'bench-ledger-'));
      const ledger = () => ledgerOf(kafka, topic, stateDir);
      try {
        const first = ledger();
        const profiling = round === 1 ? await startProfile() : undefined;
        let started = performance.now();
        const cpu = process.cpuUsage();
        await first.assign(PARTITION);
        const ms = performance.now() - started;
        const used = process.cpuUsage(cpu);
        await profiling?.();
        bulkMs.push(ms);
        bulkCpuUs.push(Math.round(((used.user + used.system) / ENTRIES) * 100) / 100);
        bulk.push(Math.round(recordsPerRound / (ms / 1000)));
        bulkEntries.push(Math.round(ENTRIES / (ms / 1000)));
        entriesKept.push(first.stats().entries);
        await first.tick();
        await first.close();
        await produce(kafka, topic, ENTRIES, DELTA, startedAt);
        const second = ledger();
        started = performance.now();
        await second.assign(PARTITION);
        restartMs.push(performance.now() - started);
        await second.close();
        await produce(kafka, topic, ENTRIES + DELTA, DELTA, startedAt);
        await catchUpAndKill({ brokers, topic, stateDir });
        const third = ledger();
        started = performance.now();
        await third.assign(PARTITION);
        killedMs.push(performance.now() - started);
        await third.close();
        log(
          `[round ${round}] bulk ${Math.round(ms)} ms (${bulkEntries.at(-1)} entries/s, ${bulk.at(-1)} records/s, ${entriesKept.at(-1)} entries, ${bulkCpuUs.at(-1)} µs CPU an entry); restart with ${DELTA} new requests: ${Math.round(restartMs.at(-1)!)} ms; after a kill -9: ${Math.round(killedMs.at(-1)!)} ms`,
        );
      } finally {
        rmSync(stateDir, { recursive: true, force: true });
      }
    }
  } finally {
    await local?.stop();
  }
  console.log(
    `\n${ENTRIES} requests with ${IDS} ids, written at ${RATE}/s (${recordsPerRound} ledger records: batches of ${BATCH} calling, then done records), ${ROUNDS} round(s), medians:\n\n` +
      `| bulk restore (new member) | entries/s | records/s | CPU an entry (µs) | entries kept | restart, ${DELTA} requests written meanwhile | restart after a kill -9 |\n|---|---|---|---|---|---|---|\n` +
      `| ${Math.round(median(bulkMs))} ms (${bulkMs.map((v) => Math.round(v)).join(' / ')}) | ${median(bulkEntries)} (${bulkEntries.join(' / ')}) | ${median(bulk)} (${bulk.join(' / ')}) | ${median(bulkCpuUs)} (${bulkCpuUs.join(' / ')}) | ${median(entriesKept)} | ${Math.round(median(restartMs))} ms (${restartMs.map((v) => Math.round(v)).join(' / ')}) | ${Math.round(median(killedMs))} ms (${killedMs.map((v) => Math.round(v)).join(' / ')}) |`,
  );
}

/** With BENCH_PROFILE set: starts the main thread's CPU profile; the answer stops it and writes the file. */
async function startProfile(): Promise<(() => Promise<void>) | undefined> {
  const path = process.env.BENCH_PROFILE;
  if (!path) return undefined;
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  return async () => {
    const { profile } = await session.post('Profiler.stop');
    writeFileSync(path, JSON.stringify(profile));
    session.disconnect();
    log(`CPU profile of the bulk restore: ${path}`);
  };
}

const childTask = process.env.BENCH_LEDGER_CHILD;
if (childTask) await child(JSON.parse(childTask) as ChildTask);
else await main();
