// wrk (Debian's, or BENCH_WRK_BIN) as an independent load generator for the HTTP side-by-side
// benches: it sends the signed webhook mix of bench/wrk/signed-webhooks.lua, a new event with
// its own signature per request, written by a C client outside Node. Its CPU is read from the
// shell that waits for it (the children's time in /proc/<shell>/stat), since wrk is gone by then.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { track } from './peers.js';

const SCRIPT = fileURLToPath(new URL('./wrk/signed-webhooks.lua', import.meta.url));

export interface WrkLoad {
  /** The webhook address; with `perTopicPaths` each event goes to `{url}/{topic}`. */
  url: string;
  secret: string;
  connections: number;
  /** wrk threads, at most `connections`. */
  threads: number;
  durationMs: number;
  perTopicPaths: boolean;
  statusesOnly: boolean;
  bodyBytes: { min: number; max: number };
  acceptEncoding: 'gzip' | 'none';
}

export interface WrkReport {
  /** Answers received. */
  answered: number;
  /** Answers below 400 (wrk counts those over 399 apart). */
  ok: number;
  /** Answers over 399. */
  rejected: number;
  /** Socket errors and wrk's timeouts. */
  errors: number;
  latencyMs: { p50: number; p90: number; p99: number; p999: number; max: number };
  durationMs: number;
  /** CPU seconds wrk used (user + system). */
  cpuSeconds: number;
}

/** The wrk binary, or undefined (with the reason on stderr) when there is none. */
export function wrkBinary(): string | undefined {
  const binary = process.env.BENCH_WRK_BIN || 'wrk';
  if (binary.includes('/') ? existsSync(binary) : spawnSync(binary, ['--version']).error === undefined) return binary;
  process.stderr.write(`[wrk] no ${binary}: install it (apt-get install wrk) or set BENCH_WRK_BIN\n`);
  return undefined;
}

/** The Lua script's settings, from a load's options. */
export function wrkEnvironment(
  load: Pick<WrkLoad, 'url' | 'secret' | 'perTopicPaths' | 'statusesOnly' | 'bodyBytes' | 'acceptEncoding'>,
): Record<string, string> {
  const path = new URL(load.url).pathname.replace(/\/+$/, '') || '/';
  return {
    WRK_SECRET: load.secret,
    WRK_PATH: path,
    WRK_PER_TOPIC: load.perTopicPaths ? '1' : '0',
    WRK_STATUSES_ONLY: load.statusesOnly ? '1' : '0',
    WRK_BODY_MIN: String(load.bodyBytes.min),
    WRK_BODY_MAX: String(load.bodyBytes.max),
    WRK_ACCEPT_ENCODING: load.acceptEncoding,
  };
}

interface DoneLine {
  requests: number;
  durationUs: number;
  status: number;
  connect: number;
  read: number;
  write: number;
  timeout: number;
  latencyUs: { p50: number; p90: number; p99: number; p999: number; max: number };
}

/** Reads what the script's done() and the wrapping shell print. */
export function parseWrkOutput(stdout: string, ticksPerSecond = 100): WrkReport {
  const done = /^\{"requests":.*\}$/m.exec(stdout)?.[0];
  const ticks = /^wrk-cpu-ticks (\d+)$/m.exec(stdout)?.[1];
  if (done === undefined || ticks === undefined)
    throw new Error(`wrk printed no report: ${JSON.stringify(stdout.slice(-300))}`);
  const d = JSON.parse(done) as DoneLine;
  const ms = (us: number) => Math.round(us / 10) / 100;
  return {
    answered: d.requests,
    ok: d.requests - d.status,
    rejected: d.status,
    errors: d.connect + d.read + d.write + d.timeout,
    latencyMs: {
      p50: ms(d.latencyUs.p50),
      p90: ms(d.latencyUs.p90),
      p99: ms(d.latencyUs.p99),
      p999: ms(d.latencyUs.p999),
      max: ms(d.latencyUs.max),
    },
    durationMs: ms(d.durationUs),
    cpuSeconds: Number(ticks) / ticksPerSecond,
  };
}

/** Runs wrk once against `load.url` and reports its counts, latency and CPU. */
export async function runWrk(binary: string, load: WrkLoad): Promise<WrkReport> {
  const origin = new URL(load.url).origin;
  const seconds = Math.max(1, Math.round(load.durationMs / 1000));
  const threads = Math.max(1, Math.min(load.threads, load.connections));
  // The shell waits for wrk, then prints the CPU time of the children it waited for (fields 16
  // and 17 of its own stat line: cutime and cstime, in clock ticks).
  const shell =
    'ticks() { awk \'{print $16 + $17}\' /proc/$$/stat; }; "$@"; code=$?; echo "wrk-cpu-ticks $(ticks)"; exit $code';
  const args = [
    binary,
    '-t',
    String(threads),
    '-c',
    String(load.connections),
    '-d',
    `${seconds}s`,
    '--timeout',
    '30s',
    '-s',
    SCRIPT,
    origin,
  ];
  const child = track(
    spawn('sh', ['-c', shell, 'sh', ...args], {
      env: { ...process.env, ...wrkEnvironment(load) },
      stdio: ['ignore', 'pipe', 'inherit'],
    }),
  );
  let stdout = '';
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
  const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
  if (code !== 0) throw new Error(`wrk exited with ${code}: ${JSON.stringify(stdout.slice(-300))}`);
  return parseWrkOutput(stdout);
}
