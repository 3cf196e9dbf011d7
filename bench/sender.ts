// Sender benchmark. N send requests over K recipients are preloaded into `send-requests`; the
// provider simulator answers every send after L ms. `msgbridge sender` (bundled to plain
// JavaScript, as `node dist/cli.js sender` runs in production) then drains the backlog:
//   - completed sends/s: results acknowledged by Kafka, from the sender's readiness to the
//     last result;
//   - request-to-result latency (p50, p99): from the moment the sender took a request from
//     Kafka (its `received-at` header) to the moment its result was written (record timestamp);
//   - peak RSS of the sender process (VmHWM) and its CPU time;
//   - order per recipient, checked on the simulator's log of send calls (first call of each
//     request, per recipient, must follow the produced order), and that each request has a result.
// Scenarios: the default configuration (concurrency 64, 200 sends/s per business: the rate limit
// is the bound) and a concurrency-bound one (rate limit lifted: concurrency / L is the bound),
// also with the conversation window guard on (sender.conversationWindow "reject", an open window
// per recipient on a conversations topic: every text is looked up, none refused).
// In the same run, a naive baseline: kafkajs `eachMessage`, one awaited provider call and one
// awaited result publish per request, on its own copy of the backlog for a fixed duration.
// Failure scenarios: a provider outage (every send answered 5xx for --outage-seconds, mid-stream:
// sends/s before, during and after, rejected results, duplicate creations, calls made during the
// outage) and a member failover (two senders, one killed with SIGKILL: time until the survivor is
// assigned the dead member's partitions and until each of them has a result again).
//
//   npx tsx bench/sender.ts [--requests 6000] [--recipients 1000] [--latency-ms 100]
//                           [--concurrent-requests 12000] [--naive-seconds 20] [--outage-seconds 20]
//                           [--only <scenario name part> | failover | naive]
// KAFKA_BROKERS=host:port uses an existing Kafka; otherwise the embedded local broker starts.
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readFileSync, mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Kafka, logLevel, type Consumer } from 'kafkajs';
import { Pool, request } from 'undici';
import { benchArgs } from './args.js';
import { bundleCli, ROOT, senderReady, spawnSenderBundle } from './cli-bundle.js';
import { firstLine } from './peers.js';
import { startLocalBroker, type LocalBroker } from '../src/local-kafka/local-broker.js';
import { ensureTopics } from '../src/kafka/topics.js';

const args = benchArgs(import.meta.url, {
  requests: { type: 'string', default: '6000' },
  recipients: { type: 'string', default: '1000' },
  'latency-ms': { type: 'string', default: '100' },
  'concurrent-requests': { type: 'string', default: '12000' },
  'naive-seconds': { type: 'string', default: '20' },
  partitions: { type: 'string', default: '12' },
  rounds: { type: 'string', default: '1' },
  'outage-seconds': { type: 'string', default: '20' },
  /** Only the scenarios whose name contains this; `failover` or `naive` for those alone. */
  only: { type: 'string' },
});
const N = args.wholeNumber('requests', 1);
const K = args.wholeNumber('recipients', 1);
const L = args.wholeNumber('latency-ms');
const N_CONCURRENCY = args.wholeNumber('concurrent-requests', 1);
const NAIVE_SECONDS = args.wholeNumber('naive-seconds', 1);
const PARTITIONS = args.wholeNumber('partitions', 1);
const ROUNDS = args.wholeNumber('rounds', 1);
const OUTAGE_SECONDS = args.wholeNumber('outage-seconds', 1);
const STEADY_REQUESTS = 1500;
const BUSINESS = { id: 'biz_bench', apiKey: 'bench-api-key', secret: 'bench-secret' };

interface Scenario {
  name: string;
  requests: number;
  sender: { concurrency: number; ratePerSecond: number; maxBufferedRequests: number };
  /** Produce the requests at this pace while the sender runs, instead of preloading them. */
  steadyPerSecond?: number;
  /** The provider answers every send 5xx for `seconds`, starting once `afterResults` results are in. */
  outage?: { afterResults: number; seconds: number };
  /** sender.conversationWindow "reject", with an open window for every recipient on a conversations topic. */
  conversationWindow?: boolean;
}

