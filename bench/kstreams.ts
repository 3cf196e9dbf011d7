// The tracker's consume–aggregate–produce job side by side with Kafka Streams 3.9 (issue 19):
// the same input (M messages, each an accepted send result and three statuses, 12 partitions,
// preloaded), the same broker, one run. Each job — bench/kstreams (exactly_once_v2, RocksDB
// store) and `msgbridge tracker` (dist/cli.js, default configuration) — runs in its own process
// and is timed until its output topic holds all 4·M state changes (read_committed); then it is
// stopped and started again on its state directory, and timed to ready.
//
//   npm run build && mvn -q -f bench/kstreams/pom.xml package && node --import tsx bench/kstreams.ts [--messages 50000]
// KAFKA_BROKERS=host:port uses an existing Kafka; otherwise the embedded local broker starts.
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel, type Message } from 'kafkajs';
import { startLocalBroker, type LocalBroker } from '../src/local-kafka/local-broker.js';
import { ensureTopics } from '../src/kafka/topics.js';
import { loadConfig } from '../src/config/load.js';
import { changelogTopicConfig } from '../src/tracker/index.js';
import { messageLifeRecords } from '../test/tracker/harness.js';
import { benchArgs } from './args.js';

const args = benchArgs(import.meta.url, { messages: { type: 'string', default: '50000' } });
const M = args.wholeNumber('messages', 1);
const PARTITIONS = 12;
const root = join(import.meta.dirname, '..');
const CLI = join(root, 'dist', 'cli.js');
const KS = join(root, 'bench', 'kstreams', 'target');
if (!existsSync(CLI)) throw new Error('run `npm run build` first');
if (!existsSync(join(KS, 'lib'))) throw new Error('run `mvn -q -f bench/kstreams/pom.xml package` first');

let local: LocalBroker | undefined;
const brokers = process.env.KAFKA_BROKERS
  ? process.env.KAFKA_BROKERS.split(',')
  : [(local = await startLocalBroker({ heapMb: 1024, partitions: PARTITIONS })).bootstrap];
const kafka = new Kafka({ clientId: 'bench-kstreams', brokers, logLevel: logLevel.NOTHING });
const admin = kafka.admin();
await admin.connect();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const id = randomUUID().slice(0, 8);
const input = { results: `ks-results-${id}`, status: `ks-status-${id}`, messages: `ks-messages-${id}` };
await ensureTopics(
  admin,
  Object.values(input).map((topic) => ({ topic, partitions: PARTITIONS, replicationFactor: 1 })),
);
{
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  for (let from = 0; from < M; from += 2000) {
    const results: Message[] = [];
    const statuses: Message[] = [];
    for (let i = from; i < Math.min(M, from + 2000); i++) {
      const m = `01KS${id.toUpperCase()}${String(i).padStart(14, '0')}`;
      for (const r of messageLifeRecords(`req-${i}`, m, {
        firstStatusAt: 1764000000,
        acceptedAt: '2026-11-24T10:00:00.000Z',
      }))
        (r.topic === 'results' ? results : statuses).push({ key: r.key, value: r.value, headers: r.headers });
    }
    await producer.sendBatch({
      acks: -1,
      topicMessages: [
        { topic: input.results, messages: results },
        { topic: input.status, messages: statuses },
      ],
    });
  }
  await producer.disconnect();
}

function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}
function rss(pid: number, field = 'VmHWM'): number {
  return (
    Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1] ?? NaN) /
    1024
  );
}

