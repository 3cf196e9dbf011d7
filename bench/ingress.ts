// Ingress benchmark: signed webhooks in the realistic mix (three delivery statuses per inbound
// message, 300–600 byte bodies) over keep-alive connections on loopback, against
//   kafkajs       the ingress publishing to the local broker with acks=all (idempotent kafkajs producer)
//   platformatic  the same ingress with the @platformatic/kafka producer (kafka.client: platformatic)
//   discard       the same ingress with publishing disabled (the ceiling)
//   naive         node:http with one kafkajs send per request (the baseline)
//   <mode>-w<N>   kafkajs, platformatic or discard on N worker threads sharing the port (ingress.workers)
//   <mode>+otel<P> the same with OpenTelemetry tracing on, sampling P% of the webhooks (P from 0 to
//                 100; parentbased_traceidratio), exporting OTLP/HTTP protobuf to a loopback sink
//                 (a process of its own that reads and acknowledges every export); compared with
//                 <mode> itself in the ratios
//   <mode>@K=V,.. the same target with these environment variables (A/B of a setting in one run)
//   rpconnect     the Redpanda Connect peer (BENCH_RPCONNECT_BIN, on config.yaml beside it) when
//                 it is given: delivery statuses of one business only, so with it in the modes every
//                 target gets the same statuses-only input (also with --statuses-only)
// Each target runs as its own process (its peak RSS is read from /proc/<pid>/status VmHWM).
// The load comes from the project's generator (--generator own, src/simulator/load-generator.ts,
// in this process) or from wrk (--generator wrk, bench/wrk.ts: a C client, its own process);
// both send Accept-Encoding: gzip as the provider does, unless --accept-encoding none. Given
// lists (--generator own,wrk), each round runs every target under every combination.
// After each publishing run, every event answered 200 is looked up in Kafka (own); under wrk,
// which does not say which requests were answered, the run's new records are counted instead:
// distinct event ids written during the run, at least as many as the 2xx answers.
//
//   npx tsx bench/ingress.ts [--duration-ms 10000] [--connections 64] [--rounds 3]
//                            [--modes discard,kafkajs,platformatic,naive] [--warmup-ms 8000]
//                            [--statuses-only] [--generator own,wrk] [--accept-encoding gzip,none]
// KAFKA_BROKERS=host:port uses an existing Kafka; otherwise the embedded local broker starts.
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { dirname } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { bundleSplit } from './cli-bundle.js';
import { Kafka, logLevel } from 'kafkajs';
import { startLocalBroker, type LocalBroker } from '../src/local-kafka/local-broker.js';
import { ensureTopics } from '../src/kafka/topics.js';
import { cpuSeconds, freePort, peakRssMb, peerBinary, peerConfig, startRpconnect, track } from './peers.js';
import { runWebhookLoad, type AcknowledgedEvent, type WebhookLoadReport } from '../src/simulator/load-generator.js';
import { benchArgs } from './args.js';
import { runWrk, wrkBinary } from './wrk.js';

