// Provider simulator benchmark: it must never be the bottleneck of the other benchmarks
// (the ingress targets several thousand events/s, the sender about 200 sends/s per business).
//   1. send endpoint: template sends over keep-alive connections (undici Pool, one request in
//      flight per connection), as fast as the simulator answers: requests/s, p50, p99.
//   2. webhook delivery: a backlog of status events released at once (the `sent` step of every
//      message is due 3 s after its creation, then delivered and read at once) is delivered to
//      a trivial receiver answering 200: deliveries/s from the first arrival to the last.
// The simulator and the receiver each run as their own process; this process is the client.
//
//   npx tsx bench/simulator.ts [--duration-ms 5000] [--connections 32] [--rounds 3] [--messages 5000]
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool, request } from 'undici';
import { benchArgs } from './args.js';
import { firstLine } from './peers.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const args = benchArgs(import.meta.url, {
  'duration-ms': { type: 'string', default: '5000' },
  connections: { type: 'string', default: '32' },
  rounds: { type: 'string', default: '3' },
  messages: { type: 'string', default: '5000' },
});
const DURATION_MS = args.wholeNumber('duration-ms', 1);
const CONNECTIONS = args.wholeNumber('connections', 1);
const ROUNDS = args.wholeNumber('rounds', 1);
const MESSAGES = args.wholeNumber('messages', 1);
const RELEASE_DELAY_MS = 3000;
const BUSINESS = { id: 'biz_bench', apiKey: 'bench-api-key', secret: 'bench-secret' };

const RECEIVER_SOURCE = `
const http = require('node:http');
let count = 0, first = 0, last = 0;
const server = http.createServer((req, res) => {
  if (req.method === 'GET') {
    const stats = JSON.stringify({ count, first, last });
    if (req.url === '/reset') { count = 0; first = 0; last = 0; }
    res.setHeader('content-type', 'application/json');
    res.end(stats);
    return;
  }
  req.resume();
  req.on('end', () => {
    const now = Date.now();
    if (count === 0) first = now;
    count += 1; last = now;
    res.end('ok');
  });
});
server.keepAliveTimeout = 30000;
server.listen(0, '127.0.0.1', () => process.stdout.write(JSON.stringify({ url: 'http://127.0.0.1:' + server.address().port }) + '\\n'));
process.on('SIGTERM', () => process.exit(0));
`;

async function main() {
  const dir = mkdtempSync(join(tmpdir(), 'msgbridge-bench-sim-'));
  const configFile = join(dir, 'config.json');
  writeFileSync(
    configFile,
    JSON.stringify({
      businesses: [{ id: BUSINESS.id, signingSecrets: [BUSINESS.secret], apiKey: BUSINESS.apiKey }],
      simulator: {
        port: 0,
        lifecycle: { sentDelayMs: RELEASE_DELAY_MS, deliveredDelayMs: 0, readDelayMs: 0 },
        history: { sends: 10000, deliveries: 10000, messages: 200000 },
      },
      log: { level: 'warn' },
    }),
  );

  const receiver = spawn(process.execPath, ['-e', RECEIVER_SOURCE], { stdio: ['ignore', 'pipe', 'inherit'] });
  const receiverUrl = (JSON.parse(await firstLine(receiver, (line) => line.startsWith('{'))) as { url: string }).url;
  const simulator = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'simulator', '--config', configFile], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const started = await firstLine(simulator, (line) => line.startsWith('provider simulator at'), 'stderr');
  const simUrl = /at (http:\/\/\S+) /.exec(started)![1]!;

  const machine = `${cpus().length} × ${cpus()[0]?.model.trim() ?? 'cpu'}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}`;
  console.log(`machine: ${machine}`);
  console.log(`simulator ${simUrl} (pid ${simulator.pid}), receiver ${receiverUrl} (pid ${receiver.pid})`);

  try {
    // 1. Send endpoint.
    const pool = new Pool(simUrl, { connections: CONNECTIONS, pipelining: 1 });
    await sendLoad(pool, 1000); // warm-up
    const sendRuns: SendRun[] = [];
    for (let round = 1; round <= ROUNDS; round += 1) {
      const run = await sendLoad(pool, DURATION_MS);
      sendRuns.push(run);
      console.log(
        `send   round ${round}: ${run.ratePerSecond.toFixed(0)} req/s, p50 ${run.p50.toFixed(2)} ms, p99 ${run.p99.toFixed(2)} ms (${run.count} requests, non-200: ${run.non200})`,
      );
    }

    // 2. Webhook delivery. Let the status events of the send runs (no registration yet) pass first.
    await waitIdle(simUrl, RELEASE_DELAY_MS + 10_000);
    await api(simUrl, 'POST', `/v1/businesses/${BUSINESS.id}/create/webhooks`, {
      topic: 'delivery_status',
      address: `${receiverUrl}/hook`,
    });
    const deliveryRuns: DeliveryRun[] = [];
    for (let round = 1; round <= ROUNDS; round += 1) {
      const run = await deliveryBacklog(pool, simUrl, receiverUrl);
      deliveryRuns.push(run);
      console.log(
        `deliver round ${round}: ${run.ratePerSecond.toFixed(0)} deliveries/s (${run.delivered} in ${run.spanMs} ms; backlog created in ${run.createMs} ms; failed ${run.failed}, dropped ${run.dropped})`,
      );
    }
    await pool.close();

    console.log('\nmedians');
    console.log(
      `send endpoint: ${median(sendRuns.map((r) => r.ratePerSecond)).toFixed(0)} req/s, p50 ${median(sendRuns.map((r) => r.p50)).toFixed(2)} ms, p99 ${median(sendRuns.map((r) => r.p99)).toFixed(2)} ms (${CONNECTIONS} connections, ${DURATION_MS} ms × ${ROUNDS})`,
    );
    console.log(
      `webhook delivery: ${median(deliveryRuns.map((r) => r.ratePerSecond)).toFixed(0)} deliveries/s (${3 * MESSAGES} per round × ${ROUNDS})`,
    );
  } finally {
    simulator.kill('SIGTERM');
    receiver.kill('SIGTERM');
  }
}

