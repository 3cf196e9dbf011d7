// Sender throughput, side by side with Redpanda Connect (issue 20). N text requests over K
// recipients are preloaded into a fresh `send-requests`; the Go fake provider answers every call
// after L ms (it is never the bottleneck); each target drains the backlog with C calls in flight:
//   msgbridge            `msgbridge sender` bundled to plain JavaScript (as `node dist/cli.js`
//                        runs), rate limit lifted, sender.concurrency = sender.maxUnrecordedCalls = C
//   rpconnect            Redpanda Connect (BENCH_RPCONNECT_BIN) on sender.yaml, CONCURRENCY = C, stock HTTP
//                        transport (a new connection for most calls)
//   rpconnect-keepalive  the same with a keep-alive pool of C connections
//   msgbridge-xN         N sender processes in one consumer group (2 ≤ N ≤ 8), C/N calls in
//                        flight and the rate limit / N each: replicas, the way to more cores
// Figures per run, in the steady window (from 10% to 90% of the results, sampled every 100 ms):
// results/s, CPU per result (utime + stime of the target from /proc), and over the whole run the
// peak RSS (VmHWM), results missing, requests sent twice and calls out of recipient order (the
// provider counts both from the text `rid=… k=… s=…`). Also in the steady window: how busy the
// whole machine was and the cores each process used (target, broker, provider, this bench
// reading results), since they all share the machine. Rounds interleave the targets; the
// summary gives medians and the ratios of the medians.
//
//   npx tsx bench/sender-throughput.ts [--requests 20000] [--recipients 2000] [--latency-ms 20]
//       [--in-flight 128,512] [--rounds 3] [--targets msgbridge,rpconnect,rpconnect-keepalive]
//       [--rate 200]   (msgbridge's sender.ratePerSecond: the cost of a sender that waits on its limit)
//       [--warmup 20000]  (requests worked before the measured N, every target alike; whole-run
//                         figures include them)
// KAFKA_BROKERS=host:port uses an existing Kafka; otherwise the embedded local broker starts.
// BENCH_SENDER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles msgbridge's sender;
// with "--trace-gc", BENCH_SENDER_STDOUT=/tmp/gc.log keeps what V8 prints;
// BENCH_SENDER_ENV (a JSON object of environment variables) tries other settings.
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel } from 'kafkajs';
import { benchArgs } from './args.js';
import { bundleCli, senderReady, spawnSenderBundle } from './cli-bundle.js';
import { startLocalBroker, type LocalBroker } from '../src/local-kafka/local-broker.js';
import { withKafkajsAdmin } from '../src/kafka/client.js';
import { ensureTopics } from '../src/kafka/topics.js';
import {
  cpuByThread,
  cpuSeconds,
  freePort,
  machineTicks,
  median,
  peakRssMb,
  peerBinary,
  peerConfig,
  startFakeProvider,
  startRpconnect,
  stopChild,
  track,
  type FakeProvider,
  type FakeProviderStats,
} from './peers.js';

const args = benchArgs(import.meta.url, {
  requests: { type: 'string', default: '20000' },
  recipients: { type: 'string', default: '2000' },
  'latency-ms': { type: 'string', default: '20' },
  'in-flight': { type: 'string', default: '128,512' },
  rounds: { type: 'string', default: '3' },
  targets: { type: 'string', default: 'msgbridge,rpconnect,rpconnect-keepalive' },
  partitions: { type: 'string', default: '12' },
  /** msgbridge's sender.ratePerSecond (default: lifted); the peers have no rate limit. */
  rate: { type: 'string' },
  /** Requests each target works before the measured ones (its JIT warmed up, as a running relay's is). */
  warmup: { type: 'string', default: '0' },
});
const N = args.wholeNumber('requests', 10);
const W = args.wholeNumber('warmup');
/** Requests preloaded per run: the warm-up ones, then the N measured. */
const TOTAL = W + N;
const K = args.wholeNumber('recipients', 1);
const L = args.wholeNumber('latency-ms');
const IN_FLIGHT = args.wholeNumbers('in-flight');
const ROUNDS = args.wholeNumber('rounds', 1);
const PARTITIONS = args.wholeNumber('partitions', 1);
const RATE = args.values.rate === undefined ? undefined : args.decimal('rate');
const TARGETS = args.values.targets.split(',').map((t) => t.trim());
const BUSINESS = { id: 'biz_bench', apiKey: 'bench-api-key', secret: 'bench-secret' };
for (const t of TARGETS)
  if (senderProcesses(t) === 0 && !['rpconnect', 'rpconnect-keepalive'].includes(t))
    args.fail(`unknown target ${t} (msgbridge, msgbridge-x2 … msgbridge-x8, rpconnect, rpconnect-keepalive)`);