const args = benchArgs(import.meta.url, {
  'duration-ms': { type: 'string', default: '10000' },
  'warmup-ms': { type: 'string', default: '8000' },
  'broker-warmup-ms': { type: 'string', default: '8000' },
  connections: { type: 'string', default: '64' },
  rounds: { type: 'string', default: '3' },
  modes: { type: 'string', default: 'discard,kafkajs,platformatic,naive' },
  'statuses-only': { type: 'boolean', default: false },
  generator: { type: 'string', default: 'own' },
  'accept-encoding': { type: 'string', default: 'gzip' },
  'wrk-threads': { type: 'string', default: '2' },
});
const durationMs = args.wholeNumber('duration-ms', 1);
const warmupMs = args.wholeNumber('warmup-ms');
const brokerWarmupMs = args.wholeNumber('broker-warmup-ms');
const connections = args.wholeNumber('connections', 1);
const rounds = args.wholeNumber('rounds', 1);
const wrkThreads = args.wholeNumber('wrk-threads', 1);
/** A comma-separated list of some of `allowed`, each once. */
function listOf<const T extends string>(option: 'generator' | 'accept-encoding', allowed: readonly T[]): T[] {
  const items = args.values[option].split(',').map((x) => x.trim());
  for (const item of items)
    if (!allowed.includes(item as T))
      args.fail(`--${option} takes ${allowed.join(' or ')} (or both, comma-separated), not "${item}"`);
  return [...new Set(items as T[])];
}
/** How a target is loaded: which generator, and whether it asks for gzip answers. */
interface LoadKind {
  generator: 'own' | 'wrk';
  acceptEncoding: 'gzip' | 'none';
  /** `own, gzip`: how results and the table name it. */
  name: string;
}
const kinds: LoadKind[] = listOf('generator', ['own', 'wrk'] as const).flatMap((generator) =>
  listOf('accept-encoding', ['gzip', 'none'] as const).map((acceptEncoding) => ({
    generator,
    acceptEncoding,
    name: `${generator}, ${acceptEncoding}`,
  })),
);
const modes = args.values.modes
  .split(',')
  .map((m) => m.trim())
  .filter(Boolean);
/** A mode without its tracing suffix (`discard+otel1` → `discard`), and its sampling percentage. */
const untraced = (mode: string) => mode.split('@')[0]!.replace(/\+otel\d+(\.\d+)?$/, '');
/**
 * `<mode>@NAME=value,NAME=value`: the same target with these environment variables (an A/B of a setting in one run).
 */
const variantEnv = (mode: string): Record<string, string> =>
  Object.fromEntries(
    (mode.split('@')[1] ?? '')
      .split(',')
      .filter(Boolean)
      .map((kv) => [kv.slice(0, kv.indexOf('=')), kv.slice(kv.indexOf('=') + 1)]),
  );
const otelPercent = (mode: string): number | undefined => {
  const m = /\+otel(\d+(?:\.\d+)?)$/.exec(mode.split('@')[0]!);
  return m ? Number(m[1]) : undefined;
};
/** The ingress publishing to Kafka, with either client. */
const INGRESS_CLIENTS = ['kafkajs', 'platformatic'];
const isIngress = (mode: string) =>
  INGRESS_CLIENTS.some((c) => untraced(mode) === c || untraced(mode).startsWith(`${c}-`));
/** The ceiling, on one thread or on N worker threads (discard-wN). */
const isDiscard = (mode: string) => /^discard(-w\d+)?$/.test(untraced(mode));
/** The ceiling with the same worker threads as `mode` (a traced mode's is the untraced mode). */
const ceilingOf = (mode: string) =>
  otelPercent(mode) !== undefined ? untraced(mode) : `discard${/-w\d+$/.exec(mode)?.[0] ?? ''}`;
const PEER = 'rpconnect';
for (const mode of modes) {
  if (!isIngress(mode) && !isDiscard(mode) && untraced(mode) !== 'naive' && untraced(mode) !== PEER)
    args.fail(`unknown mode ${mode}`);
  const p = otelPercent(mode);
  if (p !== undefined && !(p >= 0 && p <= 100)) args.fail(`${mode}: the sampling percentage is from 0 to 100`);
}
const isPeerMode = (mode: string) => untraced(mode) === PEER;
const statusesOnly = args.values['statuses-only'] || modes.some(isPeerMode);
const SECRET = 'bench-signing-secret';
let peer: string | undefined;
const TARGET_SOURCE = fileURLToPath(new URL('./ingress-target.ts', import.meta.url));
// The targets run as plain JavaScript, as in production (node dist/cli.js), not through the
// tsx loader, whose compiler thread would be counted in their memory. .cache/bench/ (ignored
// by git and eslint) sits at the same depth as src/<dir>/, so the bundle's
// import.meta.url-relative paths (config/) still hold.
const TARGET = fileURLToPath(new URL('../.cache/bench/ingress-target.mjs', import.meta.url));

