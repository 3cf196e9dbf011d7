import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { availableParallelism } from 'node:os';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { AggregatorRegistry, Registry, type Aggregator, type MetricObjectWithValues, type MetricValue } from 'prom-client';
import type { Config } from '../config/schema.js';
import { MsgbridgeError, type ErrorCode } from '../platform/errors.js';
import { silentLogger, type Logger } from '../platform/logger.js';
import { localUrl } from '../platform/net.js';
import { startIngress, type Ingress, type IngressState } from './index.js';

/**
 * `ingress.workers`: N worker threads, each a whole ingress (its own uWS app, publisher and
 * producer: startIngress in worker-entry.ts) on one port, which the kernel shares between their
 * listening sockets (uWS sets SO_REUSEPORT on Linux for every port but 0, and spreads
 * connections, not requests). This main thread is the composition root: it starts them, answers
 * their /metrics requests with every worker's metrics aggregated, keeps one readiness slot per
 * worker in shared memory (each worker's /readyz reads all of them), forwards SIGHUP, and
 * drains them all. A worker that stops on its own is not restarted: the ingress turns not ready
 * and `onWorkerFailure` tells the caller, which stops (README.md, "Worker threads").
 */

type Metrics = MetricObjectWithValues<MetricValue<string>>[];

/** Main thread → worker. */
export type ToWorker =
  | { type: 'collect'; id: number }
  | { type: 'metrics'; id: number; body?: string; error?: string }
  | { type: 'drain' }
  | { type: 'reload' }
  | { type: 'close-now' };

/** Worker → main thread. */
export type FromWorker =
  | { type: 'listening'; port: number }
  | { type: 'start-failed'; code?: string; message: string }
  | { type: 'collected'; id: number; metrics: Metrics }
  | { type: 'metrics'; id: number }
  | { type: 'drained'; ok: boolean; error?: string }
  | { type: 'crashed'; error: string };

export interface IngressWorkerData {
  config: Config;
  /** 0-based; the worker's label is index + 1. */
  index: number;
  port: number;
  brokers: string[];
  /** One Int32 per worker: 1 when that worker's /readyz would be 200 on its own. */
  slots: SharedArrayBuffer;
  unsafeDiscardRecords: boolean;
}

export interface StartIngressWorkersOptions {
  logger?: Logger;
  /** Bootstrap servers; default config.kafka.brokers. */
  brokers?: string[];
  /** Called once when a worker thread stops on its own after the start: the ingress is then not ready and should be stopped. */
  onWorkerFailure?: (error: Error) => void;
  /** Benchmarks only (see StartIngressOptions). */
  unsafeDiscardRecords?: boolean;
  /** The worker module; default worker-entry.js (or .mjs, or .ts through tsx) beside this file. */
  workerEntry?: URL;
}

export interface IngressWorkers extends Ingress {
  /** Worker threads serving the port; 1 = the ingress runs in this thread (no worker thread). */
  readonly workers: number;
  /**
   * Closes every worker's sockets and ends the threads now: for a process about to exit, after
   * its drain or when the grace period ran out. (A thread ended while uWS holds sockets aborts
   * the whole process, so process.exit() must not come first.)
   */
  terminate(): Promise<void>;
}

/** Reads a file's text, or undefined when it cannot be read. */
export type ReadText = (path: string) => string | undefined;

const readText: ReadText = (path) => {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
};

/**
 * The CPU quota of this process's cgroup, in whole cores (rounded up), or undefined without
 * one: cgroup v2 `cpu.max` ("max 100000" = none, "150000 100000" = 1.5 → 2), else cgroup v1
 * `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1 = none). Every level from the process's own
 * cgroup (/proc/self/cgroup) up to the mount's root is read, and the smallest quota wins.
 */
export function cgroupCpuLimit(read: ReadText = readText): number | undefined {
  const memberships = (read('/proc/self/cgroup') ?? '').split('\n').map((line) => line.split(':'));
  const ancestry = (mount: string, path: string | undefined) => {
    const dirs = [mount];
    const parts = (path ?? '/').split('/').filter(Boolean);
    for (let i = 1; i <= parts.length; i++) dirs.push(`${mount}/${parts.slice(0, i).join('/')}`);
    return dirs;
  };
  const limits: number[] = [];
  const v2Path = memberships.find((m) => m[0] === '0' && m[1] === '')?.[2];
  for (const dir of ancestry('/sys/fs/cgroup', v2Path)) {
    const [quota, period] = (read(`${dir}/cpu.max`) ?? '').trim().split(/\s+/);
    if (quota === undefined || quota === '' || quota === 'max') continue;
    const cores = Number(quota) / Number(period ?? 100_000);
    if (Number.isFinite(cores) && cores > 0) limits.push(Math.ceil(cores));
  }
  if (limits.length === 0) {
    const v1Path = memberships.find((m) => m[1]?.split(',').includes('cpu'))?.[2];
    for (const mount of ['/sys/fs/cgroup/cpu', '/sys/fs/cgroup/cpu,cpuacct']) {
      for (const dir of ancestry(mount, v1Path)) {
        const quota = Number(read(`${dir}/cpu.cfs_quota_us`)?.trim());
        const period = Number(read(`${dir}/cpu.cfs_period_us`)?.trim());
        if (quota > 0 && period > 0) limits.push(Math.ceil(quota / period));
      }
    }
  }
  return limits.length === 0 ? undefined : Math.min(...limits);
}

