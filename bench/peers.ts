// The comparison peers of the benchmarks, used as tools and never part of the project: a pinned
// Redpanda Connect build (its configurations config.yaml and sender.yaml beside the binary) and a
// Go fake provider. The benches take them from BENCH_RPCONNECT_BIN and BENCH_FAKEPROVIDER_BIN
// (docs/benchmarks.md "Peers" says how to build them); a peer that is not given is skipped.
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline';

export type PeerName = 'rpconnect' | 'fakeprovider';

/** The variable naming a peer's binary. */
export const peerVariable = (name: PeerName) => `BENCH_${name.toUpperCase()}_BIN`;

/** The peer's binary from its variable; undefined (with the reason on stderr) when it is not given or not there. */
export function peerBinary(name: PeerName): string | undefined {
  const variable = peerVariable(name);
  const binary = process.env[variable];
  if (!binary) return warn(`${variable} is not set: the ${name} peer is skipped (docs/benchmarks.md, "Peers")`);
  return existsSync(binary) ? binary : warn(`${binary} (${variable}) does not exist: the ${name} peer is skipped`);
}

/** One of Redpanda Connect's configurations: beside its binary, or in BENCH_RPCONNECT_CONFIG_DIR. */
export function peerConfig(name: 'config.yaml' | 'sender.yaml'): string {
  const dir = process.env.BENCH_RPCONNECT_CONFIG_DIR || dirname(process.env[peerVariable('rpconnect')] ?? '.');
  return join(dir, name);
}

function warn(text: string): undefined {
  process.stderr.write(`[peers] ${text}\n`);
  return undefined;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Children still running: killed if the driver dies, so that none outlives a failed run. */
const live = new Set<ChildProcess>();
process.on('exit', () => {
  for (const child of live) child.kill('SIGKILL');
});

export function track(child: ChildProcess): ChildProcess {
  live.add(child);
  child.once('exit', () => live.delete(child));
  return child;
}

/**
 * The first line of a child's output that `match`es; the stream keeps being read after it, so the child never blocks on
 * a full pipe.
 */
export function firstLine(
  child: ChildProcess,
  match: (line: string) => boolean,
  stream: 'stdout' | 'stderr' = 'stdout',
  timeoutMs = 120_000,
): Promise<string> {
  const lines = createInterface({ input: child[stream]! });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out waiting for the child to start')), timeoutMs);
    child.once('exit', (code) => reject(new Error(`child exited with ${code} before it was ready`)));
    lines.on('line', (l) => {
      if (match(l)) {
        clearTimeout(timer);
        resolve(l);
      }
    });
  });
}

export async function stopChild(child: ChildProcess, graceMs = 30_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

async function waitForHttp(url: string, child: ChildProcess, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`${url}: the process exited with ${child.exitCode}`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) throw new Error(`${url} did not answer 200 within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

export interface FakeProviderStats {
  calls: number;
  distinct: number;
  duplicates: number;
  bad: number;
  unauthorized: number;
  outOfOrder: number;
  maxInFlight: number;
  connections: number;
}

export interface FakeProvider {
  url: string;
  pid: number;
  stats(): Promise<FakeProviderStats>;
  reset(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * The Go fake provider: answers every valid send after `latencyMs`, counting duplicates and order by the text `rid=…
 * k=… s=…`.
 */
export async function startFakeProvider(binary: string, latencyMs: number, apiKey: string): Promise<FakeProvider> {
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const child = track(
    spawn(binary, ['-addr', `127.0.0.1:${port}`, '-latency', `${latencyMs}ms`, '-key', apiKey], {
      stdio: ['ignore', 'ignore', 'inherit'],
    }),
  );
  await waitForHttp(`${url}/stats`, child, 10_000);
  return {
    url,
    pid: child.pid!,
    stats: async () => (await (await fetch(`${url}/stats`)).json()) as FakeProviderStats,
    reset: async () => void (await fetch(`${url}/reset`, { method: 'POST' })),
    stop: () => stopChild(child),
  };
}

/** Redpanda Connect on one of its configurations; resolves once its /ready answers 200 (input and output connected). */
export async function startRpconnect(
  binary: string,
  config: string,
  env: Record<string, string>,
): Promise<{ child: ChildProcess; pid: number }> {
  const adminPort = await freePort();
  const child = track(
    spawn(binary, ['-c', config], {
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ADMIN_PORT: String(adminPort), LOG_LEVEL: 'WARN', ...env },
      stdio: ['ignore', 'ignore', 'inherit'],
    }),
  );
  await waitForHttp(`http://127.0.0.1:${adminPort}/ready`, child, 60_000);
  return { child, pid: child.pid! };
}

/** CPU seconds (user + system) a live process has used; Linux clock ticks are 1/100 s. */
export function cpuSeconds(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return NaN;
  }
}

/** The machine's CPU time so far, all cores, in clock ticks: busy (everything but idle and iowait) and total. */
export function machineTicks(): { busy: number; total: number } {
  const fields = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
  const total = fields.reduce((a, b) => a + b, 0);
  return { busy: total - fields[3]! - fields[4]!, total };
}

/**
 * A figure read from each thread's file under /proc/<pid>/task, summed for the main thread and
 * for the others (GC, compiler, libuv pool: Node names none); a thread that ends meanwhile is
 * left out.
 */
function perThread(
  pid: number,
  file: 'stat' | 'status',
  read: (text: string) => number,
): { main: number; others: number } {
  const out = { main: 0, others: 0 };
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      out[Number(tid) === pid ? 'main' : 'others'] += read(readFileSync(`/proc/${pid}/task/${tid}/${file}`, 'utf8'));
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

/** CPU seconds of a live process's main thread and of its other threads. */
export function cpuByThread(pid: number): Record<string, number> {
  return perThread(pid, 'stat', (text) => {
    const fields = text.split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  });
}

/**
 * How often a live process's threads went to sleep so far (voluntary context switches, from
 * /proc): each is a wake-up later, so they stand in for wake-ups. The main thread's count is its
 * event loop's. A thread that ends between two readings takes its count out of `all`.
 */
export function sleepsSoFar(pid: number): { main: number; all: number } {
  const { main, others } = perThread(pid, 'status', (text) =>
    Number(/^voluntary_ctxt_switches:\s+(\d+)/m.exec(text)?.[1] ?? 0),
  );
  return { main, all: main + others };
}

/** A live process's peak resident memory (VmHWM), MiB. */
export function peakRssMb(pid: number): number {
  return statusMb(pid, 'VmHWM');
}

/** A live process's resident memory now (VmRSS), MiB. */
export function rssMb(pid: number): number {
  return statusMb(pid, 'VmRSS');
}

function statusMb(pid: number, field: 'VmHWM' | 'VmRSS'): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? 'NaN') / 1024;
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}
