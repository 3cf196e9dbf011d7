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
//   rpconnect     the Redpanda Connect peer (../shared/peers/rpconnect, config.yaml) when its binary
//                 can be had: delivery statuses of one business only, so with it in the modes every
//                 target gets the same statuses-only input (also with --statuses-only)
// Each target runs as its own process (its peak RSS is read from /proc/<pid>/status VmHWM).
// After each publishing run, every event answered 200 is looked up in Kafka.
//
//   npx tsx bench/ingress.ts [--duration-ms 10000] [--connections 64] [--rounds 3]
//                            [--modes discard,kafkajs,platformatic,naive] [--warmup-ms 8000]
//                            [--statuses-only]
// KAFKA_BROKERS=host:port uses an existing Kafka; otherwise the embedded local broker starts.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { dirname } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { bundleSplit } from './cli-bundle.js';
import { Kafka, logLevel } from 'kafkajs';
import { startLocalBroker, type LocalBroker } from '../src/kafka/local-broker.js';
import { ensureTopics } from '../src/kafka/topics.js';
import { cpuSeconds, freePort, peakRssMb, peerBinary, peerConfig, startRpconnect, track } from './peers.js';
import { runWebhookLoad, type AcknowledgedEvent, type WebhookLoadReport } from '../src/simulator/load-generator.js';
import { benchArgs } from './args.js';

const args = benchArgs(import.meta.url, {
  'duration-ms': { type: 'string', default: '10000' },
  'warmup-ms': { type: 'string', default: '8000' },
  'broker-warmup-ms': { type: 'string', default: '8000' },
  connections: { type: 'string', default: '64' },
  rounds: { type: 'string', default: '3' },
  modes: { type: 'string', default: 'discard,kafkajs,platformatic,naive' },
  'statuses-only': { type: 'boolean', default: false },
});
const durationMs = args.wholeNumber('duration-ms', 1);
const warmupMs = args.wholeNumber('warmup-ms');
const brokerWarmupMs = args.wholeNumber('broker-warmup-ms');
const connections = args.wholeNumber('connections', 1);
const rounds = args.wholeNumber('rounds', 1);
const modes = args.values.modes
  .split(',')
  .map((m) => m.trim())
  .filter(Boolean);
/** A mode without its tracing suffix (`discard+otel1` → `discard`), and its sampling percentage. */
const untraced = (mode: string) => mode.split('@')[0]!.replace(/\+otel\d+(\.\d+)?$/, '');
/** `<mode>@NAME=value,NAME=value`: the same target with these environment variables (an A/B of a setting in one run). */
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
const isIngress = (mode: string) => INGRESS_CLIENTS.some((c) => untraced(mode) === c || untraced(mode).startsWith(`${c}-`));
/** The ceiling, on one thread or on N worker threads (discard-wN). */
const isDiscard = (mode: string) => /^discard(-w\d+)?$/.test(untraced(mode));
/** The ceiling with the same worker threads as `mode` (a traced mode's is the untraced mode). */
const ceilingOf = (mode: string) => (otelPercent(mode) !== undefined ? untraced(mode) : `discard${/-w\d+$/.exec(mode)?.[0] ?? ''}`);
const PEER = 'rpconnect';
for (const mode of modes) {
  if (!isIngress(mode) && !isDiscard(mode) && untraced(mode) !== 'naive' && untraced(mode) !== PEER) args.fail(`unknown mode ${mode}`);
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
  const { child, pid } = await startRpconnect(binary, peerConfig('config.yaml'), { PORT: String(port), KAFKA_BROKERS: brokers.join(','), WEBHOOK_SECRET: SECRET, ...env });
  return { child, pid, url: `http://127.0.0.1:${port}`, topics };
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
  return { OTEL_EXPORTER_OTLP_ENDPOINT: await otlpSink(), OTEL_TRACES_SAMPLER: 'parentbased_traceidratio', OTEL_TRACES_SAMPLER_ARG: String(percent / 100) };
}

