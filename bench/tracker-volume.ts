// Tracker at production volume (issue 19): does its cost follow traffic or history?
//
// For each history H: H message states are loaded straight into message-state (the changelog,
// 12 partitions, as the tracker creates it), then `msgbridge tracker` (dist/cli.js, default
// configuration, its own process) is started and measured:
//   - cold start: ready (/readyz 200) after a bulk restore of every task, records/s;
//   - traffic: --seconds of 200 new messages/s (a result and three statuses each) plus 20 late
//     `read` statuses/s for old messages; latency from producing a message's events to its
//     `read` state in message-state (read_committed), p50/p99; lag at the end;
//   - burst: --burst messages (4 events each) produced at once: events/s and CPU µs per event;
//   - queries: GET /messages/{old} and GET /requests/{old request} p50/p99;
//   - restart with the stores on disk: ready after; process RSS (max sampled, and VmHWM).
//
//   npm run build && node --import tsx bench/tracker-volume.ts [--history 50000,1000000] [--seconds 60]
// KAFKA_BROKERS=host:port uses an existing Kafka; otherwise the embedded local broker starts.
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID, createHash } from 'node:crypto';
import { appendFileSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel, type Message } from 'kafkajs';
import { loadConfig } from '../src/config/load.js';
import { eventIdOf, resultEventId } from '../src/contracts/index.js';
import { startLocalBroker, type LocalBroker } from '../src/local-kafka/local-broker.js';
import { javaCompatibleHash } from '../src/kafka/partitioner.js';
import { ensureTopics } from '../src/kafka/topics.js';
import { changelogTopicConfig } from '../src/tracker/index.js';
import { statusEvent } from '../test/ingress/fixtures.js';
import { benchArgs } from './args.js';

const args = benchArgs(import.meta.url, {
  history: { type: 'string', default: '50000,1000000' },
  seconds: { type: 'string', default: '60' },
  rate: { type: 'string', default: '200' },
  late: { type: 'string', default: '20' },
  burst: { type: 'string', default: '20000' },
  queries: { type: 'string', default: '300' },
  // Start the traffic only once the bulk restore's indexes are built (steady state at H).
  'after-indexes': { type: 'boolean', default: false },
  // After the single-member measurements: a second member joins (its own store), and the
  // queries are asked again of the first, which forwards what it no longer owns.
  'second-member': { type: 'boolean', default: false },
});
const HISTORIES = args.wholeNumbers('history');
const SECONDS = args.wholeNumber('seconds', 1);
const RATE = args.wholeNumber('rate', 1);
const LATE = args.wholeNumber('late');
const BURST = args.wholeNumber('burst', 1);
const QUERIES = args.wholeNumber('queries', 1);
const PARTITIONS = 12;
const CLI = join(import.meta.dirname, '..', 'dist', 'cli.js');
if (!existsSync(CLI)) throw new Error('run `npm run build` first: the tracker under test is dist/cli.js');

let local: LocalBroker | undefined;
const brokers = process.env.KAFKA_BROKERS
  ? process.env.KAFKA_BROKERS.split(',')
  : [(local = await startLocalBroker({ heapMb: 1024, partitions: PARTITIONS })).bootstrap];
const kafka = new Kafka({ clientId: 'bench-tracker-volume', brokers, logLevel: logLevel.NOTHING });
const admin = kafka.admin();
await admin.connect();