interface OutageFigures {
  beforePerSecond: number;
  duringPerSecond: number;
  afterPerSecond: number;
  callsDuringOutage: number;
  rejected: number;
  /** Requests the provider created more than one message for. */
  createdTwice: number;
  /** From the end of the outage to the first result after it. */
  resumedAfterMs: number;
}

interface ScenarioResult {
  name: string;
  requests: number;
  concurrency: number;
  ratePerSecond: number;
  boundPerSecond: number;
  sendsPerSecond: number;
  ofBound: number;
  p50Ms: number;
  p99Ms: number;
  peakRssMb: number;
  cpuSeconds: number;
  durationS: number;
  providerCalls: number;
  duplicates: number;
  missingResults: number;
  orderViolations: number;
  roundsPerSecond?: number[];
  roundsP99?: number[];
  outage?: OutageFigures;
}

function line(text: string): void {
  process.stderr.write(`${text}\n`);
}

function recipient(k: number): string {
  return `+1555${String(2_000_000 + k).padStart(7, '0')}`;
}

/** N requests, recipient k gets requests n = 0, 1, 2... in that order; requestId `<run>:<recipient>#<n>`. */
function requests(run: string, count: number) {
  return Array.from({ length: count }, (_, i) => {
    const k = i % K;
    const n = Math.floor(i / K);
    const requestId = `${run}:${recipient(k)}#${n}`;
    return {
      key: recipient(k),
      value: JSON.stringify({
        requestId,
        type: 'text',
        recipient: { channelType: 'whatsapp', id: recipient(k) },
        message: { text: `benchmark message ${n}` },
        callbackData: requestId,
      }),
    };
  });
}

async function preload(kafka: Kafka, topic: string, records: { key: string; value: string }[]): Promise<void> {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  for (let i = 0; i < records.length; i += 2000)
    await producer.send({ topic, acks: -1, messages: records.slice(i, i + 2000) });
  await producer.disconnect();
}

interface Collected {
  byRequest: Map<string, { latencyMs: number; at: number; outcome: string }>;
  records: number;
  lastAt: number;
  consumer: Consumer;
}

async function collectResults(kafka: Kafka, topic: string): Promise<Collected> {
  const consumer = kafka.consumer({ groupId: `bench-collector-${randomUUID()}`, maxWaitTimeInMs: 100 });
  const collected: Collected = { byRequest: new Map(), records: 0, lastAt: 0, consumer };
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    eachBatch: async ({ batch }) => {
      for (const m of batch.messages) {
        const value = JSON.parse(m.value!.toString()) as { requestId: string; outcome: string };
        const at = Number(m.timestamp);
        const taken = Number(m.headers?.['received-at']?.toString());
        collected.records += 1;
        collected.lastAt = Math.max(collected.lastAt, at);
        if (!collected.byRequest.has(value.requestId))
          collected.byRequest.set(value.requestId, { latencyMs: at - taken, at, outcome: value.outcome });
      }
    },
  });
  return collected;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

function procStatus(pid: number): { peakRssMb: number; cpuSeconds: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const hwm = Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? NaN);
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return { peakRssMb: hwm / 1024, cpuSeconds: ticks / 100 };
}

async function simJson<T>(url: string, method: 'GET' | 'DELETE' | 'PUT', path: string, body?: unknown): Promise<T> {
  const res = await request(`${url}${path}`, {
    method,
    ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
  });
  return (await res.body.json()) as T;
}