/** The cores this process may use: the CPUs it may run on (affinity), bounded by its cgroup's CPU quota. */
export function availableCores(deps: { read?: ReadText; parallelism?: () => number } = {}): number {
  const cpus = (deps.parallelism ?? availableParallelism)();
  const quota = cgroupCpuLimit(deps.read ?? readText);
  return Math.max(1, quota === undefined ? cpus : Math.min(cpus, quota));
}

/** `ingress.workers` as a number of threads ("auto": availableCores(), at most 256). */
export function resolveIngressWorkers(setting: number | 'auto', cores: () => number = availableCores): number {
  return setting === 'auto' ? Math.min(256, Math.max(1, cores())) : setting;
}

/**
 * How each metric of the workers is combined (README.md, "Worker threads"): counters,
 * histograms and the queue gauges add up; ready and kafka_connected take the minimum (1 only
 * when every worker is); what every thread of the process reads alike (process_*: CPU, memory,
 * descriptors; the businesses file's count and reloads, which each worker does on its own)
 * takes the maximum; what is each thread's own (nodejs_*: heap, event loop, GC) keeps a
 * `worker` label.
 */
export function aggregationOf(name: string): { aggregator: Aggregator; perWorker: boolean } {
  if (name === 'msgbridge_ingress_ready' || name === 'msgbridge_ingress_kafka_connected') return { aggregator: 'min', perWorker: false };
  if (name.startsWith('msgbridge_process_') || name.startsWith('msgbridge_config_')) return { aggregator: 'max', perWorker: false };
  if (name === 'msgbridge_nodejs_version_info') return { aggregator: 'first', perWorker: false };
  if (name.startsWith('msgbridge_nodejs_')) return { aggregator: 'sum', perWorker: true };
  return { aggregator: 'sum', perWorker: false };
}

/** One registry holding every worker's metrics, combined by aggregationOf. */
export function aggregateWorkerMetrics(workers: { id: string; metrics: Metrics }[]): Registry {
  const relabelled = workers.map(({ id, metrics }) =>
    metrics.map((metric) => {
      const { aggregator, perWorker } = aggregationOf(metric.name);
      return {
        ...metric,
        aggregator,
        values: perWorker ? metric.values.map((v) => ({ ...v, labels: { ...v.labels, worker: id } })) : metric.values,
      };
    }),
  );
  return AggregatorRegistry.aggregate(relabelled);
}

/** The workers' metrics as the main thread reads them (Ingress.registry with workers). */
class WorkersRegistry extends Registry {
  constructor(private readonly collect: () => Promise<Registry>) {
    super();
  }
  override async metrics(): Promise<string> {
    return (await this.collect()).metrics();
  }
  override async getMetricsAsJSON(): Promise<Metrics> {
    return (await this.collect()).getMetricsAsJSON();
  }
}

const COLLECT_TIMEOUT_MS = 5000;
const READY = 1;

/** The worker module, and whether it is TypeScript (run through tsx: tests, `tsx src/cli.ts`). */
function defaultEntry(): { url: URL; typescript: boolean } {
  for (const name of ['worker-entry.js', 'worker-entry.mjs']) {
    const url = new URL(`./${name}`, import.meta.url);
    if (existsSync(fileURLToPath(url))) return { url, typescript: false };
  }
  const url = new URL('./worker-entry.ts', import.meta.url);
  if (existsSync(fileURLToPath(url))) return { url, typescript: true };
  throw new MsgbridgeError('INVALID_ARGUMENT', `the ingress worker module is missing: no worker-entry.js beside ${fileURLToPath(import.meta.url)}`);
}