const pct = (xs: number[], p: number) =>
  xs.length === 0 ? NaN : [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const histId = (i: number) => `01HIST${i.toString(36).toUpperCase().padStart(20, '0')}`;
const hex = (s: string) => createHash('sha256').update(s).digest('hex');

/** H synthetic states as the tracker writes them, straight into the changelog (acks=1, many in flight). */
async function loadHistory(topic: string, count: number): Promise<number> {
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const started = performance.now();
  const now = Date.now();
  const CHUNK = 4000;
  const inFlight: Promise<unknown>[] = [];
  for (let from = 0; from < count; from += CHUNK) {
    const messages: Message[] = [];
    for (let i = from; i < Math.min(count, from + CHUNK); i++) {
      const id = histId(i);
      const at = new Date(now - ((i * 7919) % (20 * 86_400_000))).toISOString();
      const state = {
        messageId: id,
        requestId: `hist-${i}`,
        businessId: 'biz_1',
        recipient: `+1555${String(i % 1_000_000).padStart(7, '0')}`,
        type: 'text',
        status: 'delivered',
        acceptedAt: at,
        sentAt: at,
        deliveredAt: at,
        readAt: null,
        failedAt: null,
        error: null,
        events: 3,
        updatedAt: at,
        eventIds: [hex(`a${i}`), hex(`s${i}`), hex(`d${i}`)],
      };
      messages.push({
        key: id,
        value: JSON.stringify(state),
        partition: javaCompatibleHash(Buffer.from(id)) % PARTITIONS,
        headers: {
          'event-id': hex(`st${i}`),
          'business-id': 'biz_1',
          'content-type': 'application/json',
          schema: 'message-state/v1',
        },
      });
    }
    inFlight.push(producer.send({ topic, messages, acks: 1 }));
    if (inFlight.length >= 6) await inFlight.shift();
  }
  await Promise.all(inFlight);
  await producer.disconnect();
  return count / ((performance.now() - started) / 1000);
}

interface Proc {
  child: ChildProcess;
  /** The queries' base URL (tracker.port). */
  url: Promise<string>;
  /** /readyz and /metrics (tracker.adminPort). */
  admin: Promise<string>;
  rssMax: number;
  anonMax: number;
  fileMax: number;
  sampler: NodeJS.Timeout;
  output: string[];
}

function status(pid: number, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) * 1024 : NaN;
}
function cpuSeconds(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

function startTrackerProcess(env: Record<string, string>): Proc {
  const child = spawn(
    process.execPath,
    [
      ...(process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : []),
      ...(process.env.BENCH_NODE_FLAGS ?? '').split(' ').filter(Boolean),
      CLI,
      'tracker',
    ],
    { env: { ...process.env, ...env, MSGBRIDGE_LOG_LEVEL: 'info' }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const output: string[] = [];
  let resolveUrl: (url: string) => void = () => {};
  const url = new Promise<string>((r) => (resolveUrl = r));
  let resolveAdmin: (url: string) => void = () => {};
  const admin = new Promise<string>((r) => (resolveAdmin = r));
  const buffers = { out: '', err: '' };
  const onData = (which: 'out' | 'err') => (d: Buffer) => {
    buffers[which] += d.toString();
    const lines = buffers[which].split('\n');
    buffers[which] = lines.pop()!;
    for (const line of lines) {
      if (process.env.BENCH_GC_LOG && /Mark-Compact|Scavenge/.test(line))
        appendFileSync(process.env.BENCH_GC_LOG, `${line}\n`);
      if (
        line.includes('restored in bulk') ||
        line.includes('stores remapped') ||
        line.includes('indexes built') ||
        line.includes('caught up from its checkpoint') ||
        line.includes('"level":50') ||
        line.includes('"level":40')
      )
        output.push(line);
      const m = /"url":"(http[^"]+)".*"admin":"(http[^"]+)"/.exec(line);
      if (m) {
        resolveUrl(m[1]!);
        resolveAdmin(m[2]!);
      }
    }
  };
  child.stdout!.on('data', onData('out'));
  child.stderr!.on('data', onData('err'));
  const proc: Proc = {
    child,
    url,
    admin,
    rssMax: 0,
    anonMax: 0,
    fileMax: 0,
    output,
    sampler: setInterval(() => {}, 1000),
  };
  clearInterval(proc.sampler);
  proc.sampler = setInterval(() => {
    try {
      proc.rssMax = Math.max(proc.rssMax, status(child.pid!, 'VmRSS'));
      proc.anonMax = Math.max(proc.anonMax, status(child.pid!, 'RssAnon'));
      proc.fileMax = Math.max(proc.fileMax, status(child.pid!, 'RssFile'));
    } catch {
      // exited
    }
  }, 250);
  return proc;
}

async function readyAfter(proc: Proc, started: number): Promise<number> {
  const admin = await proc.admin;
  for (;;) {
    const ok = await fetch(`${admin}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return (performance.now() - started) / 1000;
    if (proc.child.exitCode !== null) throw new Error(`the tracker exited: ${proc.output.join('\n')}`);
    await sleep(50);
  }
}

async function stopProcess(proc: Proc): Promise<number> {
  const hwm = status(proc.child.pid!, 'VmHWM');
  clearInterval(proc.sampler);
  proc.child.kill('SIGTERM');
  await new Promise((r) => proc.child.once('exit', r));
  return hwm;
}

const rows: string[] = [];
for (const H of HISTORIES) {
  const id = randomUUID().slice(0, 8);
  const t = {
    results: `bv-results-${id}`,
    status: `bv-status-${id}`,
    messages: `bv-messages-${id}`,
    state: `bv-state-${id}`,
    conv: `bv-conv-${id}`,
  };
  const stateDir = join(tmpdir(), `bench-tracker-state-${id}`);
  const env = {
    KAFKA_BROKERS: brokers.join(','),
    MSGBRIDGE__kafka__topics__sendResults: t.results,
    MSGBRIDGE__kafka__topics__deliveryStatus: t.status,
    MSGBRIDGE__kafka__topics__messages: t.messages,
    MSGBRIDGE__kafka__topics__messageState: t.state,
    MSGBRIDGE__kafka__topics__conversations: t.conv,
    MSGBRIDGE__kafka__partitions: String(PARTITIONS),
    MSGBRIDGE__kafka__replicationFactor: '1',
    MSGBRIDGE__tracker__groupId: `bv-${id}`,
    MSGBRIDGE__tracker__transactionalIdPrefix: `bv-${id}`,
    MSGBRIDGE__tracker__host: '127.0.0.1',
    MSGBRIDGE_TRACKER_PORT: '0',
    MSGBRIDGE_TRACKER_ADMIN_PORT: '0',
    MSGBRIDGE_TRACKER_STATE_DIR: stateDir,
  };
  const config = loadConfig({ env });
  await ensureTopics(admin, [
    ...[t.results, t.status, t.messages].map((topic) => ({ topic, partitions: PARTITIONS, replicationFactor: 1 })),
    {
      topic: t.state,
      partitions: PARTITIONS,
      replicationFactor: 1,
      configEntries: changelogTopicConfig(config, 'messageState'),
    },
    {
      topic: t.conv,
      partitions: PARTITIONS,
      replicationFactor: 1,
      configEntries: changelogTopicConfig(config, 'conversations'),
    },
  ]);
  console.error(`[H=${H}] loading the history into ${t.state}…`);
  const loadRate = await loadHistory(t.state, H);

  // Cold start: every task restores in bulk.
  let started = performance.now();
  const startedAtMs = Date.now();
  let proc = startTrackerProcess(env);
  const coldReady = await readyAfter(proc, started);
  const bulkRates = proc.output
    .filter((l) => l.includes('restored in bulk'))
    .map((l) => JSON.parse(l) as { changelogRecords: { messageState: number }; ms: number });
  const restoredRecords = bulkRates.reduce((n, r) => n + r.changelogRecords.messageState, 0);
  console.error(
    `[H=${H}] ready after ${coldReady.toFixed(1)} s (${restoredRecords} records restored; task restores took ${bulkRates
      .map((r) => r.ms)
      .sort((a, b) => a - b)
      .join(', ')} ms)`,
  );
  const url = await proc.url;
  const adminUrl = await proc.admin;
  const indexesBuilt = () => proc.output.filter((l) => l.includes('indexes built')).length >= PARTITIONS;
  if (args.values['after-indexes']) {
    while (!indexesBuilt()) await sleep(500);
    console.error(
      `[H=${H}] indexes built ${((performance.now() - started) / 1000).toFixed(1)} s after the start; traffic starts now`,
    );
  }

  // Traffic: fresh messages and late reads; latency to the read state.
  const producer = kafka.producer({ allowAutoTopicCreation: false, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const producedAt = new Map<string, number>();
  const latencies: number[] = [];
  const latencyAt: [number, number][] = [];
  let burstSeen = 0;
  const burstIds = new Set<string>();
  const consumer = kafka.consumer({ groupId: `bv-read-${id}`, readUncommitted: false, maxWaitTimeInMs: 50 });
  await consumer.connect();
  await consumer.subscribe({ topics: [t.state], fromBeginning: false });
  let assigned = false;
  consumer.on(consumer.events.GROUP_JOIN, () => (assigned = true));
  await consumer.run({
    eachBatch: async ({ batch }) => {
      const now = performance.now();
      for (const m of batch.messages) {
        const key = m.key!.toString();
        if (!m.value || !m.value.includes('"status":"read"')) continue;
        const at = producedAt.get(key);
        if (at !== undefined) {
          latencies.push(now - at);
          latencyAt.push([at, now - at]);
          producedAt.delete(key);
        } else if (burstIds.delete(key)) burstSeen++;
      }
    },
  });
  while (!assigned) await sleep(50);
  await sleep(1000);
  const messageRecords = (m: string, i: number) => {
    const value = JSON.stringify({
      requestId: `live-${id}-${i}`,
      businessId: 'biz_1',
      outcome: 'accepted',
      messageId: m,
      type: 'text',
      recipient: '+15550002222',
      attempts: 1,
      acceptedAt: new Date().toISOString(),
      maybeSent: false,
    });
    const result = {
      key: m,
      value,
      headers: { 'event-id': resultEventId('biz_1', `live-${id}-${i}`, 'accepted'), 'business-id': 'biz_1' },
    };
    const statuses = ['sent', 'delivered', 'read'].map((s, k) => {
      const body = statusEvent(m, s, { timestamp: String(Math.floor(Date.now() / 1000) + k) });
      return { key: m, value: body, headers: { 'event-id': eventIdOf(body), 'business-id': 'biz_1' } };
    });
    return { result, statuses };
  };
  let n = 0;
  const ticks = SECONDS * 10;
  const trafficStart = performance.now();
  for (let tick = 0; tick < ticks; tick++) {
    const results: Message[] = [];
    const statuses: Message[] = [];
    for (let k = 0; k < RATE / 10; k++) {
      const m = `01LIVE${id.toUpperCase()}${String(n).padStart(12, '0')}`;
      const r = messageRecords(m, n++);
      results.push(r.result);
      statuses.push(...r.statuses);
      producedAt.set(m, performance.now());
    }
    for (let k = 0; k < LATE / 10; k++) {
      const old = histId(Math.floor(Math.random() * H));
      const body = statusEvent(old, 'read', { timestamp: String(Math.floor(Date.now() / 1000)) });
      statuses.push({ key: old, value: body, headers: { 'event-id': eventIdOf(body), 'business-id': 'biz_1' } });
    }
    await producer.sendBatch({
      acks: -1,
      topicMessages: [
        { topic: t.results, messages: results },
        { topic: t.status, messages: statuses },
      ],
    });
    const next = trafficStart + (tick + 1) * 100;
    const wait = next - performance.now();
    if (wait > 0) await sleep(wait);
  }
  const drainDeadline = performance.now() + 120_000;
  while (producedAt.size > 0 && performance.now() < drainDeadline) await sleep(100);
  const windows = new Map<number, number[]>();
  for (const [at, ms] of latencyAt) {
    const w = Math.floor((at - trafficStart) / 5000);
    windows.set(w, [...(windows.get(w) ?? []), ms]);
  }
  console.error(
    `[H=${H}] fresh-message latency p99 per 5 s: ${[...windows].map(([w, xs]) => `${w * 5}s ${Math.round(pct(xs, 99))}ms`).join(', ')}`,
  );
  const lagText = await fetch(`${adminUrl}/metrics`).then((r) => r.text());
  const lag = lagText
    .split('\n')
    .filter((l) => l.startsWith('msgbridge_tracker_consumer_lag'))
    .reduce((s, l) => s + Number(l.split(' ').at(-1)), 0);

  // Burst: events/s and CPU per event.
  const burst: { results: Message[]; statuses: Message[] } = { results: [], statuses: [] };
  for (let i = 0; i < BURST; i++) {
    const m = `01BRST${id.toUpperCase()}${String(i).padStart(12, '0')}`;
    const r = messageRecords(m, 1_000_000 + i);
    burst.results.push(r.result);
    burst.statuses.push(...r.statuses);
    burstIds.add(m);
  }
  const cpuBefore = cpuSeconds(proc.child.pid!);
  const burstStart = performance.now();
  for (let i = 0; i < BURST; i += 2000) {
    await producer.sendBatch({
      acks: -1,
      topicMessages: [
        { topic: t.results, messages: burst.results.slice(i, i + 2000) },
        { topic: t.status, messages: burst.statuses.slice(3 * i, 3 * (i + 2000)) },
      ],
    });
  }
  while (burstSeen < BURST && performance.now() - burstStart < 300_000) await sleep(50);
  const burstSeconds = (performance.now() - burstStart) / 1000;
  const cpuPerEvent = ((cpuSeconds(proc.child.pid!) - cpuBefore) * 1e6) / (4 * BURST);
  await producer.disconnect();
  await consumer.disconnect();

  // Queries for old messages: by message id and by request id.
  const q = async (path: string) => {
    const s = performance.now();
    const r = await fetch(`${url}${path}`);
    await r.text();
    if (r.status !== 200) throw new Error(`${path}: ${r.status}`);
    return performance.now() - s;
  };
  // Lookups by request id answer 503 until the bulk restore's indexes are built.
  const indexDeadline = performance.now() + 600_000;
  while (
    proc.output.filter((l) => l.includes('indexes built')).length < PARTITIONS &&
    performance.now() < indexDeadline
  )
    await sleep(200);
  const buildTimes = proc.output
    .filter((l) => l.includes('indexes built'))
    .map((l) => Date.parse((JSON.parse(l) as { time: string }).time));
  const indexedAfter = buildTimes.length > 0 ? (Math.max(...buildTimes) - startedAtMs) / 1000 : NaN;
  const byMessage: number[] = [];
  const byRequest: number[] = [];
  for (let i = 0; i < QUERIES; i++) {
    const k = Math.floor(Math.random() * H);
    byMessage.push(await q(`/messages/${histId(k)}`));
    byRequest.push(await q(`/requests/hist-${k}`));
  }
  let twoMembers = '';
  if (args.values['second-member']) {
    const second = startTrackerProcess({ ...env, MSGBRIDGE_TRACKER_STATE_DIR: `${stateDir}-b` });
    await readyAfter(second, performance.now());
    // The first member gave tasks away and may be rejoining: wait until both are ready and indexed.
    while (
      !(await fetch(`${adminUrl}/readyz`).then(
        (r) => r.ok,
        () => false,
      )) ||
      second.output.filter((l) => l.includes('indexes built')).length <
        second.output.filter((l) => l.includes('restored in bulk')).length
    )
      await sleep(200);
    const forwardedByMessage: number[] = [];
    const forwardedByRequest: number[] = [];
    for (let i = 0; i < QUERIES; i++) {
      const k = Math.floor(Math.random() * H);
      forwardedByMessage.push(await q(`/messages/${histId(k)}`));
      forwardedByRequest.push(await q(`/requests/hist-${k}`));
    }
    twoMembers = `two members, asked of the first (about half forwarded): GET /messages/{old} p50/p99 ${pct(forwardedByMessage, 50).toFixed(1)} / ${pct(forwardedByMessage, 99).toFixed(1)} ms, GET /requests/{old} (asked of both) ${pct(forwardedByRequest, 50).toFixed(1)} / ${pct(forwardedByRequest, 99).toFixed(1)} ms`;
    console.error(`[H=${H}] ${twoMembers}`);
    await stopProcess(second);
    rmSync(`${stateDir}-b`, { recursive: true, force: true });
  }
  const firstOutput = proc.output;
  const hwm1 = await stopProcess(proc);
  const rss1 = proc.rssMax;
  const anon1 = proc.anonMax;
  const file1 = proc.fileMax;

  // Restart with the stores on disk.
  started = performance.now();
  proc = startTrackerProcess(env);
  const warmReady = await readyAfter(proc, started);
  const deltaRecords = proc.output
    .filter((l) => l.includes('caught up'))
    .reduce(
      (n, l) => n + (JSON.parse(l) as { changelogRecords: { messageState: number } }).changelogRecords.messageState,
      0,
    );
  const hwm2 = await stopProcess(proc);

  const f = (x: number) => Math.round(x).toLocaleString('en');
  const row = `| ${f(H)} | ${(pct(latencies, 50) / 1000).toFixed(2)} s / ${(pct(latencies, 99) / 1000).toFixed(2)} s | ${f(lag)} | ${f((4 * BURST) / burstSeconds)} events/s, ${cpuPerEvent.toFixed(0)} µs CPU/event | ${coldReady.toFixed(1)} s (${f(restoredRecords / Math.max(coldReady, 0.001))} records/s) | ${warmReady.toFixed(1)} s (${f(deltaRecords)} records read) | ${pct(byMessage, 50).toFixed(1)} / ${pct(byMessage, 99).toFixed(1)} ms | ${pct(byRequest, 50).toFixed(1)} / ${pct(byRequest, 99).toFixed(1)} ms | ${f(Math.max(rss1, hwm1) / 2 ** 20)} MiB (anon ${f(anon1 / 2 ** 20)}, file ${f(file1 / 2 ** 20)}; restart ${f(hwm2 / 2 ** 20)}) |`;
  console.error(row);
  rows.push(row);
  rmSync(stateDir, { recursive: true, force: true });
  await admin.deleteTopics({ topics: Object.values(t) }).catch(() => undefined);
  console.error(
    firstOutput
      .filter((l) => l.includes('remapped') || l.includes('indexes built'))
      .slice(0, 30)
      .join('\n'),
  );
  console.error(`[H=${H}] indexes of the bulk restore complete ${indexedAfter.toFixed(1)} s after the start`);
  console.error(`[H=${H}] history loaded at ${f(loadRate)} records/s; ${latencies.length} fresh messages measured`);
}

await admin.disconnect();
await local?.stop();
console.log(
  `\n| history H (states) | fresh messages: read state visible after p50 / p99 | lag after | burst of ${BURST.toLocaleString('en')} messages | cold start: bulk restore, ready after | restart with the stores on disk | GET /messages/{old} p50 / p99 | GET /requests/{old} p50 / p99 | tracker RSS peak |\n|---|---|---|---|---|---|---|---|---|\n${rows.join('\n')}`,
);
process.exit(0);