interface Target {
  child: ChildProcess;
  url: string;
  pid: number;
  /** Where its /metrics is: msgbridge's admin port (a peer's own URL otherwise). */
  admin: string;
  topics: { messages: string; deliveryStatus: string; webhooksDlq: string };
}

async function startPeer(binary: string, brokers: string[], env: Record<string, string>): Promise<Target> {
  const topics = { messages: 'delivery_status', deliveryStatus: 'delivery_status', webhooksDlq: 'webhooks-dlq' };
  const kafka = new Kafka({ clientId: 'bench-peer-topics', brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  try {
    await ensureTopics(
      admin,
      [topics.deliveryStatus, topics.webhooksDlq].map((topic) => ({ topic, partitions: 6, replicationFactor: 1 })),
    );
  } finally {
    await admin.disconnect();
  }
  const port = await freePort();
  const { child, pid } = await startRpconnect(binary, peerConfig('config.yaml'), {
    PORT: String(port),
    KAFKA_BROKERS: brokers.join(','),
    WEBHOOK_SECRET: SECRET,
    ...env,
  });
  return { child, pid, url: `http://127.0.0.1:${port}`, admin: `http://127.0.0.1:${port}`, topics };
}

/**
 * The loopback OTLP/HTTP sink of the traced modes: its own process (its CPU is neither the
 * target's nor the load generator's), reading every export and answering 200. Prints its port.
 */
const SINK_SOURCE = `
const http = require('node:http');
let requests = 0, bytes = 0;
const server = http.createServer((req, res) => {
  req.on('data', (c) => (bytes += c.length));
  req.on('end', () => { requests++; res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end(); });
});
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => console.log(server.address().port));
process.on('SIGTERM', () => { console.error('[otlp-sink] ' + requests + ' exports, ' + Math.round(bytes / 1048576) + ' MiB'); process.exit(0); });
`;
let sink: { child: ChildProcess; url: string } | undefined;

async function otlpSink(): Promise<string> {
  if (!sink) {
    const child = spawn(process.execPath, ['-e', SINK_SOURCE], { stdio: ['ignore', 'pipe', 'inherit'] });
    track(child);
    const port = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout! }).once('line', resolve);
      child.once('exit', (code) => reject(new Error(`the OTLP sink exited with ${code}`)));
    });
    sink = { child, url: `http://127.0.0.1:${port.trim()}` };
  }
  return sink.url;
}

/** The target's OTEL_* variables: tracing off (none at all), or on at the mode's sampling. */
async function tracingEnv(mode: string): Promise<Record<string, string>> {
  const percent = otelPercent(mode);
  if (percent === undefined) return {};
  return {
    OTEL_EXPORTER_OTLP_ENDPOINT: await otlpSink(),
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: String(percent / 100),
  };
}

async function startTarget(mode: string, brokers: string[]): Promise<Target> {
  if (isPeerMode(mode)) return startPeer(peer!, brokers, variantEnv(mode));
  const id = randomUUID().slice(0, 8);
  const topics = {
    messages: `bench-messages-${id}`,
    deliveryStatus: `bench-status-${id}`,
    webhooksDlq: `bench-dlq-${id}`,
  };
  // BENCH_TARGET_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles the target.
  const nodeArgs = (process.env.BENCH_TARGET_NODE_ARGS ?? '').split(' ').filter(Boolean);
  // Untraced targets get no OTEL_* variable at all, whatever the bench's own environment holds.
  const env: NodeJS.ProcessEnv = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith('OTEL_')),
  );
  // BENCH_TARGET_NODE (also per mode: `platformatic@BENCH_TARGET_NODE=.ci/root-node`) runs it on another node.
  const node = variantEnv(mode).BENCH_TARGET_NODE || process.env.BENCH_TARGET_NODE || process.execPath;
  const child = spawn(node, [...nodeArgs, TARGET, untraced(mode)], {
    env: {
      ...env,
      ...(await tracingEnv(mode)),
      ...variantEnv(mode),
      BENCH_BROKERS: brokers.join(','),
      BENCH_SECRET: SECRET,
      BENCH_TOPICS: JSON.stringify(topics),
      MSGBRIDGE_CONFIG: '',
    },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  track(child);
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`${mode} target exited with ${code} before listening`)));
  });
  const { url, admin, pid } = JSON.parse(line) as { url: string; admin?: string; pid: number };
  return { child, url, admin: admin ?? url, pid, topics };
}