async function waitUntil(condition: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The sender's request ledger topic of a run, compacted, added to `topics` (sendLedger). */
async function createLedger(kafka: Kafka, run: string, topics: Record<string, string>): Promise<void> {
  topics.sendLedger = `bench-ledger-${run}`;
  await createTopics(kafka, [topics.sendLedger], [{ name: 'cleanup.policy', value: 'compact,delete' }]);
}

async function createTopics(
  kafka: Kafka,
  topics: string[],
  configEntries?: { name: string; value: string }[],
): Promise<void> {
  const admin = kafka.admin();
  await admin.connect();
  // The project's bootstrap waits until every leader really hosts its partitions (kafkajs's own
  // waitForLeaders gives up on a busy broker with "does not host this topic-partition").
  try {
    await ensureTopics(
      admin,
      topics.map((topic) => ({
        topic,
        partitions: PARTITIONS,
        replicationFactor: 1,
        ...(configEntries ? { configEntries } : {}),
      })),
    );
  } finally {
    await admin.disconnect();
  }
}

/**
 * A compacted conversations topic with an open window for each of the K recipients (the guard
 * then looks every text up and lets it through: the cost measured is the lookup's).
 */
async function prepareConversations(kafka: Kafka, topic: string): Promise<void> {
  await createTopics(kafka, [topic], [{ name: 'cleanup.policy', value: 'compact' }]);
  const at = new Date();
  const until = new Date(at.getTime() + 24 * 3_600_000);
  const windows = Array.from({ length: K }, (_, k) => ({
    key: `${BUSINESS.id}:${recipient(k)}`,
    value: JSON.stringify({
      businessId: BUSINESS.id,
      customer: recipient(k),
      lastInboundAt: at.toISOString(),
      windowOpenUntil: until.toISOString(),
    }),
  }));
  await preload(kafka, topic, windows);
}

async function runScenario(
  kafka: Kafka,
  brokers: string[],
  simulatorUrl: string,
  scenario: Scenario,
): Promise<ScenarioResult> {
  const run = randomUUID().slice(0, 8);
  const topics = {
    sendRequests: `bench-req-${run}`,
    sendResults: `bench-res-${run}`,
    sendRequestsDlq: `bench-dlq-${run}`,
  };
  await createTopics(kafka, Object.values(topics));
  await createLedger(kafka, run, topics);
  const guardEnv: Record<string, string> = {};
  if (scenario.conversationWindow) {
    const conversations = `bench-conv-${run}`;
    await prepareConversations(kafka, conversations);
    Object.assign(guardEnv, {
      MSGBRIDGE__kafka__topics__conversations: conversations,
      MSGBRIDGE__sender__conversationWindow: 'reject',
      MSGBRIDGE__sender__conversationWindowGraceMs: '0',
    });
  }
  const all = requests(run, scenario.requests);
  if (scenario.steadyPerSecond === undefined) {
    line(`[${scenario.name}] preloading ${scenario.requests} requests over ${K} recipients…`);
    await preload(kafka, topics.sendRequests, all);
  }
  await simJson(simulatorUrl, 'DELETE', '/sim/sends');
  const collected = await collectResults(kafka, topics.sendResults);

  // BENCH_SENDER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles the sender.
  const { child } = spawnBenchSender(brokers, simulatorUrl, topics, `bench-sender-${run}`, {
    MSGBRIDGE_LOG_LEVEL: 'warn',
    MSGBRIDGE__sender__concurrency: String(scenario.sender.concurrency),
    MSGBRIDGE__sender__ratePerSecond: String(scenario.sender.ratePerSecond),
    MSGBRIDGE__sender__maxBufferedRequests: String(scenario.sender.maxBufferedRequests),
    ...guardEnv,
  });
  await senderReady(child);
  const readyAt = Date.now();
  const pid = child.pid!;
  const producedAt = new Map<string, number>();
  if (scenario.steadyPerSecond !== undefined) {
    line(
      `[${scenario.name}] producing ${scenario.requests} requests at ${scenario.steadyPerSecond}/s while the sender runs…`,
    );
    const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
    await producer.connect();
    const tickMs = 20;
    const perTick = (scenario.steadyPerSecond * tickMs) / 1000;
    const start = Date.now();
    for (let sent = 0, tick = 0; sent < all.length; tick++) {
      const due = Math.min(all.length, Math.round((tick + 1) * perTick));
      const batch = all.slice(sent, due);
      sent = due;
      const now = Date.now();
      for (const r of batch) producedAt.set((JSON.parse(r.value) as { requestId: string }).requestId, now);
      if (batch.length > 0) await producer.send({ topic: topics.sendRequests, acks: -1, messages: batch });
      const wait = start + (tick + 1) * tickMs - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    }
    await producer.disconnect();
  }
  let outageWindow: { from: number; to: number } | undefined;
  if (scenario.outage) {
    const { afterResults, seconds } = scenario.outage;
    await waitUntil(
      () => collected.byRequest.size >= afterResults,
      15 * 60_000,
      `${afterResults} results before the outage`,
    );
    line(`[${scenario.name}] provider outage: every send answered 5xx for ${seconds} s…`);
    await simJson(simulatorUrl, 'PUT', '/sim/faults', { send5xxRate: 1 });
    const from = Date.now();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    await simJson(simulatorUrl, 'PUT', '/sim/faults', { send5xxRate: 0 });
    outageWindow = { from, to: Date.now() };
  }
  await waitUntil(() => collected.byRequest.size >= scenario.requests, 15 * 60_000, `${scenario.requests} results`);
  const { peakRssMb, cpuSeconds } = procStatus(pid);
  child.kill('SIGTERM');
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  await collected.consumer.disconnect();
  if (code !== 0) line(`[${scenario.name}] the sender exited with ${code}`);

  const sends = await simJson<
    {
      seq: number;
      status: number;
      receivedAt: string;
      body: { callbackData?: string; recipient?: { id: string } } | null;
    }[]
  >(simulatorUrl, 'GET', '/sim/sends');
  const ours = sends.filter((s) => s.body?.callbackData?.startsWith(`${run}:`)).sort((a, b) => a.seq - b.seq);
  const firstSeen = new Set<string>();
  const lastN = new Map<string, number>();
  let orderViolations = 0;
  for (const s of ours) {
    const id = s.body!.callbackData!;
    if (firstSeen.has(id)) continue;
    firstSeen.add(id);
    const [who, n] = id.slice(run.length + 1).split('#') as [string, string];
    const previous = lastN.get(who) ?? -1;
    if (Number(n) !== previous + 1) orderViolations += 1;
    lastN.set(who, Number(n));
  }
  // Backlog: from the moment the sender took the request; steady: from the moment it was produced.
  const latencies = [...collected.byRequest]
    .map(([id, v]) => (scenario.steadyPerSecond === undefined ? v.latencyMs : v.at - producedAt.get(id)!))
    .sort((a, b) => a - b);
  const durationS = (collected.lastAt - readyAt) / 1000;
  const sendsPerSecond = scenario.steadyPerSecond ?? scenario.requests / durationS;
  let outage: OutageFigures | undefined;
  if (outageWindow) {
    const { from, to } = outageWindow;
    const done = [...collected.byRequest.values()];
    const rate = (a: number, b: number) =>
      done.filter((d) => d.at >= a && d.at < b).length / Math.max(0.001, (b - a) / 1000);
    const created = new Map<string, number>();
    for (const s of ours)
      if (s.status >= 200 && s.status < 300)
        created.set(s.body!.callbackData!, (created.get(s.body!.callbackData!) ?? 0) + 1);
    outage = {
      beforePerSecond: rate(readyAt, from),
      duringPerSecond: rate(from, to),
      afterPerSecond: rate(to, collected.lastAt + 1),
      callsDuringOutage: ours.filter((s) => s.status >= 500).length,
      rejected: done.filter((d) => d.outcome !== 'accepted').length,
      createdTwice: [...created.values()].filter((n) => n > 1).length,
      resumedAfterMs: Math.min(...done.filter((d) => d.at >= to).map((d) => d.at)) - to,
    };
  }
  const boundPerSecond = Math.min(scenario.sender.concurrency / (L / 1000), scenario.sender.ratePerSecond);
  return {
    name: scenario.name,
    requests: scenario.requests,
    concurrency: scenario.sender.concurrency,
    ratePerSecond: scenario.sender.ratePerSecond,
    boundPerSecond,
    sendsPerSecond,
    ofBound: sendsPerSecond / boundPerSecond,
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
    peakRssMb,
    cpuSeconds,
    durationS,
    providerCalls: ours.length,
    duplicates: ours.length - firstSeen.size,
    missingResults: scenario.requests - collected.byRequest.size,
    orderViolations,
    ...(outage ? { outage } : {}),
  };
}

interface FailoverResult {
  requests: number;
  deadPartitions: number[];
  assignedAfterMs: number;
  /** Per partition of the killed member: first result after the kill written by the survivor. */
  resumedAfterMs: number[];
  missingResults: number;
  duplicates: number;
}

/** Spawns `msgbridge sender` (the bundle) on the given topics and group; its assignments are kept (log level info). */
function spawnBenchSender(
  brokers: string[],
  simulatorUrl: string,
  topics: Record<string, string>,
  groupId: string,
  extraEnv: Record<string, string> = {},
) {
  const child = spawnSenderBundle(
    {
      KAFKA_BROKERS: brokers.join(','),
      MSGBRIDGE_BUSINESS_ID: BUSINESS.id,
      MSGBRIDGE_API_KEY: BUSINESS.apiKey,
      MSGBRIDGE_PROVIDER_URL: simulatorUrl,
      MSGBRIDGE_LOG_LEVEL: 'info',
      KAFKAJS_NO_PARTITIONER_WARNING: '1',
      MSGBRIDGE__kafka__topics__sendRequests: topics.sendRequests!,
      MSGBRIDGE__kafka__topics__sendResults: topics.sendResults!,
      MSGBRIDGE__kafka__topics__sendRequestsDlq: topics.sendRequestsDlq!,
      MSGBRIDGE__kafka__topics__sendLedger: topics.sendLedger!,
      MSGBRIDGE__kafka__createTopics: 'false',
      // Each process its own request ledger directory (the failover's two members share the topic).
      MSGBRIDGE_SENDER_STATE_DIR: mkdtempSync(join(tmpdir(), 'bench-sender-state-')),
      MSGBRIDGE__sender__groupId: groupId,
      MSGBRIDGE_SENDER_ADMIN_PORT: '0',
      ...extraEnv,
    },
    ['ignore', 'pipe', 'pipe'],
  );
  const assignments: { at: number; partitions: number[] }[] = [];
  for (const stream of [child.stdout!, child.stderr!]) {
    createInterface({ input: stream }).on('line', (l) => {
      if (stream === child.stderr && !l.includes('"level":30')) process.stderr.write(`${l}\n`);
      if (!l.includes('"msg":"assignment"')) return;
      const entry = JSON.parse(l) as { time: string; partitions: number[] };
      assignments.push({ at: Date.parse(entry.time), partitions: entry.partitions });
    });
  }
  return { child, assignments };
}

/** Two members share the backlog; one is killed with SIGKILL; the survivor must take over its partitions. */
async function runFailover(kafka: Kafka, brokers: string[], simulatorUrl: string): Promise<FailoverResult> {
  const run = randomUUID().slice(0, 8);
  const topics = {
    sendRequests: `bench-fo-req-${run}`,
    sendResults: `bench-fo-res-${run}`,
    sendRequestsDlq: `bench-fo-dlq-${run}`,
  };
  await createTopics(kafka, Object.values(topics));
  await createLedger(kafka, run, topics);
  const all = requests(run, N).map((r, i) => ({ ...r, partition: (i % K) % PARTITIONS }));
  const partitionOf = new Map(all.map((r) => [(JSON.parse(r.value) as { requestId: string }).requestId, r.partition]));
  line(`[failover] preloading ${N} requests; two senders, one killed with SIGKILL…`);
  await preload(kafka, topics.sendRequests, all);
  await simJson(simulatorUrl, 'DELETE', '/sim/sends');
  const collected = await collectResults(kafka, topics.sendResults);
  const groupId = `bench-fo-${run}`;
  const a = spawnBenchSender(brokers, simulatorUrl, topics, groupId);
  const b = spawnBenchSender(brokers, simulatorUrl, topics, groupId);
  try {
    const owned = (m: typeof a) => m.assignments.at(-1)?.partitions ?? [];
    await waitUntil(
      () => owned(a).length > 0 && owned(b).length > 0 && owned(a).length + owned(b).length === PARTITIONS,
      120_000,
      'both members assigned',
    );
    await waitUntil(() => collected.byRequest.size >= N / 4, 15 * 60_000, 'a quarter of the results');
    const dead = owned(a);
    const killedAt = Date.now();
    a.child.kill('SIGKILL');
    await waitUntil(() => collected.byRequest.size >= N, 15 * 60_000, `${N} results`);
    const takeover = b.assignments.find((x) => x.at > killedAt && dead.every((p) => x.partitions.includes(p)));
    // The dead member's last writes have been read a second after its death.
    const resumedAfterMs = dead.map((p) => {
      const times = [...collected.byRequest]
        .filter(([id, v]) => v.at > killedAt + 1000 && partitionOf.get(id) === p)
        .map(([, v]) => v.at);
      return times.length > 0 ? Math.min(...times) - killedAt : NaN;
    });
    const sends = await simJson<{ body: { callbackData?: string } | null }[]>(simulatorUrl, 'GET', '/sim/sends');
    const ours = sends.filter((s) => s.body?.callbackData?.startsWith(`${run}:`));
    return {
      requests: N,
      deadPartitions: dead,
      assignedAfterMs: takeover ? takeover.at - killedAt : NaN,
      resumedAfterMs,
      missingResults: N - collected.byRequest.size,
      duplicates: ours.length - new Set(ours.map((s) => s.body!.callbackData)).size,
    };
  } finally {
    a.child.kill('SIGKILL');
    b.child.kill('SIGTERM');
    await collected.consumer.disconnect();
  }
}

/** kafkajs eachMessage, one awaited provider call and one awaited result publish per request. */
async function runNaive(
  kafka: Kafka,
  simulatorUrl: string,
): Promise<{ completed: number; perSecond: number; seconds: number }> {
  const run = randomUUID().slice(0, 8);
  const requestsTopic = `bench-naive-req-${run}`;
  const resultsTopic = `bench-naive-res-${run}`;
  await createTopics(kafka, [requestsTopic, resultsTopic]);
  await preload(kafka, requestsTopic, requests(run, Math.min(N, Math.ceil((NAIVE_SECONDS * 1000 * 2) / L))));
  const pool = new Pool(simulatorUrl, { connections: 1 });
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const consumer = kafka.consumer({ groupId: `bench-naive-${run}` });
  await consumer.connect();
  await consumer.subscribe({ topics: [requestsTopic], fromBeginning: true });
  let completed = 0;
  let first = 0;
  let last = 0;
  let stop = false;
  await consumer.run({
    eachMessage: async ({ message }) => {
      if (stop) return;
      const {
        requestId,
        businessId: _b,
        type: _t,
        ...body
      } = JSON.parse(message.value!.toString()) as Record<string, unknown>;
      const res = await pool.request({
        method: 'POST',
        path: `/v1/businesses/${BUSINESS.id}/send/messages`,
        headers: { accept: 'application/json', 'content-type': 'application/json', 'x-api-key': BUSINESS.apiKey },
        body: JSON.stringify(body),
      });
      const created = (await res.body.json()) as { id: string };
      await producer.send({
        topic: resultsTopic,
        acks: -1,
        messages: [
          { key: created.id, value: JSON.stringify({ requestId, outcome: 'accepted', messageId: created.id }) },
        ],
      });
      if (first === 0) first = Date.now();
      completed += 1;
      last = Date.now();
    },
  });
  await new Promise((r) => setTimeout(r, NAIVE_SECONDS * 1000));
  stop = true;
  await consumer.disconnect();
  await producer.disconnect();
  await pool.close();
  const seconds = (last - first) / 1000;
  return { completed, perSecond: (completed - 1) / seconds, seconds };
}

async function main() {
  await bundleCli();
  let local: LocalBroker | undefined;
  let brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
  if (brokers.length === 0) {
    local = await startLocalBroker({ heapMb: 768, partitions: PARTITIONS, onProgress: (l) => line(`[kafka] ${l}`) });
    brokers = [local.bootstrap];
  }
  const dir = mkdtempSync(join(tmpdir(), 'msgbridge-bench-sender-'));
  const configFile = join(dir, 'config.json');
  writeFileSync(
    configFile,
    JSON.stringify({
      businesses: [{ id: BUSINESS.id, signingSecrets: [BUSINESS.secret], apiKey: BUSINESS.apiKey }],
      simulator: {
        port: 0,
        faults: { sendLatencyMs: { min: L, max: L } },
        // No webhooks are registered; keep the status lifecycle cheap.
        lifecycle: { sentDelayMs: 0, deliveredDelayMs: 0, readDelayMs: 0 },
        history: { sends: Math.max(N, N_CONCURRENCY, STEADY_REQUESTS) * 2, messages: 1000, deliveries: 1000 },
      },
      log: { level: 'warn' },
    }),
  );
  const simulator = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'simulator', '--config', configFile], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let simulatorUrl: string;
  try {
    const started = await firstLine(simulator, (l) => l.startsWith('provider simulator at'), 'stderr');
    simulatorUrl = /at (http:\/\/[^\s;]+)/.exec(started)![1]!;
  } catch (err) {
    simulator.kill('SIGKILL');
    await local?.stop();
    throw err;
  }

  const kafka = new Kafka({ clientId: 'bench-sender', brokers, logLevel: logLevel.NOTHING, retry: { retries: 10 } });
  const results: ScenarioResult[] = [];
  const failovers: FailoverResult[] = [];
  let naive: Awaited<ReturnType<typeof runNaive>> | undefined;
  try {
    const scenarios: Scenario[] = [
      {
        name: 'default (rate-bound)',
        requests: N,
        sender: { concurrency: 64, ratePerSecond: 200, maxBufferedRequests: 2000 },
      },
      {
        name: 'rate limit lifted (concurrency-bound)',
        requests: N_CONCURRENCY,
        sender: { concurrency: 64, ratePerSecond: 100_000, maxBufferedRequests: 2000 },
      },
      {
        name: 'rate limit lifted (concurrency-bound), conversation window guard on',
        requests: N_CONCURRENCY,
        sender: { concurrency: 64, ratePerSecond: 100_000, maxBufferedRequests: 2000 },
        conversationWindow: true,
      },
      {
        name: 'steady 100/s, no backlog (latency)',
        requests: STEADY_REQUESTS,
        steadyPerSecond: 100,
        sender: { concurrency: 64, ratePerSecond: 200, maxBufferedRequests: 2000 },
      },
      {
        name: `provider outage ${OUTAGE_SECONDS} s mid-stream (default config)`,
        requests: N,
        sender: { concurrency: 64, ratePerSecond: 200, maxBufferedRequests: 2000 },
        outage: { afterResults: Math.floor(N / 4), seconds: OUTAGE_SECONDS },
      },
    ];
    const only = args.values.only;
    if (only) scenarios.splice(0, scenarios.length, ...scenarios.filter((sc) => sc.name.includes(only)));
    // Rounds interleave the scenarios, so that a noisy neighbour hits them alike; each
    // scenario reports its median round (by throughput, by p99 for the steady one).
    const rounds = new Map<string, ScenarioResult[]>(scenarios.map((sc) => [sc.name, []]));
    const naiveRounds: Awaited<ReturnType<typeof runNaive>>[] = [];
    for (let round = 1; round <= ROUNDS; round++) {
      for (const scenario of scenarios) {
        const result = await runScenario(kafka, brokers, simulatorUrl, scenario);
        line(`[${scenario.name}] round ${round}: ${JSON.stringify(result)}`);
        rounds.get(scenario.name)!.push(result);
      }
      if (!only || only === 'failover') {
        const failover = await runFailover(kafka, brokers, simulatorUrl);
        line(`[failover] round ${round}: ${JSON.stringify(failover)}`);
        failovers.push(failover);
      }
      if (only && only !== 'naive') continue;
      line(`[naive] round ${round}: eachMessage baseline for ${NAIVE_SECONDS} s…`);
      const n = await runNaive(kafka, simulatorUrl);
      line(`[naive] round ${round}: ${JSON.stringify(n)}`);
      naiveRounds.push(n);
    }
    for (const scenario of scenarios) {
      const list = rounds.get(scenario.name)!;
      const key = (r: ScenarioResult) => (scenario.steadyPerSecond === undefined ? r.sendsPerSecond : -r.p99Ms);
      const sorted = [...list].sort((a, b) => key(a) - key(b));
      const median = sorted[Math.floor(sorted.length / 2)]!;
      results.push({
        ...median,
        // Correctness is reported over every round, not only the median one.
        orderViolations: list.reduce((sum, r) => sum + r.orderViolations, 0),
        missingResults: list.reduce((sum, r) => sum + r.missingResults, 0),
        duplicates: list.reduce((sum, r) => sum + r.duplicates, 0),
        roundsPerSecond: list.map((r) => r.sendsPerSecond),
        roundsP99: list.map((r) => r.p99Ms),
      });
    }
    naive = [...naiveRounds].sort((a, b) => a.perSecond - b.perSecond)[Math.floor(naiveRounds.length / 2)];
  } finally {
    simulator.kill('SIGTERM');
    await local?.stop();
  }

  const fmt = (n: number, d = 0) => n.toLocaleString('en-US', { maximumFractionDigits: d, minimumFractionDigits: d });
  const out: string[] = [];
  out.push(
    `Machine: ${cpus().length} × ${cpus()[0]?.model.trim()}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}; L = ${L} ms, K = ${K} recipients, ${PARTITIONS} partitions.`,
  );
  out.push('');
  out.push(
    '| scenario | N | bound min(c/L, rate) | completed sends/s | of bound | × naive | request→result p50 / p99 | sender peak RSS | sender CPU | order kept | results | duplicate calls |',
  );
  out.push('|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const r of results) {
    if (r.outage) continue;
    const steady = r.name.startsWith('steady');
    if (steady) {
      out.push(
        `| ${r.name} | ${fmt(r.requests)} | — | (${fmt(r.sendsPerSecond)}/s offered) | — | — | ${fmt(r.p50Ms)} / ${fmt(r.p99Ms)} ms | ${fmt(r.peakRssMb)} MiB | ${fmt(r.cpuSeconds, 1)} s | ${r.orderViolations === 0 ? 'yes' : `**no: ${r.orderViolations}**`} | ${fmt(r.requests - r.missingResults)}/${fmt(r.requests)} | ${r.duplicates} |`,
      );
      continue;
    }
    out.push(
      `| ${r.name} | ${fmt(r.requests)} | ${fmt(r.boundPerSecond)}/s | **${fmt(r.sendsPerSecond)}/s** | ${fmt(r.ofBound * 100)}% | ${naive ? `${fmt(r.sendsPerSecond / naive.perSecond, 1)}×` : '—'} | ${fmt(r.p50Ms)} / ${fmt(r.p99Ms)} ms | ${fmt(r.peakRssMb)} MiB | ${fmt(r.cpuSeconds, 1)} s | ${r.orderViolations === 0 ? 'yes' : `**no: ${r.orderViolations}**`} | ${fmt(r.requests - r.missingResults)}/${fmt(r.requests)} | ${r.duplicates} |`,
    );
  }
  out.push('');
  for (const r of results)
    out.push(
      `- ${r.name}: ${ROUNDS} round(s), sends/s ${r.roundsPerSecond?.map((x) => fmt(x)).join(' / ')}; p99 ${r.roundsP99?.map((x) => fmt(x)).join(' / ')} ms`,
    );
  if (naive)
    out.splice(
      out.length - results.length - 1,
      0,
      `| naive baseline (eachMessage, awaited call + publish) | ${fmt(naive.completed)} in ${fmt(naive.seconds, 1)} s | 1/L = ${fmt(1000 / L)}/s | **${fmt(naive.perSecond, 1)}/s** | — | 1× | — | — | — | — | — | — |`,
    );
  const outages = results.filter((r) => r.outage);
  if (outages.length > 0) {
    out.push('');
    out.push(
      '| scenario | N | sends/s before / during / after | calls during the outage | first result after it | rejected | created twice | results | order kept |',
    );
    out.push('|---|---|---|---|---|---|---|---|---|');
    for (const r of outages) {
      const o = r.outage!;
      out.push(
        `| ${r.name} | ${fmt(r.requests)} | ${fmt(o.beforePerSecond)} / ${fmt(o.duringPerSecond)} / ${fmt(o.afterPerSecond)} | ${fmt(o.callsDuringOutage)} | ${fmt(o.resumedAfterMs)} ms | **${o.rejected}** | ${o.createdTwice} | ${fmt(r.requests - r.missingResults)}/${fmt(r.requests)} | ${r.orderViolations === 0 ? 'yes' : `**no: ${r.orderViolations}**`} |`,
      );
    }
  }
  if (failovers.length > 0) {
    out.push('');
    out.push(
      '| failover round | N | partitions of the killed member | assigned to the survivor after | first result per partition after | results | duplicate calls |',
    );
    out.push('|---|---|---|---|---|---|---|');
    failovers.forEach((f, i) =>
      out.push(
        `| ${i + 1} | ${fmt(f.requests)} | ${f.deadPartitions.join(', ')} | ${fmt(f.assignedAfterMs)} ms | ${f.resumedAfterMs.map((ms) => fmt(ms)).join(' / ')} ms | ${fmt(f.requests - f.missingResults)}/${fmt(f.requests)} | ${f.duplicates} |`,
      ),
    );
  }
  process.stdout.write(`${out.join('\n')}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