function spawnWorker(entry: { url: URL; typescript: boolean }, workerData: IngressWorkerData): Worker {
  if (!entry.typescript) return new Worker(entry.url, { workerData });
  // Node 20 runs no TypeScript, and a worker does not inherit the tsx loader: register it first.
  const tsx = tsxEsmApi();
  const code = `import(${JSON.stringify(tsx)}).then((m) => { (m.register ?? m.default.register)(); return import(${JSON.stringify(entry.url.href)}); })`;
  return new Worker(code, { eval: true, workerData });
}

/** tsx's ESM API module (its exports map: the CommonJS one cannot be imported from ESM). */
function tsxEsmApi(): string {
  const manifest = createRequire(import.meta.url).resolve('tsx/package.json');
  const { exports } = JSON.parse(readFileSync(manifest, 'utf8')) as { exports: Record<string, { import: { default: string } }> };
  return new URL(exports['./esm/api']!.import.default, pathToFileURL(manifest)).href;
}

/** A free TCP port on `host`: uWS shares a port between listeners (SO_REUSEPORT) only when the port is given, never for 0. */
function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

class WorkerHandle {
  readonly label: string;
  readonly exited: Promise<number>;
  /** Answered its drain (ok or not), or told to close now: its exit is expected. */
  expectedExit = false;
  drainedOk = false;
  /** Stopped on its own after the start. */
  failed = false;
  alive = true;
  listening = false;
  lastError: string | undefined;
  private readonly replies = new Map<number, (metrics: Metrics) => void>();
  private drained: (() => void) | undefined;

  constructor(
    readonly index: number,
    readonly thread: Worker,
    onMessage: (handle: WorkerHandle, message: FromWorker) => void,
  ) {
    this.label = String(index + 1);
    thread.on('message', (message: FromWorker) => {
      if (message.type === 'collected') {
        this.replies.get(message.id)?.(message.metrics);
        this.replies.delete(message.id);
      } else if (message.type === 'drained') {
        this.expectedExit = true;
        this.drainedOk = message.ok;
        if (message.error) this.lastError = message.error;
        this.drained?.();
      } else if (message.type === 'crashed') {
        this.lastError = message.error;
      }
      onMessage(this, message);
    });
    thread.on('error', (err) => (this.lastError ??= err.stack ?? err.message));
    this.exited = new Promise((resolve) =>
      thread.once('exit', (code) => {
        this.alive = false;
        this.drained?.();
        resolve(code);
      }),
    );
  }

  post(message: ToWorker): void {
    if (this.alive) this.thread.postMessage(message);
  }

  collect(id: number): Promise<Metrics> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.replies.delete(id);
        reject(new Error(`ingress worker ${this.label} did not hand over its metrics within ${COLLECT_TIMEOUT_MS} ms`));
      }, COLLECT_TIMEOUT_MS);
      this.replies.set(id, (metrics) => {
        clearTimeout(timer);
        resolve(metrics);
      });
      this.post({ type: 'collect', id });
    });
  }

  /** Asks for a drain; resolves with whether it finished (the thread has ended either way). */
  async drain(): Promise<boolean> {
    if (!this.alive) return this.drainedOk;
    await new Promise<void>((resolve) => {
      this.drained = resolve;
      this.post({ type: 'drain' });
    });
    await this.exited;
    return this.drainedOk;
  }

  /** Closes its sockets and ends it now. */
  async terminate(): Promise<void> {
    if (!this.alive) return;
    this.expectedExit = true;
    this.post({ type: 'close-now' });
    const timer = setTimeout(() => void this.thread.terminate(), 1000);
    await this.exited;
    clearTimeout(timer);
  }
}

/**
 * The ingress on `ingress.workers` threads (module comment). With 1 (the default), or "auto" on
 * one core, it is startIngress in this thread, exactly as without the setting.
 */