async function stopTarget(target: Target): Promise<number> {
  const peakRssMb = peakRss(target.pid);
  const exited = new Promise<void>((resolve) => target.child.once('exit', () => resolve()));
  target.child.kill('SIGTERM');
  const timer = setTimeout(() => target.child.kill('SIGKILL'), 30_000);
  await exited;
  clearTimeout(timer);
  return peakRssMb;
}

/** Peak resident set (VmHWM) of a live process, in MiB, to 0.1. */
function peakRss(pid: number): number {
  return Math.round(peakRssMb(pid) * 10) / 10;
}

/** One load run, from either generator. */
interface Load {
  /** Answered 200 (own) or below 400 (wrk). */
  ok: number;
  /** Answered otherwise. */
  nonOk: number;
  /** No answer (connection error, timeout). */
  errors: number;
  latency: WebhookLoadReport['latencyMs'];
  durationMs: number;
  /** CPU seconds the load generator used: this process (own) or wrk. */
  generatorCpuSeconds: number;
  /** The events answered 200, one by one (own only). */
  acknowledged?: AcknowledgedEvent[];
}

let wrk: string | undefined;
const BODY_BYTES = { min: 300, max: 600 };

async function load(
  target: Target,
  kind: LoadKind,
  extra: { durationMs: number; ratePerSecond?: number; connections?: number },
): Promise<Load> {
  const isPeer = target.topics.messages === target.topics.deliveryStatus;
  const url = isPeer ? `${target.url}/webhooks/biz1/delivery_status` : `${target.url}/webhooks/biz_bench`;
  const { acceptEncoding } = kind;
  if (kind.generator === 'wrk') {
    if (extra.ratePerSecond !== undefined) throw new Error('wrk runs closed loop only: no rate');
    const w = await runWrk(wrk!, {
      url,
      secret: SECRET,
      connections: extra.connections ?? connections,
      threads: wrkThreads,
      durationMs: extra.durationMs,
      perTopicPaths: !isPeer,
      statusesOnly,
      bodyBytes: BODY_BYTES,
      acceptEncoding,
    });
    return {
      ok: w.ok,
      nonOk: w.rejected,
      errors: w.errors,
      latency: { ...w.latencyMs },
      durationMs: w.durationMs,
      generatorCpuSeconds: w.cpuSeconds,
    };
  }
  const cpuBefore = cpuSeconds(process.pid);
  const r = await runWebhookLoad({
    url,
    signingSecret: SECRET,
    connections: extra.connections ?? connections,
    durationMs: extra.durationMs,
    statusesPerInbound: 3,
    bodyBytes: BODY_BYTES,
    perTopicPaths: !isPeer,
    statusesOnly,
    acceptEncoding,
    ...(extra.ratePerSecond ? { ratePerSecond: extra.ratePerSecond } : {}),
  });
  const ok = r.answered['200'] ?? 0;
  return {
    ok,
    nonOk: r.sent - ok - r.errors,
    errors: r.errors,
    latency: r.latencyMs,
    durationMs: r.durationMs,
    generatorCpuSeconds: cpuSeconds(process.pid) - cpuBefore,
    acknowledged: r.acknowledged,
  };
}

/** Each partition's end offset, per topic (a topic not there yet has none). */
type Offsets = Map<string, Map<number, number>>;