/** Committed records of a topic, counted by a read_committed consumer; resolves when `expected` are there. */
async function countUntil(
  topic: string,
  expected: number,
  timeoutMs: number,
): Promise<{ first: number; last: number; count: number }> {
  const consumer = kafka.consumer({
    groupId: `ks-count-${randomUUID()}`,
    readUncommitted: false,
    maxWaitTimeInMs: 100,
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  let count = 0;
  let first = 0;
  let last = 0;
  await consumer.run({
    eachBatch: async ({ batch }) => {
      if (count === 0 && batch.messages.length > 0) first = performance.now();
      count += batch.messages.length;
      last = performance.now();
    },
  });
  const deadline = performance.now() + timeoutMs;
  while (count < expected && performance.now() < deadline) await sleep(50);
  await consumer.disconnect();
  return { first, last, count };
}

interface Job {
  name: string;
  start(): ChildProcess;
  ready(child: ChildProcess, output: () => string): Promise<void>;
  output: string;
  cleanup(): void;
}

const ksState = join(tmpdir(), `ks-state-${id}`);
const mbState = join(tmpdir(), `mb-state-${id}`);
const lines = (child: ChildProcess) => {
  let text = '';
  child.stdout!.on('data', (d: Buffer) => (text += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (text += d.toString()));
  return () => text;
};
const jobs: Job[] = [
  {
    name: 'Kafka Streams 3.9.1 (exactly_once_v2, RocksDB)',
    output: `ks-out-${id}`,
    start: () =>
      spawn(
        'java',
        [
          '-Xmx512m',
          '-cp',
          `${join(KS, 'classes')}:${readdirSync(join(KS, 'lib'))
            .map((f) => join(KS, 'lib', f))
            .join(':')}`,
          'dev.msgbridge.bench.TrackerStreams',
          brokers.join(','),
          `ks-app-${id}`,
          input.results,
          input.status,
          `ks-out-${id}`,
          ksState,
        ],
        {
          stdio: ['ignore', 'pipe', 'pipe'],
        },
      ),
    async ready(child, output) {
      while (!/RUNNING \d+/.test(output())) {
        if (child.exitCode !== null) throw new Error(`Kafka Streams exited: ${output()}`);
        await sleep(20);
      }
    },
    cleanup: () => rmSync(ksState, { recursive: true, force: true }),
  },
  {
    name: 'msgbridge tracker (LMDB stores, default configuration)',
    output: `ks-mstate-${id}`,
    start: () =>
      spawn(process.execPath, [CLI, 'tracker'], {
        env: {
          ...process.env,
          KAFKA_BROKERS: brokers.join(','),
          MSGBRIDGE__kafka__topics__sendResults: input.results,
          MSGBRIDGE__kafka__topics__deliveryStatus: input.status,
          MSGBRIDGE__kafka__topics__messages: input.messages,
          MSGBRIDGE__kafka__topics__messageState: `ks-mstate-${id}`,
          MSGBRIDGE__kafka__topics__conversations: `ks-mconv-${id}`,
          MSGBRIDGE__kafka__replicationFactor: '1',
          MSGBRIDGE__tracker__groupId: `ks-mb-${id}`,
          MSGBRIDGE__tracker__transactionalIdPrefix: `ks-mb-${id}`,
          MSGBRIDGE__tracker__host: '127.0.0.1',
          MSGBRIDGE_TRACKER_PORT: '0',
          MSGBRIDGE_TRACKER_ADMIN_PORT: '0',
          MSGBRIDGE_TRACKER_STATE_DIR: mbState,
          MSGBRIDGE_LOG_LEVEL: 'info',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      }),
    async ready(child, output) {
      for (;;) {
        const url = /"admin":"(http[^"]+)"/.exec(output())?.[1];
        if (
          url &&
          (await fetch(`${url}/readyz`).then(
            (r) => r.ok,
            () => false,
          ))
        )
          return;
        if (child.exitCode !== null) throw new Error(`the tracker exited: ${output()}`);
        await sleep(20);
      }
    },
    cleanup: () => rmSync(mbState, { recursive: true, force: true }),
  },
];

const rows: string[] = [];
for (const job of jobs) {
  if (job.name.startsWith('Kafka'))
    await ensureTopics(admin, [{ topic: job.output, partitions: PARTITIONS, replicationFactor: 1 }]);
  else {
    // As the tracker creates them (it finds them there).
    const config = loadConfig({ env: {} });
    await ensureTopics(admin, [
      {
        topic: job.output,
        partitions: PARTITIONS,
        replicationFactor: 1,
        configEntries: changelogTopicConfig(config, 'messageState'),
      },
      {
        topic: `ks-mconv-${id}`,
        partitions: PARTITIONS,
        replicationFactor: 1,
        configEntries: changelogTopicConfig(config, 'conversations'),
      },
    ]);
  }
  console.error(`${job.name}: processing ${4 * M} events…`);
  const started = performance.now();
  let child = job.start();
  let output = lines(child);
  const counted = await countUntil(job.output, 4 * M, 600_000);
  const seconds = (counted.last - started) / 1000;
  const window = (counted.last - counted.first) / 1000;
  const cpu = cpuSeconds(child.pid!);
  const peak = rss(child.pid!);
  child.kill('SIGTERM');
  await new Promise((r) => child.once('exit', r));
  // Restart on the state directory: time to ready.
  const restartStarted = performance.now();
  child = job.start();
  output = lines(child);
  await job.ready(child, output);
  const restart = (performance.now() - restartStarted) / 1000;
  child.kill('SIGTERM');
  await new Promise((r) => child.once('exit', r));
  job.cleanup();
  const row = `| ${job.name} | ${counted.count.toLocaleString('en')} | ${Math.round((4 * M) / seconds).toLocaleString('en')} events/s (${seconds.toFixed(1)} s from start) | ${Math.round((4 * M) / window).toLocaleString('en')} events/s | ${((cpu * 1e6) / (4 * M)).toFixed(0)} µs | ${Math.round(peak)} MiB | ${restart.toFixed(1)} s |`;
  console.error(row);
  rows.push(row);
}
await admin.disconnect();
await local?.stop();
console.log(
  `\n${(4 * M).toLocaleString('en')} input events (${M.toLocaleString('en')} messages), ${PARTITIONS} partitions, one broker, one run:\n\n| job | state records (read_committed) | events/s, process start to last state | events/s, first to last state | CPU per event (whole process) | RSS peak | restart on its state directory: ready after |\n|---|---|---|---|---|---|---|\n${rows.join('\n')}`,
);
process.exit(0);