async function startTarget(mode: string, brokers: string[]): Promise<Target> {
  if (isPeerMode(mode)) return startPeer(peer!, brokers, variantEnv(mode));
  const id = randomUUID().slice(0, 8);
  const topics = { messages: `bench-messages-${id}`, deliveryStatus: `bench-status-${id}`, webhooksDlq: `bench-dlq-${id}` };
  // BENCH_TARGET_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles the target.
  const nodeArgs = (process.env.BENCH_TARGET_NODE_ARGS ?? '').split(' ').filter(Boolean);
  // Untraced targets get no OTEL_* variable at all, whatever the bench's own environment holds.
  const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('OTEL_')));
  // BENCH_TARGET_NODE (also per mode: `platformatic@BENCH_TARGET_NODE=.ci/root-node`) runs it on another node.
  const node = variantEnv(mode).BENCH_TARGET_NODE || process.env.BENCH_TARGET_NODE || process.execPath;
  const child = spawn(node, [...nodeArgs, TARGET, untraced(mode)], {
    env: { ...env, ...(await tracingEnv(mode)), ...variantEnv(mode), BENCH_BROKERS: brokers.join(','), BENCH_SECRET: SECRET, BENCH_TOPICS: JSON.stringify(topics), MSGBRIDGE_CONFIG: '' },
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  track(child);
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`${mode} target exited with ${code} before listening`)));
  });
  const { url, pid } = JSON.parse(line) as { url: string; pid: number };
  return { child, url, pid, topics };
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

function load(target: Target, extra: { durationMs: number; ratePerSecond?: number; connections?: number }): Promise<WebhookLoadReport> {
  const isPeer = target.topics.messages === target.topics.deliveryStatus;
  return runWebhookLoad({
    url: isPeer ? `${target.url}/webhooks/biz1/delivery_status` : `${target.url}/webhooks/biz_bench`,
    signingSecret: SECRET,
    connections: extra.connections ?? connections,
    durationMs: extra.durationMs,
    statusesPerInbound: 3,
    bodyBytes: { min: 300, max: 600 },
    perTopicPaths: !isPeer,
    statusesOnly,
    ...(extra.ratePerSecond ? { ratePerSecond: extra.ratePerSecond } : {}),
  });
}

/** Every acknowledged event must be in its topic: read everything back and look each one up. */
async function verify(brokers: string[], target: Target, acknowledged: AcknowledgedEvent[]): Promise<{ stored: number; missing: number }> {
  const kafka = new Kafka({ clientId: 'bench-verify', brokers, logLevel: logLevel.NOTHING });
  const admin = kafka.admin();
  await admin.connect();
  const names = [...new Set([target.topics.messages, target.topics.deliveryStatus])];
  let stored = 0;
  for (const topic of names) for (const p of await admin.fetchTopicOffsets(topic)) stored += Number(p.high) - Number(p.low);
  await admin.disconnect();
  const expected = new Map<string, string>();
  for (const a of acknowledged) expected.set(a.eventId, a.topic === 'messages' ? target.topics.messages : target.topics.deliveryStatus);
  const consumer = kafka.consumer({ groupId: `bench-verify-${randomUUID()}`, maxBytes: 64 * 1024 * 1024, maxWaitTimeInMs: 200 });
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
  return { stored, missing: expected.size };
}