async function endOffsets(brokers: string[], target: Target): Promise<Offsets> {
  const kafka = new Kafka({ clientId: 'bench-offsets', brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const out: Offsets = new Map();
  try {
    for (const topic of new Set([target.topics.messages, target.topics.deliveryStatus])) {
      const ends = await admin.fetchTopicOffsets(topic).catch(() => []);
      out.set(topic, new Map(ends.map((p) => [p.partition, Number(p.high)])));
    }
  } finally {
    await admin.disconnect();
  }
  return out;
}

/**
 * What the target wrote, read back from its topics. With the acknowledged events (own), each
 * must be in its topic; with a count of 2xx answers (wrk), the records written since `from`
 * must hold at least as many distinct event ids.
 */
async function verify(
  brokers: string[],
  target: Target,
  check: { acknowledged: AcknowledgedEvent[] } | { ok: number; from: Offsets },
): Promise<{ stored: number; missing: number }> {
  const kafka = new Kafka({ clientId: 'bench-verify', brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const names = [...new Set([target.topics.messages, target.topics.deliveryStatus])];
  let stored = 0;
  for (const topic of names)
    for (const p of await admin.fetchTopicOffsets(topic)) stored += Number(p.high) - Number(p.low);
  await admin.disconnect();
  const expected = new Map<string, string>();
  const written = new Set<string>();
  const from = 'from' in check ? check.from : undefined;
  if ('acknowledged' in check)
    for (const a of check.acknowledged)
      expected.set(a.eventId, a.topic === 'messages' ? target.topics.messages : target.topics.deliveryStatus);
  const consumer = kafka.consumer({
    groupId: `bench-verify-${randomUUID()}`,
    maxBytes: 64 * 1024 * 1024,
    maxWaitTimeInMs: 200,
  });
  await consumer.connect();
  await consumer.subscribe({ topics: names, fromBeginning: true });
  let read = 0;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`read ${read} of ${stored} records in time`)), 300_000);
    void consumer.run({
      eachBatch: async ({ batch }) => {
        for (const message of batch.messages) {
          const id = message.headers?.['event-id']?.toString();
          if (id !== undefined && expected.get(id) === batch.topic) expected.delete(id);
          if (id !== undefined && from && Number(message.offset) >= (from.get(batch.topic)?.get(batch.partition) ?? 0))
            written.add(id);
          read++;
        }
        if (read >= stored) {
          clearTimeout(timer);
          resolve();
        }
      },
    });
  });
  await consumer.disconnect();
  return { stored, missing: 'ok' in check ? Math.max(0, check.ok - written.size) : expected.size };
}