interface Run {
  target: string;
  inFlight: number;
  round: number;
  resultsPerSecond: number;
  cpuPerResultMs: number;
  /** The target's CPU over the whole run (start-up included) per result. */
  cpuPerResultWholeMs: number;
  /** CPU per result over each tenth of the measured requests, in order. */
  cpuPerResultByTenthMs: number[];
  peakRssMb: number;
  missing: number;
  provider: FakeProviderStats;
  /** CPU seconds of the whole run by thread name. */
  cpuByThread: Record<string, number>;
  /**
   * Share of the machine's CPU (all cores, every process: broker, provider, reader, target) busy in the steady window.
   */
  machineBusyPct: number;
  /**
   * Cores each process used in the steady window: the target, the broker (when the bench started it), the Go provider,
   * this bench (the result reader).
   */
  cores: { target: number; broker?: number; provider: number; reader: number };
  /**
   * msgbridge's metrics in the steady window: provider calls in flight, requests buffered, commit lag, call time as it
   * measures it.
   */
  msgbridge?: {
    meanInFlight: number;
    meanBuffered: number;
    meanCommitLag: number;
    commitsPerSecond: number;
    meanCallMs: number;
    eventLoopLagP99Ms?: number;
    eventLoopLagMaxMs?: number;
  };
}