async function batchStats(url: string): Promise<RunResult['batches']> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const value = (name: string) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+-]+)$`, 'm').exec(text)?.[1] ?? NaN);
  const count = value('msgbridge_ingress_batch_size_count');
  const okCount = Number(/^msgbridge_ingress_batch_duration_seconds_count\{[^}]*outcome="ok"[^}]*\} ([0-9.e+-]+)$/m.exec(text)?.[1] ?? NaN);
  const okSum = Number(/^msgbridge_ingress_batch_duration_seconds_sum\{[^}]*outcome="ok"[^}]*\} ([0-9.e+-]+)$/m.exec(text)?.[1] ?? NaN);
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
  for (const m of text.matchAll(/^msgbridge_ingress_publish_latency_seconds_bucket\{le="([^"]+)",[^}]*destination="event"[^}]*\} (\d+)$/gm)) out.set(m[1]!, Number(m[2]));
  return out;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
  return Math.round(m * 10) / 10;
};
const ok = (r: WebhookLoadReport) => r.answered['200'] ?? 0;
const perSecond = (r: WebhookLoadReport) => Math.round(ok(r) / (r.durationMs / 1000));

interface RunResult {
  mode: string;
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
  await bundleSplit({ 'ingress-target': TARGET_SOURCE, 'worker-entry': fileURLToPath(new URL('../src/ingress/worker-entry.ts', import.meta.url)) }, dirname(TARGET));
  peer = modes.some(isPeerMode) ? peerBinary(PEER) : undefined;
  if (!peer) for (const m of modes.filter(isPeerMode)) modes.splice(modes.indexOf(m), 1);
  let local: LocalBroker | undefined;
  let brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
  if (brokers.length === 0) {
    local = await startLocalBroker({ heapMb: 768, partitions: 6, onProgress: (l) => console.error(`[kafka] ${l}`) });
    brokers = [local.bootstrap];
  }
  console.error(`[bench] Kafka ${brokers.join(',')}; ${rounds} round(s) of ${modes.join(', ')}; ${connections} connections, ${durationMs} ms each`);
  const results: RunResult[] = [];
  try {
    // A fresh JVM is slow until its JIT has seen traffic: warm the broker up once, unmeasured.
    if (brokerWarmupMs > 0 && modes.some((m) => !isDiscard(m))) {
      const target = await startTarget('kafkajs', brokers);
      await load(target, { durationMs: brokerWarmupMs });
      await stopTarget(target);
    }
    for (let round = 1; round <= rounds; round++) {
      for (const mode of modes) {
        const target = await startTarget(mode, brokers);
        const acknowledged: AcknowledgedEvent[] = [];
        const warm = await load(target, { durationMs: warmupMs });
        for (const a of warm.acknowledged) acknowledged.push(a);
        const cpuBefore = [cpuSeconds(target.pid), cpuSeconds(process.pid), local ? cpuSeconds(local.pid) : NaN];
        const max = await load(target, { durationMs });
        const cpuAfter = [cpuSeconds(target.pid), cpuSeconds(process.pid), local ? cpuSeconds(local.pid) : NaN];
        const share = (i: number) => Math.round(((cpuAfter[i]! - cpuBefore[i]!) / (max.durationMs / 1000)) * 100);
        for (const a of max.acknowledged) acknowledged.push(a);
        const result: RunResult = {
          mode,
          round,
          eventsPerSecond: perSecond(max),
          latency: max.latencyMs,
          nonOk: max.sent - ok(max) - max.errors,
          errors: max.errors,
          peakRssMb: 0,
          cpu: { target: share(0), loadGenerator: share(1), broker: share(2) },
          cpuPerEventUs: Math.round(((cpuAfter[0]! - cpuBefore[0]!) / Math.max(1, ok(max))) * 1e6),
        };
        if (isIngress(mode)) {
          // Latency at half the maximum rate, open loop (requests are due on a schedule).
          const rate = Math.max(1, Math.round(result.eventsPerSecond / 2));
          const bucketsBefore = await latencyBuckets(target.url);
          const half = await load(target, { durationMs, ratePerSecond: rate });
          const bucketsAfter = await latencyBuckets(target.url);
          for (const a of half.acknowledged) acknowledged.push(a);
          const count = (le: string) => (bucketsAfter.get(le) ?? 0) - (bucketsBefore.get(le) ?? 0);
          const serverWithin = Object.fromEntries(['0.005', '0.01', '0.02'].map((le) => [`${Number(le) * 1000}ms`, Math.round((count(le) / count('+Inf')) * 1000) / 10]));
          result.half = { rate, eventsPerSecond: perSecond(half), latency: half.latencyMs, nonOk: half.sent - ok(half) - half.errors, serverWithin };
        }
        if (untraced(mode) !== 'naive' && !isPeerMode(mode)) result.batches = await batchStats(target.url);
        result.peakRssMb = await stopTarget(target);
        if (!isDiscard(mode)) {
          const v = await verify(brokers, target, acknowledged);
          result.verified = { acknowledged: acknowledged.length, ...v };
        }
        results.push(result);
        console.error(`[bench] ${JSON.stringify(result)}`);
      }
    }
  } finally {
    sink?.child.kill('SIGTERM');
    await local?.stop();
  }

  const summary = (mode: string) => {
    const rs = results.filter((r) => r.mode === mode);
    return {
      mode,
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
      meanBatch: rs[0]?.batches ? median(rs.map((r) => r.batches!.meanEvents)) : undefined,
      meanRoundTripMs: rs[0]?.batches ? median(rs.map((r) => r.batches!.meanRoundTripMs)) : undefined,
      peakRssMb: Math.max(...rs.map((r) => r.peakRssMb)),
      nonOk: rs.reduce((n, r) => n + r.nonOk + r.errors + (r.half?.nonOk ?? 0), 0),
      acknowledged: rs.reduce((n, r) => n + (r.verified?.acknowledged ?? 0), 0),
      missing: rs.reduce((n, r) => n + (r.verified?.missing ?? 0), 0),
    };
  };
  const table = modes.map(summary);
  const ceiling = (mode: string) => table.find((t) => t.mode === ceilingOf(mode));
  const naive = table.find((t) => t.mode === 'naive');
  console.log(JSON.stringify({ results, table }, null, 2));
  console.log(
    '\n| target | events/s (median) | range | p50 ms | p99 ms | p99.9 ms | at half rate: p50 / p99 / p99.9 ms | CPU µs/event | CPU % (range) | mean batch / round trip ms | peak RSS MiB | non-200 | acknowledged missing from Kafka |',
  );
  console.log('|---|---|---|---|---|---|---|---|---|---|---|---|---|');
  for (const t of table) {
    const half = t.halfRate !== undefined ? `${t.halfRate}/s: ${t.halfP50} / ${t.halfP99} / ${t.halfP999} (server side ≤ 20 ms: ${t.halfServerWithin20ms}%)` : '—';
    const missing = isDiscard(t.mode) ? '—' : `${t.missing} of ${t.acknowledged}`;
    const batches = t.meanBatch !== undefined ? `${t.meanBatch} / ${t.meanRoundTripMs}` : '—';
    console.log(
      `| ${t.mode} | ${t.eventsPerSecond} | ${t.range} | ${t.p50} | ${t.p99} | ${t.p999} | ${half} | ${t.cpuPerEventUs} | ${t.cpuTarget} | ${batches} | ${t.peakRssMb} | ${t.nonOk} | ${missing} |`,
    );
  }
  console.log('');
  for (const t of table.filter((x) => isIngress(x.mode) || (isDiscard(x.mode) && otelPercent(x.mode) !== undefined))) {
    const discard = ceiling(t.mode);
    const ratios = [
      discard ? `${Math.round((t.eventsPerSecond / discard.eventsPerSecond) * 100)}% of the ceiling (${discard.mode})` : undefined,
      naive ? `${(t.eventsPerSecond / naive.eventsPerSecond).toFixed(2)}× naive` : undefined,
    ].filter(Boolean);
    // The same ratios per round (rounds interleave the targets, so each round compares like with like).
    const perRound = [...new Set(results.map((r) => r.round))].map((round) => {
      const of = (mode: string) => results.find((r) => r.round === round && r.mode === mode)?.eventsPerSecond;
      const own = of(t.mode)!;
      const c = of(ceilingOf(t.mode));
      const n = of('naive');
      return `${c ? `${Math.round((own / c) * 100)}%` : '—'} / ${n ? `${(own / n).toFixed(2)}×` : '—'}`;
    });
    console.log(`${t.mode}: ${ratios.join(', ')} (per round, ceiling / naive: ${perRound.join('; ')})`);
    // Against the peer (issue 20's goals: ≥ 2.5× its events/s and ≤ 0.4× its CPU per event, in every round).
    for (const p of table.filter((x) => isPeerMode(x.mode))) {
      const rounds = [...new Set(results.map((r) => r.round))].map((round) => {
        const own = results.find((r) => r.round === round && r.mode === t.mode);
        const other = results.find((r) => r.round === round && r.mode === p.mode);
        return own && other ? `${(own.eventsPerSecond / other.eventsPerSecond).toFixed(2)}× / ${(own.cpuPerEventUs / other.cpuPerEventUs).toFixed(2)}×` : '—';
      });
      console.log(
        `${t.mode} vs ${p.mode}: ${(t.eventsPerSecond / p.eventsPerSecond).toFixed(2)}× the events/s, ${(t.cpuPerEventUs / p.cpuPerEventUs).toFixed(2)}× the CPU per event (per round: ${rounds.join('; ')})`,
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