async function batchStats(url: string): Promise<RunResult['batches']> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const value = (name: string) =>
    Number(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+-]+)$`, 'm').exec(text)?.[1] ?? NaN);
  const count = value('msgbridge_ingress_batch_size_count');
  const okCount = Number(
    /^msgbridge_ingress_batch_duration_seconds_count\{[^}]*outcome="ok"[^}]*\} ([0-9.e+-]+)$/m.exec(text)?.[1] ?? NaN,
  );
  const okSum = Number(
    /^msgbridge_ingress_batch_duration_seconds_sum\{[^}]*outcome="ok"[^}]*\} ([0-9.e+-]+)$/m.exec(text)?.[1] ?? NaN,
  );
  return {
    count,
    meanEvents: Math.round((value('msgbridge_ingress_batch_size_sum') / count) * 10) / 10,
    meanRoundTripMs: Math.round((okSum / okCount) * 1000 * 100) / 100,
  };
}

/** Cumulative bucket counts of the ingress's publish-latency histogram (events only). */
async function latencyBuckets(url: string): Promise<Map<string, number>> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const out = new Map<string, number>();
  for (const m of text.matchAll(
    /^msgbridge_ingress_publish_latency_seconds_bucket\{le="([^"]+)",[^}]*destination="event"[^}]*\} (\d+)$/gm,
  ))
    out.set(m[1]!, Number(m[2]));
  return out;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m =
    s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
  return Math.round(m * 10) / 10;
};
const perSecond = (r: Load) => Math.round(r.ok / (r.durationMs / 1000));

interface RunResult {
  mode: string;
  /** The load kind's name: generator, Accept-Encoding. */
  load: string;
  round: number;
  eventsPerSecond: number;
  latency: WebhookLoadReport['latencyMs'];
  nonOk: number;
  errors: number;
  half?: {
    rate: number;
    eventsPerSecond: number;
    latency: WebhookLoadReport['latencyMs'];
    nonOk: number;
    /** Server side (the ingress's own publish-latency histogram): share of events acknowledged within 5/10/20 ms. */
    serverWithin: Record<string, number>;
  };
  peakRssMb: number;
  /** Share of one core used during the maximum-rate run, per process. */
  cpu: { target: number; loadGenerator: number; broker: number };
  /** CPU time of the target per acknowledged event at the maximum rate, in µs. */
  cpuPerEventUs: number;
  /** From the ingress's own metrics: mean events per produce request and mean round trip. */
  batches?: { count: number; meanEvents: number; meanRoundTripMs: number };
  verified?: { acknowledged: number; stored: number; missing: number };
}

async function main() {
  // Split at dynamic imports, as Node loads the unbundled code: @platformatic/kafka (about
  // 30 MiB) is then loaded only by the target that uses it, not by every target's memory.
  // The worker threads' module (ingress.workers) beside it: workers.ts looks for it there.
  await bundleSplit(
    {
      'ingress-target': TARGET_SOURCE,
      'worker-entry': fileURLToPath(new URL('../src/ingress/worker-entry.ts', import.meta.url)),
    },
    dirname(TARGET),
  );
  if (kinds.some((k) => k.generator === 'wrk') && !(wrk = wrkBinary())) throw new Error('--generator wrk needs wrk');
  peer = modes.some(isPeerMode) ? peerBinary(PEER) : undefined;
  if (!peer) for (const m of modes.filter(isPeerMode)) modes.splice(modes.indexOf(m), 1);
  let local: LocalBroker | undefined;
  let brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
  if (brokers.length === 0) {
    local = await startLocalBroker({ heapMb: 768, partitions: 6, onProgress: (l) => console.error(`[kafka] ${l}`) });
    brokers = [local.bootstrap];
  }
  console.error(
    `[bench] Kafka ${brokers.join(',')}; ${rounds} round(s) of ${modes.join(', ')}; ${connections} connections, ${durationMs} ms each; load (generator, Accept-Encoding): ${kinds.map((k) => k.name).join('; ')}`,
  );
  const results: RunResult[] = [];
  try {
    // A fresh JVM is slow until its JIT has seen traffic: warm the broker up once, unmeasured.
    if (brokerWarmupMs > 0 && modes.some((m) => !isDiscard(m))) {
      const target = await startTarget('kafkajs', brokers);
      await load(target, kinds[0]!, { durationMs: brokerWarmupMs });
      await stopTarget(target);
    }
    for (let round = 1; round <= rounds; round++) {
      for (const kind of kinds)
        for (const mode of modes) {
          const target = await startTarget(mode, brokers);
          // Under wrk the run's records are those past the ends at the start (the peer's topic is shared by its runs).
          const from = kind.generator === 'wrk' && !isDiscard(mode) ? await endOffsets(brokers, target) : undefined;
          const acknowledged: AcknowledgedEvent[] = [];
          let answeredOk = 0;
          const keep = (l: Load) => {
            for (const a of l.acknowledged ?? []) acknowledged.push(a);
            answeredOk += l.ok;
          };
          keep(await load(target, kind, { durationMs: warmupMs }));
          const cpuBefore = [cpuSeconds(target.pid), local ? cpuSeconds(local.pid) : NaN];
          const max = await load(target, kind, { durationMs });
          const cpuAfter = [cpuSeconds(target.pid), local ? cpuSeconds(local.pid) : NaN];
          const seconds = max.durationMs / 1000;
          const share = (i: number) => Math.round(((cpuAfter[i]! - cpuBefore[i]!) / seconds) * 100);
          keep(max);
          const result: RunResult = {
            mode,
            load: kind.name,
            round,
            eventsPerSecond: perSecond(max),
            latency: max.latency,
            nonOk: max.nonOk,
            errors: max.errors,
            peakRssMb: 0,
            cpu: {
              target: share(0),
              loadGenerator: Math.round((max.generatorCpuSeconds / seconds) * 100),
              broker: share(1),
            },
            cpuPerEventUs: Math.round(((cpuAfter[0]! - cpuBefore[0]!) / Math.max(1, max.ok)) * 1e6),
          };
          // Latency at half the maximum rate needs a schedule, which only the project's generator keeps.
          if (isIngress(mode) && kind.generator === 'own') {
            const rate = Math.max(1, Math.round(result.eventsPerSecond / 2));
            const bucketsBefore = await latencyBuckets(target.admin);
            const half = await load(target, kind, { durationMs, ratePerSecond: rate });
            const bucketsAfter = await latencyBuckets(target.admin);
            keep(half);
            const count = (le: string) => (bucketsAfter.get(le) ?? 0) - (bucketsBefore.get(le) ?? 0);
            const serverWithin = Object.fromEntries(
              ['0.005', '0.01', '0.02'].map((le) => [
                `${Number(le) * 1000}ms`,
                Math.round((count(le) / count('+Inf')) * 1000) / 10,
              ]),
            );
            result.half = {
              rate,
              eventsPerSecond: perSecond(half),
              latency: half.latency,
              nonOk: half.nonOk + half.errors,
              serverWithin,
            };
          }
          if (untraced(mode) !== 'naive' && !isPeerMode(mode)) result.batches = await batchStats(target.admin);
          result.peakRssMb = await stopTarget(target);
          if (!isDiscard(mode)) {
            const v = await verify(brokers, target, from ? { ok: answeredOk, from } : { acknowledged });
            result.verified = { acknowledged: answeredOk, ...v };
          }
          results.push(result);
          console.error(`[bench] ${JSON.stringify(result)}`);
        }
    }
  } finally {
    sink?.child.kill('SIGTERM');
    await local?.stop();
  }

  const summary = (mode: string, kind: LoadKind) => {
    const rs = results.filter((r) => r.mode === mode && r.load === kind.name);
    return {
      mode,
      load: kind.name,
      /** The target as the table names it: with its load when the run had more than one kind. */
      label: kinds.length > 1 ? `${mode} (${kind.name})` : mode,
      runs: rs.length,
      eventsPerSecond: median(rs.map((r) => r.eventsPerSecond)),
      range: `${Math.min(...rs.map((r) => r.eventsPerSecond))}–${Math.max(...rs.map((r) => r.eventsPerSecond))}`,
      p50: median(rs.map((r) => r.latency.p50)),
      p99: median(rs.map((r) => r.latency.p99)),
      p999: median(rs.map((r) => r.latency.p999)),
      halfRate: rs[0]?.half ? median(rs.map((r) => r.half!.rate)) : undefined,
      halfP50: rs[0]?.half ? median(rs.map((r) => r.half!.latency.p50)) : undefined,
      halfP99: rs[0]?.half ? median(rs.map((r) => r.half!.latency.p99)) : undefined,
      halfP999: rs[0]?.half ? median(rs.map((r) => r.half!.latency.p999)) : undefined,
      halfServerWithin20ms: rs[0]?.half ? median(rs.map((r) => r.half!.serverWithin['20ms']!)) : undefined,
      cpuPerEventUs: median(rs.map((r) => r.cpuPerEventUs)),
      cpuTarget: `${Math.min(...rs.map((r) => r.cpu.target))}–${Math.max(...rs.map((r) => r.cpu.target))}`,
      cpuGenerator: median(rs.map((r) => r.cpu.loadGenerator)),
      meanBatch: rs[0]?.batches ? median(rs.map((r) => r.batches!.meanEvents)) : undefined,
      meanRoundTripMs: rs[0]?.batches ? median(rs.map((r) => r.batches!.meanRoundTripMs)) : undefined,
      peakRssMb: Math.max(...rs.map((r) => r.peakRssMb)),
      nonOk: rs.reduce((n, r) => n + r.nonOk + r.errors + (r.half?.nonOk ?? 0), 0),
      acknowledged: rs.reduce((n, r) => n + (r.verified?.acknowledged ?? 0), 0),
      missing: rs.reduce((n, r) => n + (r.verified?.missing ?? 0), 0),
    };
  };
  const table = kinds.flatMap((kind) => modes.map((mode) => summary(mode, kind)));
  type Row = (typeof table)[number];
  const ceiling = (t: Row) => table.find((x) => x.load === t.load && x.mode === ceilingOf(t.mode));
  const naiveOf = (t: Row) => table.find((x) => x.load === t.load && x.mode === 'naive');
  console.log(JSON.stringify({ results, table }, null, 2));
  console.log(
    '\n| target | events/s (median) | range | p50 ms | p99 ms | p99.9 ms | at half rate: p50 / p99 / p99.9 ms | CPU µs/event | CPU % (range) | generator CPU % | mean batch / round trip ms | peak RSS MiB | non-200 | acknowledged missing from Kafka |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const t of table) {
    const half =
      t.halfRate !== undefined
        ? `${t.halfRate}/s: ${t.halfP50} / ${t.halfP99} / ${t.halfP999} (server side ≤ 20 ms: ${t.halfServerWithin20ms}%)`
        : '—';
    const missing = isDiscard(t.mode) ? '—' : `${t.missing} of ${t.acknowledged}`;
    const batches = t.meanBatch !== undefined ? `${t.meanBatch} / ${t.meanRoundTripMs}` : '—';
    console.log(
      `| ${t.label} | ${t.eventsPerSecond} | ${t.range} | ${t.p50} | ${t.p99} | ${t.p999} | ${half} | ${t.cpuPerEventUs} | ${t.cpuTarget} | ${t.cpuGenerator} | ${batches} | ${t.peakRssMb} | ${t.nonOk} | ${missing} |`,
    );
  }
  console.log('');
  for (const t of table.filter((x) => isIngress(x.mode) || (isDiscard(x.mode) && otelPercent(x.mode) !== undefined))) {
    const discard = ceiling(t);
    const naive = naiveOf(t);
    const ratios = [
      discard
        ? `${Math.round((t.eventsPerSecond / discard.eventsPerSecond) * 100)}% of the ceiling (${discard.label})`
        : undefined,
      naive ? `${(t.eventsPerSecond / naive.eventsPerSecond).toFixed(2)}× naive` : undefined,
    ].filter(Boolean);
    // The same ratios per round (rounds interleave the targets, so each round compares like with like).
    const perRound = [...new Set(results.map((r) => r.round))].map((round) => {
      const of = (mode: string) =>
        results.find((r) => r.round === round && r.load === t.load && r.mode === mode)?.eventsPerSecond;
      const own = of(t.mode)!;
      const c = of(ceilingOf(t.mode));
      const n = of('naive');
      return `${c ? `${Math.round((own / c) * 100)}%` : '—'} / ${n ? `${(own / n).toFixed(2)}×` : '—'}`;
    });
    if (ratios.length > 0)
      console.log(`${t.label}: ${ratios.join(', ')} (per round, ceiling / naive: ${perRound.join('; ')})`);
    // Against the peer (issue 20's goals: ≥ 2.5× its events/s and ≤ 0.4× its CPU per event, in every round).
    for (const p of table.filter((x) => isPeerMode(x.mode) && x.load === t.load)) {
      const rounds = [...new Set(results.map((r) => r.round))].map((round) => {
        const own = results.find((r) => r.round === round && r.load === t.load && r.mode === t.mode);
        const other = results.find((r) => r.round === round && r.load === p.load && r.mode === p.mode);
        return own && other
          ? `${(own.eventsPerSecond / other.eventsPerSecond).toFixed(2)}× / ${(own.cpuPerEventUs / other.cpuPerEventUs).toFixed(2)}×`
          : '—';
      });
      console.log(
        `${t.label} vs ${p.label}: ${(t.eventsPerSecond / p.eventsPerSecond).toFixed(2)}× the events/s, ${(t.cpuPerEventUs / p.cpuPerEventUs).toFixed(2)}× the CPU per event (per round: ${rounds.join('; ')})`,
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
