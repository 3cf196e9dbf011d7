// The sender's provider calls, client side only: CPU per call and RSS of the project's client
// (src/sender/provider-client.ts over src/platform/http1-pool.ts) against undici's Pool doing
// the same calls (its `request` API, headers and body as the sender sent them before). The Go
// fake provider (BENCH_FAKEPROVIDER_BIN) answers; each client runs in a process of its
// own, alternating round by round, so that one's garbage or warm-up does not weigh on the other.
//
//   npx tsx bench/provider-client.ts [--calls 40000] [--in-flight 128] [--latency-ms 0] [--rounds 3]
// Prints, per round, µs of CPU per call (process.cpuUsage over the timed calls) and RSS, then
// the medians and their ratio.
//
//   npx tsx bench/provider-client.ts --proxy [--calls 40000] [--in-flight 128] [--rounds 3]
// The egress proxy's cost instead: the project's client alone, direct and through a proxy on
// loopback, per round in processes of their own: to the Go fake provider (http) directly,
// through Debian's tinyproxy (absolute form; tinyproxy closes after each answer, so a
// connection per call) and through test/helpers/http-proxy.ts's proxy (absolute form, kept
// alive); to a Node https origin (the test certificate) directly and through both proxies
// (CONNECT tunnels, kept alive). Per mode: µs of client CPU per call, calls/s, and the p50/p99 of a
// call's wall time.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { createProviderClient } from '../src/sender/provider-client.js';
import { proxyOf, startTestProxy, startTinyproxy } from '../test/helpers/http-proxy.js';
import { benchArgs } from './args.js';
import { peerBinary, startFakeProvider } from './peers.js';

const args = benchArgs(import.meta.url, {
  calls: { type: 'string', default: '40000' },
  'in-flight': { type: 'string', default: '128' },
  'latency-ms': { type: 'string', default: '0' },
  rounds: { type: 'string', default: '3' },
  proxy: { type: 'boolean', default: false },
  // Internal: a round's client runs in a child started with these.
  child: { type: 'string' },
  url: { type: 'string' },
  'proxy-url': { type: 'string' },
});
const PROXY_MODE = args.values.proxy === true;
const CALLS = args.wholeNumber('calls', 1);
const IN_FLIGHT = args.wholeNumber('in-flight', 1);
const LATENCY_MS = args.wholeNumber('latency-ms');
const ROUNDS = args.wholeNumber('rounds', 1);
const API_KEY = 'bench-api-key';
const BODY = {
  recipient: { channelType: 'whatsapp', id: '+15550001111' },
  message: { text: 'Your order 1234 has shipped and will arrive tomorrow.' },
};

interface Result {
  client: string;
  usPerCall: number;
  rssMiB: number;
  failures: number;
  callsPerSecond?: number;
  p50Ms?: number;
  p99Ms?: number;
}

const TLS = {
  key: readFileSync(join(import.meta.dirname, '..', 'test', 'fixtures', 'tls-localhost.key')),
  cert: readFileSync(join(import.meta.dirname, '..', 'test', 'fixtures', 'tls-localhost.crt')),
};

type Call = () => Promise<boolean>;

function callers(client: string, url: string, proxyUrl?: string): { call: Call; close: () => Promise<void> } {
  if (client !== 'undici') {
    const proxy = proxyUrl ? proxyOf(proxyUrl) : undefined;
    const c = createProviderClient({
      baseUrl: url,
      connections: IN_FLIGHT,
      callTimeoutMs: 10_000,
      tls: { ca: TLS.cert },
      ...(proxy ? { proxy } : {}),
    });
    return {
      call: async () => (await c.send('text', 'biz_bench', API_KEY, BODY)).kind === 'accepted',
      close: () => c.close(),
    };
  }
  const pool = new Pool(url, { connections: IN_FLIGHT, pipelining: 1, keepAliveTimeout: 30_000 });
  const headers = {
    Accept: 'application/json',
    'Content-Type': 'application/json',
    'X-API-Key': API_KEY,
    'User-Agent': 'msgbridge-sender',
  };
  return {
    call: async () => {
      const res = await pool.request({
        method: 'POST',
        path: '/v1/businesses/biz_bench/send/messages',
        headers,
        body: JSON.stringify(BODY),
      });
      const body = (await res.body.json()) as { id?: string };
      return res.statusCode === 200 && typeof body.id === 'string';
    },
    close: () => pool.close(),
  };
}

async function runChild(client: string, url: string, proxyUrl?: string): Promise<void> {
  const { call, close } = callers(client, url, proxyUrl);
  let failures = 0;
  const times: number[] = [];
  const drive = async (n: number, timed: boolean) => {
    let next = 0;
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        while (next++ < n) {
          const started = performance.now();
          if (!(await call())) failures += 1;
          if (timed) times.push(performance.now() - started);
        }
      }),
    );
  };
  await drive(Math.min(5000, CALLS), false); // warm-up: connections open, code optimized
  failures = 0;
  const cpu = process.cpuUsage();
  const wall = performance.now();
  await drive(CALLS, PROXY_MODE);
  const seconds = (performance.now() - wall) / 1000;
  const used = process.cpuUsage(cpu);
  const result: Result = {
    client,
    usPerCall: Math.round(((used.user + used.system) / CALLS) * 10) / 10,
    rssMiB: Math.round(process.memoryUsage().rss / 1048576),
    failures,
  };
  if (PROXY_MODE) {
    times.sort((a, b) => a - b);
    result.callsPerSecond = Math.round(CALLS / seconds);
    result.p50Ms = Math.round(times[Math.floor(times.length / 2)]! * 100) / 100;
    result.p99Ms = Math.round(times[Math.floor(times.length * 0.99)]! * 100) / 100;
  }
  await close();
  process.stdout.write(`${JSON.stringify(result)}\n`);
}