interface SendRun {
  count: number;
  non200: number;
  ratePerSecond: number;
  p50: number;
  p99: number;
}

const TEMPLATE_BODY = Buffer.from(
  JSON.stringify({
    parameters: [{ name: 'order', value: '4242' }],
    number: '+15550002222',
    templateName: 'order_update',
  }),
);
const SEND_HEADERS = { 'content-type': 'application/json', accept: 'application/json', 'x-api-key': BUSINESS.apiKey };

async function sendOnce(pool: Pool): Promise<number> {
  const response = await pool.request({
    path: `/v1/businesses/${BUSINESS.id}/send/whatsapp_templated_messages`,
    method: 'POST',
    headers: SEND_HEADERS,
    body: TEMPLATE_BODY,
  });
  await response.body.dump();
  return response.statusCode;
}

async function sendLoad(pool: Pool, durationMs: number): Promise<SendRun> {
  const latencies: number[] = [];
  let non200 = 0;
  const start = performance.now();
  const end = start + durationMs;
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      while (performance.now() < end) {
        const t0 = performance.now();
        const status = await sendOnce(pool);
        latencies.push(performance.now() - t0);
        if (status !== 200) non200 += 1;
      }
    }),
  );
  const elapsed = performance.now() - start;
  latencies.sort((a, b) => a - b);
  return {
    count: latencies.length,
    non200,
    ratePerSecond: latencies.length / (elapsed / 1000),
    p50: quantile(latencies, 0.5),
    p99: quantile(latencies, 0.99),
  };
}

interface DeliveryRun {
  delivered: number;
  spanMs: number;
  createMs: number;
  ratePerSecond: number;
  failed: number;
  dropped: number;
}

async function deliveryBacklog(pool: Pool, simUrl: string, receiverUrl: string): Promise<DeliveryRun> {
  await api(receiverUrl, 'GET', '/reset');
  const before = (await api(simUrl, 'GET', '/sim/stats')) as Stats;
  const t0 = Date.now();
  let next = 0;
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      while (next < MESSAGES) {
        next += 1;
        if ((await sendOnce(pool)) !== 200) throw new Error('a send failed');
      }
    }),
  );
  const createMs = Date.now() - t0;
  if (createMs >= RELEASE_DELAY_MS)
    console.warn(
      `  (creating the backlog took ${createMs} ms, longer than the ${RELEASE_DELAY_MS} ms hold: the figure is a lower bound)`,
    );
  const expected = 3 * MESSAGES;
  const deadline = Date.now() + 120_000;
  let stats: { count: number; first: number; last: number };
  for (;;) {
    stats = (await api(receiverUrl, 'GET', '/stats')) as typeof stats;
    if (stats.count >= expected) break;
    if (Date.now() > deadline) throw new Error(`only ${stats.count} of ${expected} deliveries arrived`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  await waitIdle(simUrl, 30_000);
  const after = (await api(simUrl, 'GET', '/sim/stats')) as Stats;
  const spanMs = Math.max(1, stats.last - stats.first);
  return {
    delivered: stats.count,
    spanMs,
    createMs,
    ratePerSecond: stats.count / (spanMs / 1000),
    failed: after.deliveries.failed - before.deliveries.failed,
    dropped: after.deliveries.dropped - before.deliveries.dropped,
  };
}

interface Stats {
  lifecycle: { pendingSteps: number };
  deliveries: { pending: number; failed: number; dropped: number };
}

async function waitIdle(simUrl: string, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const stats = (await api(simUrl, 'GET', '/sim/stats')) as Stats;
    if (stats.lifecycle.pendingSteps === 0 && stats.deliveries.pending === 0) return;
    if (Date.now() > deadline) throw new Error(`the simulator is still busy: ${JSON.stringify(stats)}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function api(base: string, method: 'GET' | 'POST', path: string, body?: unknown): Promise<unknown> {
  const response = await request(new URL(path, base), {
    method,
    headers: { 'content-type': 'application/json', 'x-api-key': BUSINESS.apiKey },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await response.body.text();
  if (response.statusCode !== 200) throw new Error(`${method} ${path}: ${response.statusCode} ${text}`);
  return JSON.parse(text);
}

function quantile(sorted: number[], q: number): number {
  return sorted.length === 0 ? 0 : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

main().then(
  () => process.exit(0),
  (err: unknown) => {
    console.error(err);
    process.exit(1);
  },
);
