// The sender's provider calls, client side only: CPU per call and RSS of the project's client
// (src/sender/provider-client.ts over src/platform/http1-pool.ts) against undici's Pool doing
// the same calls (its `request` API, headers and body as the sender sent them before). The Go
// fake provider (BENCH_FAKEPROVIDER_BIN) answers; each client runs in a process of its
// own, alternating round by round, so that one's garbage or warm-up does not weigh on the other.
//
//   npx tsx bench/provider-client.ts [--calls 40000] [--in-flight 128] [--latency-ms 0] [--rounds 3]
// Prints, per round, µs of CPU per call (process.cpuUsage over the timed calls) and RSS, then
// the medians and their ratio.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { createProviderClient } from '../src/sender/provider-client.js';
import { benchArgs } from './args.js';
import { peerBinary, startFakeProvider } from './peers.js';

const args = benchArgs(import.meta.url, {
  calls: { type: 'string', default: '40000' },
  'in-flight': { type: 'string', default: '128' },
  'latency-ms': { type: 'string', default: '0' },
  rounds: { type: 'string', default: '3' },
  // Internal: a round's client runs in a child started with these.
  child: { type: 'string' },
  url: { type: 'string' },
});
const CALLS = args.wholeNumber('calls', 1);
const IN_FLIGHT = args.wholeNumber('in-flight', 1);
const LATENCY_MS = args.wholeNumber('latency-ms');
const ROUNDS = args.wholeNumber('rounds', 1);
const API_KEY = 'bench-api-key';
const BODY = { recipient: { channelType: 'whatsapp', id: '+15550001111' }, message: { text: 'Your order 1234 has shipped and will arrive tomorrow.' } };

interface Result {
  client: string;
  usPerCall: number;
  rssMiB: number;
  failures: number;
}

type Call = () => Promise<boolean>;

function callers(client: string, url: string): { call: Call; close: () => Promise<void> } {
  if (client === 'msgbridge') {
    const c = createProviderClient({ baseUrl: url, connections: IN_FLIGHT, callTimeoutMs: 10_000 });
    return { call: async () => (await c.send('text', 'biz_bench', API_KEY, BODY)).kind === 'accepted', close: () => c.close() };
  }
  const pool = new Pool(url, { connections: IN_FLIGHT, pipelining: 1, keepAliveTimeout: 30_000 });
  const headers = { Accept: 'application/json', 'Content-Type': 'application/json', 'X-API-Key': API_KEY, 'User-Agent': 'msgbridge-sender' };
  return {
    call: async () => {
      const res = await pool.request({ method: 'POST', path: '/v1/businesses/biz_bench/send/messages', headers, body: JSON.stringify(BODY) });
      const body = (await res.body.json()) as { id?: string };
      return res.statusCode === 200 && typeof body.id === 'string';
    },
    close: () => pool.close(),
  };
}

async function runChild(client: string, url: string): Promise<void> {
  const { call, close } = callers(client, url);
  let failures = 0;
  const drive = async (n: number) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        while (next++ < n) if (!(await call())) failures += 1;
      }),
    );
  };
  await drive(Math.min(5000, CALLS)); // warm-up: connections open, code optimized
  const cpu = process.cpuUsage();
  await drive(CALLS);
  const used = process.cpuUsage(cpu);
  const result: Result = { client, usPerCall: Math.round(((used.user + used.system) / CALLS) * 10) / 10, rssMiB: Math.round(process.memoryUsage().rss / 1048576), failures };
  await close();
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

function once(client: string, url: string): Promise<Result> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(import.meta.url), '--child', client, '--url', url, '--calls', String(CALLS), '--in-flight', String(IN_FLIGHT)], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.once('exit', (code) => (code === 0 ? resolve(JSON.parse(out.trim()) as Result) : reject(new Error(`${client} exited ${code}`))));
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  if (args.values.child) return runChild(args.values.child, args.values.url!);
  const binary = peerBinary('fakeprovider');
  if (!binary) throw new Error('the Go fake provider is needed: set BENCH_FAKEPROVIDER_BIN (docs/benchmarks.md, "Peers")');
  const provider = await startFakeProvider(binary, LATENCY_MS, API_KEY);
  const results: Result[] = [];
  try {
    for (let round = 1; round <= ROUNDS; round++)
      for (const client of round % 2 === 1 ? ['undici', 'msgbridge'] : ['msgbridge', 'undici']) {
        const r = await once(client, provider.url);
        results.push(r);
        console.log(`round ${round} ${client.padEnd(9)} ${r.usPerCall} µs CPU/call, RSS ${r.rssMiB} MiB, ${r.failures} failed`);
      }
  } finally {
    await provider.stop();
  }
  const of = (client: string) => results.filter((r) => r.client === client);
  const m = { msgbridge: median(of('msgbridge').map((r) => r.usPerCall)), undici: median(of('undici').map((r) => r.usPerCall)) };
  console.log(
    JSON.stringify({
      calls: CALLS,
      inFlight: IN_FLIGHT,
      medianUsPerCall: m,
      ratio: Math.round((m.msgbridge / m.undici) * 100) / 100,
      medianRssMiB: { msgbridge: median(of('msgbridge').map((r) => r.rssMiB)), undici: median(of('undici').map((r) => r.rssMiB)) },
    }),
  );
}

await main();