function once(client: string, url: string, proxyUrl?: string): Promise<Result> {
  return new Promise((resolve, reject) => {
    const extra = [...(proxyUrl ? ['--proxy-url', proxyUrl] : []), ...(PROXY_MODE ? ['--proxy'] : [])];
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        fileURLToPath(import.meta.url),
        '--child',
        client,
        '--url',
        url,
        '--calls',
        String(CALLS),
        '--in-flight',
        String(IN_FLIGHT),
        ...extra,
      ],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.once('exit', (code) =>
      code === 0 ? resolve(JSON.parse(out.trim()) as Result) : reject(new Error(`${client} exited ${code}`)),
    );
  });
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** An https origin in a process of its own (so that its CPU is not the client's), answering every POST with an id. */
async function runOrigin(): Promise<void> {
  let n = 0;
  const server = createHttpsServer(TLS, (req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end(`{"id":"m${(n += 1)}"}`));
  });
  server.keepAliveTimeout = 30_000;
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  process.stdout.write(`${(server.address() as AddressInfo).port}\n`);
  process.stdin.resume();
  process.stdin.on('end', () => process.exit(0));
}

async function startOrigin(): Promise<{ url: string; stop: () => void }> {
  const child = spawn(
    process.execPath,
    ['--import', 'tsx', fileURLToPath(import.meta.url), '--child', 'origin', '--proxy'],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  const port = await new Promise<string>((resolve, reject) => {
    child.stdout.once('data', (d: Buffer) => resolve(d.toString().trim()));
    child.once('exit', (code) => reject(new Error(`the https origin exited ${code}`)));
  });
  return { url: `https://localhost:${port}`, stop: () => child.stdin.end() };
}

/** The client direct and through proxies (header comment): rounds of every mode, in processes of their own. */
async function proxyMain(fakeProviderUrl: string): Promise<void> {
  const tiny = await startTinyproxy({ logLevel: 'Warning', maxClients: Math.max(200, IN_FLIGHT * 3) });
  const kept = await startTestProxy();
  const origin = await startOrigin();
  const modes: { name: string; url: string; proxy?: string }[] = [
    { name: 'http direct', url: fakeProviderUrl },
    { name: 'http via tinyproxy', url: fakeProviderUrl, proxy: tiny.url },
    { name: 'http via kept-alive proxy', url: fakeProviderUrl, proxy: kept.url },
    { name: 'https direct', url: origin.url },
    { name: 'https via tinyproxy', url: origin.url, proxy: tiny.url },
    { name: 'https via kept-alive proxy', url: origin.url, proxy: kept.url },
  ];
  const results: Result[] = [];
  try {
    for (let round = 1; round <= ROUNDS; round++)
      for (const mode of round % 2 === 1 ? modes : [...modes].reverse()) {
        const r = { ...(await once(mode.name, mode.url, mode.proxy)), client: mode.name };
        results.push(r);
        console.log(
          `round ${round} ${mode.name.padEnd(26)} ${r.usPerCall} µs CPU/call, ${r.callsPerSecond} calls/s, p50 ${r.p50Ms} ms, p99 ${r.p99Ms} ms, ${r.failures} failed`,
        );
      }
  } finally {
    origin.stop();
    await kept.close();
    await tiny.close();
  }
  const summary = modes.map(({ name }) => {
    const of = results.filter((r) => r.client === name);
    return {
      mode: name,
      usPerCall: median(of.map((r) => r.usPerCall)),
      callsPerSecond: median(of.map((r) => r.callsPerSecond!)),
      p50Ms: median(of.map((r) => r.p50Ms!)),
      p99Ms: median(of.map((r) => r.p99Ms!)),
      failures: of.reduce((n, r) => n + r.failures, 0),
    };
  });
  console.log(JSON.stringify({ calls: CALLS, inFlight: IN_FLIGHT, rounds: ROUNDS, medians: summary }));
}

async function main(): Promise<void> {
  if (args.values.child === 'origin') return runOrigin();
  if (args.values.child) return runChild(args.values.child, args.values.url!, args.values['proxy-url']);
  const binary = peerBinary('fakeprovider');
  if (!binary)
    throw new Error('the Go fake provider is needed: set BENCH_FAKEPROVIDER_BIN (docs/benchmarks.md, "Peers")');
  const provider = await startFakeProvider(binary, LATENCY_MS, API_KEY);
  if (PROXY_MODE) {
    try {
      return await proxyMain(provider.url);
    } finally {
      await provider.stop();
    }
  }
  const results: Result[] = [];
  try {
    for (let round = 1; round <= ROUNDS; round++)
      for (const client of round % 2 === 1 ? ['undici', 'msgbridge'] : ['msgbridge', 'undici']) {
        const r = await once(client, provider.url);
        results.push(r);
        console.log(
          `round ${round} ${client.padEnd(9)} ${r.usPerCall} µs CPU/call, RSS ${r.rssMiB} MiB, ${r.failures} failed`,
        );
      }
  } finally {
    await provider.stop();
  }
  const of = (client: string) => results.filter((r) => r.client === client);
  const m = {
    msgbridge: median(of('msgbridge').map((r) => r.usPerCall)),
    undici: median(of('undici').map((r) => r.usPerCall)),
  };
  console.log(
    JSON.stringify({
      calls: CALLS,
      inFlight: IN_FLIGHT,
      medianUsPerCall: m,
      ratio: Math.round((m.msgbridge / m.undici) * 100) / 100,
      medianRssMiB: {
        msgbridge: median(of('msgbridge').map((r) => r.rssMiB)),
        undici: median(of('undici').map((r) => r.rssMiB)),
      },
    }),
  );
}

await main();