export async function startIngressWorkers(config: Config, options: StartIngressWorkersOptions = {}): Promise<IngressWorkers> {
  const logger = options.logger ?? silentLogger;
  const count = resolveIngressWorkers(config.ingress.workers);
  const brokers = options.brokers ?? config.kafka.brokers;
  if (count === 1) {
    const ingress = await startIngress({ config, logger, brokers, unsafeDiscardRecords: options.unsafeDiscardRecords });
    return Object.assign(ingress, { workers: 1, terminate: async () => {} });
  }

  const entry = options.workerEntry ? { url: options.workerEntry, typescript: options.workerEntry.pathname.endsWith('.ts') } : defaultEntry();
  const slots = new Int32Array(new SharedArrayBuffer(4 * count));
  const handles: WorkerHandle[] = [];
  let state: IngressState = 'running';
  let starting = true;
  let failed: Error | undefined;
  let nextId = 0;

  const collect = async (): Promise<Registry> => {
    const live = handles.filter((h) => h.alive && h.listening);
    const metrics = await Promise.all(live.map(async (h) => ({ id: h.label, metrics: await h.collect(++nextId) })));
    return aggregateWorkerMetrics(metrics);
  };

  const onMessage = (handle: WorkerHandle, message: FromWorker) => {
    if (message.type !== 'metrics') return;
    collect()
      .then((registry) => registry.metrics())
      .then(
        (body) => handle.post({ type: 'metrics', id: message.id, body }),
        (err: unknown) => handle.post({ type: 'metrics', id: message.id, error: (err as Error).message }),
      );
  };

  const onExit = (handle: WorkerHandle, code: number) => {
    Atomics.store(slots, handle.index, 0);
    if (handle.expectedExit || starting) return;
    handle.failed = true;
    const error = new Error(`ingress worker ${handle.label} stopped (exit code ${code}): ${firstLine(handle.lastError) ?? 'no error reported'}`);
    logger.error({ worker: handle.index + 1, exitCode: code, err: firstLine(handle.lastError) }, 'ingress worker thread stopped unexpectedly: the ingress is not ready and stops');
    if (failed) return;
    failed = error;
    options.onWorkerFailure?.(error);
  };

  /** Starts worker `index` on `port`; resolves once it listens. */
  const start = (index: number, port: number): Promise<WorkerHandle> => {
    const thread = spawnWorker(entry, { config, index, port, brokers, slots: slots.buffer as SharedArrayBuffer, unsafeDiscardRecords: options.unsafeDiscardRecords ?? false });
    const handle = new WorkerHandle(index, thread, onMessage);
    handles.push(handle);
    void handle.exited.then((code) => onExit(handle, code));
    return new Promise((resolve, reject) => {
      thread.on('message', (message: FromWorker) => {
        if (message.type === 'listening') {
          handle.listening = true;
          resolve(handle);
        } else if (message.type === 'start-failed') {
          handle.expectedExit = true;
          reject(message.code ? new MsgbridgeError(message.code as ErrorCode, message.message) : new Error(message.message));
        }
      });
      void handle.exited.then((code) => reject(new Error(`ingress worker ${handle.label} exited (code ${code}) before listening: ${firstLine(handle.lastError) ?? 'no error reported'}`)));
    });
  };

  const stopAll = () => Promise.all(handles.map((h) => h.drain()));
  const probed = config.ingress.port === 0;
  let port = probed ? await freePort(config.ingress.host) : config.ingress.port;
  try {
    // The first worker alone: it creates the topics; the others find them.
    for (let attempt = 1; ; attempt++) {
      try {
        await start(0, port);
        break;
      } catch (err) {
        // A probed port taken by someone else in between: another one.
        if (!probed || attempt >= 3 || !/cannot listen/.test((err as Error).message)) throw err;
        handles.pop();
        port = await freePort(config.ingress.host);
      }
    }
    await Promise.all(Array.from({ length: count - 1 }, (_, i) => start(i + 1, port)));
  } catch (err) {
    await stopAll();
    throw err;
  }
  starting = false;

  const onHangup = () => handles.forEach((h) => h.post({ type: 'reload' }));
  if (config.businessesFile !== null) process.on('SIGHUP', onHangup);
  const url = localUrl(config.ingress.host, port);
  logger.info({ url, workers: count }, 'ingress worker threads listening');

  let draining: Promise<void> | undefined;
  const drain = () => {
    draining ??= (async () => {
      state = 'draining';
      const results = await stopAll();
      process.off('SIGHUP', onHangup);
      state = 'stopped';
      const unfinished = handles.filter((h, i) => !results[i] && !h.failed).map((h) => `worker ${h.label} did not finish its drain`);
      const failedOnes = handles.filter((h) => h.failed).map((h) => `worker ${h.label} had stopped unexpectedly`);
      if (unfinished.length + failedOnes.length > 0) throw new Error(`ingress drain incomplete: ${[...failedOnes, ...unfinished].join('; ')}`);
    })();
    return draining;
  };

  return {
    port,
    url,
    workers: count,
    get ready() {
      return state === 'running' && !failed && handles.every((h) => h.alive && Atomics.load(slots, h.index) === READY);
    },
    get state() {
      return state;
    },
    registry: new WorkersRegistry(collect),
    drain,
    close: drain,
    async terminate() {
      process.off('SIGHUP', onHangup);
      await Promise.all(handles.map((h) => h.terminate()));
    },
  };
}

function firstLine(text: string | undefined): string | undefined {
  return text?.split('\n')[0];
}