async function scrape(port: number) {
  try {
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    const sum = (name: string) =>
      [...text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+-]+)$`, 'gm'))].reduce(
        (n, m) => n + Number(m[1]),
        0,
      );
    return {
      inFlight: sum('msgbridge_sender_provider_in_flight'),
      buffered: sum('msgbridge_sender_buffered_requests'),
      commitLag: sum('msgbridge_sender_commit_lag'),
      calls: {
        sum: sum('msgbridge_sender_provider_request_duration_seconds_sum'),
        count: sum('msgbridge_sender_provider_request_duration_seconds_count'),
      },
      commits: sum('msgbridge_sender_commits_total'),
      // How late the sender's 100 ms timer fired since the previous scrape (src/runtime/event-loop-delay.ts).
      lagP99Ms: sum('msgbridge_nodejs_eventloop_lag_p99_seconds') * 1000,
      lagMaxMs: sum('msgbridge_nodejs_eventloop_lag_max_seconds') * 1000,
    };
  } catch {
    return undefined;
  }
}

type Scrape = NonNullable<Awaited<ReturnType<typeof scrape>>>;

/** The members' metrics as one sender's: counts summed, event-loop figures the worst member's. */
function combine(scrapes: (Scrape | undefined)[]): Scrape | undefined {
  if (scrapes.some((m) => m === undefined)) return undefined;
  const all = scrapes as Scrape[];
  const sum = (f: (m: Scrape) => number) => all.reduce((n, m) => n + f(m), 0);
  return {
    inFlight: sum((m) => m.inFlight),
    buffered: sum((m) => m.buffered),
    commitLag: sum((m) => m.commitLag),
    calls: { sum: sum((m) => m.calls.sum), count: sum((m) => m.calls.count) },
    commits: sum((m) => m.commits),
    lagP99Ms: Math.max(...all.map((m) => m.lagP99Ms)),
    lagMaxMs: Math.max(...all.map((m) => m.lagMaxMs)),
  };
}

/** A median as printed: three decimals at most (0.115, not 0.11499999999999999). */
const tidy = (x: number) => Math.round(x * 1000) / 1000;

/** How many msgbridge sender processes a target runs: 1 for `msgbridge`, n for `msgbridge-xN`, 0 for a peer. */
function senderProcesses(target: string): number {
  if (target === 'msgbridge' || target === 'msgbridge-before') return 1;
  const n = /^msgbridge-x([2-8])$/.exec(target)?.[1];
  return n === undefined ? 0 : Number(n);
}

/**
 * Results a second a target cannot exceed: its calls in flight over the provider's latency, and msgbridge's rate limit.
 */
function boundPerSecond(target: string, inFlight: number): number {
  return Math.min(inFlight / (L / 1000), senderProcesses(target) > 0 && RATE !== undefined ? RATE : Infinity);
}

const log = (text: string) => process.stderr.write(`${text}\n`);

function recipient(k: number): string {
  return `+1555${String(3_000_000 + k).padStart(7, '0')}`;
}

/** Recipient k gets its requests s = 0, 1, 2… in produce order (one partition per key keeps it). */
function requests(run: string) {
  return Array.from({ length: TOTAL }, (_, i) => {
    const k = i % K;
    const s = Math.floor(i / K);
    const requestId = `${run}-${k}-${s}`;
    const to = recipient(k);
    return {
      key: to,
      value: JSON.stringify({
        requestId,
        type: 'text',
        recipient: { channelType: 'whatsapp', id: to },
        message: { text: `rid=${requestId} k=${to} s=${s} benchmark` },
      }),
    };
  });
}

async function prepare(kafka: Kafka, run: string) {
  const topics = {
    requests: `tp-req-${run}`,
    results: `tp-res-${run}`,
    dlq: `tp-dlq-${run}`,
    ledger: `tp-ledger-${run}`,
  };
  await withKafkajsAdmin(kafka, (admin) =>
    ensureTopics(
      admin,
      Object.values(topics).map((topic) => ({
        topic,
        partitions: PARTITIONS,
        replicationFactor: 1,
        ...(topic === topics.ledger ? { configEntries: [{ name: 'cleanup.policy', value: 'compact,delete' }] } : {}),
      })),
    ),
  );
  return topics;
}

async function preload(kafka: Kafka, run: string, topic: string) {
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const all = requests(run);
  for (let i = 0; i < all.length; i += 2000) await producer.send({ topic, acks: -1, messages: all.slice(i, i + 2000) });
  await producer.disconnect();
}

/** Waits until the group is stable with `members` members: several senders then start together. */
async function groupFormed(kafka: Kafka, groupId: string, members: number) {
  await withKafkajsAdmin(kafka, async (admin) => {
    const deadline = Date.now() + 120_000;
    for (;;) {
      const { groups } = await admin.describeGroups([groupId]);
      if (groups[0]?.state === 'Stable' && groups[0].members.length === members) return;
      if (Date.now() > deadline) throw new Error(`group ${groupId}: not ${members} stable members after 2 minutes`);
      await new Promise((r) => setTimeout(r, 200));
    }
  });
}

/**
 * Counts distinct request ids on the results topic as they arrive. It shares the machine with
 * the target, so its fetches wait up to 50 ms for 1 MiB (minBytes), and it never commits: fetching at
 * the first byte and committing after every batch, it used 0.24–0.28 cores at 4,000 results/s
 * (0.10–0.14 now).
 */
async function collect(kafka: Kafka, topic: string) {
  const seen = new Set<string>();
  const consumer = kafka.consumer({
    groupId: `tp-collect-${randomUUID()}`,
    maxWaitTimeInMs: 50,
    minBytes: 1024 * 1024,
    maxBytes: 16 * 1024 * 1024,
  });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      for (const m of batch.messages) seen.add((JSON.parse(m.value!.toString()) as { requestId: string }).requestId);
    },
  });
  return { seen, stop: () => consumer.disconnect() };
}

/**
 * `msgbridge-before` is another checkout's build (BENCH_SENDER_BEFORE_CLI=<its dist/cli.js>), for
 * an A/B in one run: a release before the request ledger and the admin port, so it gets neither
 * setting (its strict configuration would refuse them) and its health port instead.
 */
function beforeCli(target: string): string | undefined {
  if (target !== 'msgbridge-before') return undefined;
  const cli = process.env.BENCH_SENDER_BEFORE_CLI;
  if (!cli)
    throw new Error('the msgbridge-before target runs another build: set BENCH_SENDER_BEFORE_CLI to its dist/cli.js');
  return cli;
}

async function startMsgbridge(
  brokers: string[],
  providerUrl: string,
  topics: Record<string, string>,
  inFlight: number,
  run: string,
  adminPort: number,
  members = 1,
  target = 'msgbridge',
): Promise<ChildProcess> {
  const before = beforeCli(target);
  const own = before
    ? { MSGBRIDGE__sender__healthPort: String(adminPort) }
    : {
        MSGBRIDGE__sender__adminPort: String(adminPort),
        MSGBRIDGE__kafka__topics__sendLedger: topics.ledger!,
        // C calls in flight: as many may wait for their outcome to be recorded (the build before had no such bound).
        MSGBRIDGE__sender__maxUnrecordedCalls: String(inFlight),
        MSGBRIDGE_SENDER_STATE_DIR: mkdtempSync(join(tmpdir(), 'bench-sender-state-')),
      };
  const child = track(
    spawnSenderBundle(
      {
        ...own,
        KAFKA_BROKERS: brokers.join(','),
        MSGBRIDGE_BUSINESS_ID: BUSINESS.id,
        MSGBRIDGE_API_KEY: BUSINESS.apiKey,
        MSGBRIDGE_PROVIDER_URL: providerUrl,
        MSGBRIDGE_LOG_LEVEL: 'warn',
        MSGBRIDGE__kafka__topics__sendRequests: topics.requests!,
        MSGBRIDGE__kafka__topics__sendResults: topics.results!,
        MSGBRIDGE__kafka__topics__sendRequestsDlq: topics.dlq!,
        MSGBRIDGE__kafka__createTopics: 'false',
        MSGBRIDGE__sender__groupId: `tp-sender-${run}`,
        MSGBRIDGE__sender__concurrency: String(inFlight),
        MSGBRIDGE__sender__ratePerSecond: String(RATE === undefined ? 1_000_000 : RATE / members),
        MSGBRIDGE__provider__connections: String(inFlight),
        // BENCH_SENDER_ENV='{"MSGBRIDGE__sender__maxBufferedRequests":"8000"}' tries a setting.
        ...(JSON.parse(process.env.BENCH_SENDER_ENV ?? '{}') as Record<string, string>),
      },
      ['ignore', 'pipe', 'inherit'],
      before,
    ),
  );
  await senderReady(child);
  return child;
}

async function runOne(
  kafka: Kafka,
  brokers: string[],
  brokerPid: number | undefined,
  provider: FakeProvider,
  rpconnect: string | undefined,
  target: string,
  inFlight: number,
  round: number,
): Promise<Run | undefined> {
  const run = randomUUID().slice(0, 8);
  log(
    `[${target} ×${inFlight}] round ${round}: preloading ${TOTAL} requests over ${K} recipients${W > 0 ? ` (the first ${W} to warm up)` : ''}…`,
  );
  const topics = await prepare(kafka, run);
  const processes = senderProcesses(target);
  // Several senders join first and find the backlog together; one target finds it preloaded.
  if (processes <= 1) await preload(kafka, run, topics.requests);
  await provider.reset();
  const results = await collect(kafka, topics.results);
  const children: ChildProcess[] = [];
  const adminPorts: number[] = [];
  if (processes > 0) {
    // Members of one group, the calls in flight split between them (the operator's way to use more cores).
    for (let i = 0; i < processes; i++) adminPorts.push(await freePort());
    children.push(
      ...(await Promise.all(
        adminPorts.map((port) =>
          startMsgbridge(brokers, provider.url, topics, Math.ceil(inFlight / processes), run, port, processes, target),
        ),
      )),
    );
    if (processes > 1) {
      await groupFormed(kafka, `tp-sender-${run}`, processes);
      await preload(kafka, run, topics.requests);
    }
  } else {
    if (!rpconnect) return undefined;
    const env: Record<string, string> = {
      KAFKA_BROKERS: brokers.join(','),
      PROVIDER_URL: provider.url,
      BUSINESS_ID: BUSINESS.id,
      API_KEY: BUSINESS.apiKey,
      REQUEST_TOPIC: topics.requests,
      RESULT_TOPIC: topics.results,
      GROUP: `tp-rpc-${run}`,
      CONCURRENCY: String(inFlight),
    };
    if (target === 'rpconnect-keepalive') env.RPC_HTTP_MAX_IDLE_PER_HOST = String(inFlight);
    children.push((await startRpconnect(rpconnect, peerConfig('sender.yaml'), env)).child);
  }
  const pids = children.map((c) => c.pid!);
  const cpuOfTarget = () => pids.reduce((n, pid) => n + cpuSeconds(pid), 0);
  const samples: {
    at: number;
    count: number;
    cpu: number;
    machine: { busy: number; total: number };
    others: { broker: number; provider: number; reader: number };
  }[] = [];
  const others = () => {
    const own = process.cpuUsage();
    return {
      broker: brokerPid === undefined ? NaN : cpuSeconds(brokerPid),
      provider: cpuSeconds(provider.pid),
      reader: (own.user + own.system) / 1e6,
    };
  };
  // msgbridge's own view, sampled in the steady window: calls in flight, requests buffered, call time.
  const gauges: { inFlight: number; buffered: number; commitLag: number; lagP99Ms: number; lagMaxMs: number }[] = [];
  const calls = { before: { sum: 0, count: 0 }, after: { sum: 0, count: 0 } };
  let commits = { before: 0, after: 0, from: 0, to: 0 };
  // About twenty scrapes of msgbridge's /metrics per run, at least 0.5 s apart: each costs the
  // sender about a millisecond of CPU, which twice a second was 5% of its cost at 200/s (a
  // Prometheus scrapes every 15 s or more; the peer is not scraped at all).
  const expectedSeconds = TOTAL / boundPerSecond(target, inFlight);
  const scrapeEvery = Math.max(5, Math.round(expectedSeconds / 2));
  const allowedMinutes = Math.max(10, Math.ceil((3 * expectedSeconds) / 60));
  const deadline = Date.now() + allowedMinutes * 60_000;
  while (results.seen.size < TOTAL) {
    const exited = children.find((c) => c.exitCode !== null);
    if (exited) throw new Error(`${target} exited with ${exited.exitCode} after ${results.seen.size} results`);
    if (Date.now() > deadline)
      throw new Error(`${target}: ${results.seen.size} of ${TOTAL} results after ${allowedMinutes} minutes`);
    samples.push({
      at: performance.now(),
      count: results.seen.size,
      cpu: cpuOfTarget(),
      machine: machineTicks(),
      others: others(),
    });
    const share = (results.seen.size - W) / N;
    if (processes > 0 && share >= 0.1 && share < 0.9 && samples.length % scrapeEvery === 0) {
      const m = combine(await Promise.all(adminPorts.map(scrape)));
      if (m) {
        // The first scrape's event-loop figures cover the sender's start (loading, compiling).
        const first = calls.before.count === 0;
        gauges.push({
          inFlight: m.inFlight,
          buffered: m.buffered,
          commitLag: m.commitLag,
          lagP99Ms: first ? NaN : m.lagP99Ms,
          lagMaxMs: first ? NaN : m.lagMaxMs,
        });
        if (first) {
          calls.before = m.calls;
          commits = { ...commits, before: m.commits, from: performance.now() };
        }
        calls.after = m.calls;
        commits = { ...commits, after: m.commits, to: performance.now() };
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  samples.push({
    at: performance.now(),
    count: results.seen.size,
    cpu: cpuOfTarget(),
    machine: machineTicks(),
    others: others(),
  });
  // Several processes: the sum of their peaks (an upper bound of what they held at once).
  const rss = pids.reduce((n, pid) => n + peakRssMb(pid), 0);
  const whole = cpuOfTarget();
  const threads: Record<string, number> = {};
  for (const pid of pids)
    for (const [name, seconds] of Object.entries(cpuByThread(pid))) threads[name] = (threads[name] ?? 0) + seconds;
  await Promise.all(children.map((c) => stopChild(c)));
  await results.stop();
  const from = samples.find((s) => s.count >= W + 0.1 * N)!;
  const to = samples.find((s) => s.count >= W + 0.9 * N)!;
  const done = to.count - from.count;
  const steadySeconds = (to.at - from.at) / 1000;
  const cores = (seconds: number) => Math.round((seconds / steadySeconds) * 100) / 100;
  // The first scrape's event-loop figures (the sender's start) are NaN: left out.
  const lagP99 = gauges.map((g) => g.lagP99Ms).filter((v) => !Number.isNaN(v));
  const lagMax = gauges.map((g) => g.lagMaxMs).filter((v) => !Number.isNaN(v));
  // How the cost moves through the run (a JIT warming up, a bound reached): each tenth of N.
  const tenths = Array.from({ length: 10 }, (_, i) => {
    const a = samples.find((x) => x.count >= W + (i / 10) * N)!;
    const b = samples.find((x) => x.count >= W + ((i + 1) / 10) * N)!;
    return b.count > a.count ? Math.round(((b.cpu - a.cpu) / (b.count - a.count)) * 1e5) / 100 : NaN;
  });
  const result: Run = {
    target,
    inFlight,
    round,
    resultsPerSecond: Math.round(done / steadySeconds),
    cpuPerResultMs: Math.round(((to.cpu - from.cpu) / done) * 1e5) / 100,
    cpuPerResultWholeMs: Math.round((whole / TOTAL) * 1e5) / 100,
    cpuPerResultByTenthMs: tenths,
    peakRssMb: Math.round(rss),
    missing: TOTAL - results.seen.size,
    provider: await provider.stats(),
    cpuByThread: threads,
    cores: {
      target: cores(to.cpu - from.cpu),
      ...(brokerPid === undefined ? {} : { broker: cores(to.others.broker - from.others.broker) }),
      provider: cores(to.others.provider - from.others.provider),
      reader: cores(to.others.reader - from.others.reader),
    },
    machineBusyPct: Math.round(
      ((to.machine.busy - from.machine.busy) / Math.max(1, to.machine.total - from.machine.total)) * 100,
    ),
    ...(gauges.length > 0
      ? {
          msgbridge: {
            meanInFlight: Math.round(gauges.reduce((n, g) => n + g.inFlight, 0) / gauges.length),
            meanBuffered: Math.round(gauges.reduce((n, g) => n + g.buffered, 0) / gauges.length),
            meanCommitLag: Math.round(gauges.reduce((n, g) => n + g.commitLag, 0) / gauges.length),
            commitsPerSecond: Math.round(
              (commits.after - commits.before) / Math.max(0.001, (commits.to - commits.from) / 1000),
            ),
            meanCallMs:
              Math.round(
                ((calls.after.sum - calls.before.sum) / Math.max(1, calls.after.count - calls.before.count)) * 1e4,
              ) / 10,
            ...(lagP99.length > 0
              ? {
                  eventLoopLagP99Ms: Math.round(median(lagP99) * 10) / 10,
                  eventLoopLagMaxMs: Math.round(Math.max(...lagMax) * 10) / 10,
                }
              : {}),
          },
        }
      : {}),
  };
  log(`[${target} ×${inFlight}] round ${round}: ${JSON.stringify(result)}`);
  return result;
}

async function main() {
  await bundleCli();
  const fake = peerBinary('fakeprovider');
  if (!fake)
    throw new Error('the Go fake provider is needed: set BENCH_FAKEPROVIDER_BIN (docs/benchmarks.md, "Peers")');
  const rpconnect = TARGETS.some((t) => t.startsWith('rpconnect')) ? peerBinary('rpconnect') : undefined;
  let local: LocalBroker | undefined;
  let brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
  if (brokers.length === 0) {
    local = await startLocalBroker({ heapMb: 768, partitions: PARTITIONS, onProgress: (l) => log(`[kafka] ${l}`) });
    brokers = [local.bootstrap];
  }
  const provider = await startFakeProvider(fake, L, BUSINESS.apiKey);
  const kafka = new Kafka({
    clientId: 'bench-sender-throughput',
    brokers,
    logLevel: logLevel.NOTHING,
    retry: { retries: 10 },
  });
  const runs: Run[] = [];
  try {
    for (let round = 1; round <= ROUNDS; round++)
      for (const inFlight of IN_FLIGHT)
        for (const target of TARGETS) {
          const r = await runOne(kafka, brokers, local?.pid, provider, rpconnect, target, inFlight, round);
          if (r) runs.push(r);
        }
  } finally {
    await provider.stop();
    await local?.stop();
  }
  console.log(JSON.stringify(runs, null, 2));
  console.log(
    `\n${N} requests${W > 0 ? ` after ${W} to warm up` : ''} over ${K} recipients, provider latency ${L} ms, ${ROUNDS} round(s), medians (rounds in brackets)\n`,
  );
  console.log(
    '| target | in flight | bound/s | results/s | of bound | CPU ms/result (steady) | CPU ms/result (whole run) | peak RSS MiB | machine busy % | missing | sent twice | out of order | connections |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  const table = new Map<string, { perSecond: number; cpu: number }>();
  for (const inFlight of IN_FLIGHT)
    for (const target of TARGETS) {
      const rs = runs.filter((r) => r.target === target && r.inFlight === inFlight);
      if (rs.length === 0) continue;
      const bound = Math.round(boundPerSecond(target, inFlight));
      const perSecond = median(rs.map((r) => r.resultsPerSecond));
      const cpu = median(rs.map((r) => r.cpuPerResultMs));
      table.set(`${target}@${inFlight}`, { perSecond, cpu });
      const list = (f: (r: Run) => number) => `${tidy(median(rs.map(f)))} (${rs.map(f).join(' / ')})`;
      const sum = (f: (r: Run) => number) => rs.reduce((n, r) => n + f(r), 0);
      console.log(
        `| ${target} | ${inFlight} | ${bound} | ${list((r) => r.resultsPerSecond)} | ${Math.round((perSecond / bound) * 100)}% | ${list((r) => r.cpuPerResultMs)} | ${list((r) => r.cpuPerResultWholeMs)} | ${Math.max(...rs.map((r) => r.peakRssMb))} | ${list((r) => r.machineBusyPct)} | ${sum((r) => r.missing)} | ${sum((r) => r.provider.duplicates)} | ${sum((r) => r.provider.outOfOrder)} | ${list((r) => r.provider.connections)} |`,
      );
    }
  console.log('\nWhere the 2 cores went in the steady window (cores, median of the rounds):\n');
  console.log(
    '| target | in flight | target | broker (when the bench started it) | Go provider | the bench (result reader, /proc sampling, scrapes) | machine busy % |',
  );
  console.log('|---|---|---|---|---|---|---|');
  for (const inFlight of IN_FLIGHT)
    for (const target of TARGETS) {
      const rs = runs.filter((r) => r.target === target && r.inFlight === inFlight);
      if (rs.length === 0) continue;
      const m = (f: (r: Run) => number | undefined) =>
        rs.some((r) => f(r) === undefined) ? '–' : tidy(median(rs.map((r) => f(r)!)));
      console.log(
        `| ${target} | ${inFlight} | ${m((r) => r.cores.target)} | ${m((r) => r.cores.broker)} | ${m((r) => r.cores.provider)} | ${m((r) => r.cores.reader)} | ${m((r) => r.machineBusyPct)} |`,
      );
    }
  console.log('');
  for (const inFlight of IN_FLIGHT)
    for (const mine of TARGETS.filter((t) => senderProcesses(t) > 0)) {
      const own = table.get(`${mine}@${inFlight}`);
      for (const peer of ['rpconnect', 'rpconnect-keepalive']) {
        const other = table.get(`${peer}@${inFlight}`);
        if (own && other)
          console.log(
            `×${inFlight}: ${mine} / ${peer}: ${(own.perSecond / other.perSecond).toFixed(2)}× results/s, ${(own.cpu / other.cpu).toFixed(2)}× CPU per result`,
          );
      }
    }
}

try {
  await main();
} catch (err) {
  console.error(err);
  process.exitCode = 1;
}
process.exit();
