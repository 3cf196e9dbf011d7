import type { Worker } from 'node:worker_threads';
import type { Registry } from 'prom-client';
import type { Config } from '../config/schema.js';
import { type ErrorCode, errorMessage, MsgbridgeError } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';
import { localUrl, probePort } from '../platform/net.js';
import { startAdminServer, type HttpServer } from '../runtime/http-server.js';
import { once } from '../runtime/role.js';
import type { Ingress, IngressState } from './index.js';
import { spawnWorker, type WorkerModule } from './worker-loader.js';
import { aggregateWorkerMetrics, WorkersRegistry, type Metrics } from './worker-metrics.js';
import type { FromWorker, ToWorker } from './worker-protocol.js';

/**
 * The main thread's side of `ingress.workers` (README.md, "Worker threads"): starts the worker
 * threads on one port, keeps their readiness slots, serves the admin port (/readyz from every
 * slot, /metrics merged from every worker), forwards SIGHUP, notices a worker that stops on its
 * own, drains and ends them. WorkerHandle is one thread seen from here; WorkerSupervisor holds
 * the state the ingress as a whole is in.
 */

export interface IngressWorkers extends Ingress {
  /** Worker threads serving the port; 1 = the ingress runs in this thread (no worker thread). */
  readonly workers: number;
  /**
   * With 1 worker, the ingress's own drain. With more, every worker's at once (each within its
   * own ingress.drainGraceMs): true, or rejects naming the workers that did not finish or had
   * stopped, never false; the runner's shutdown logs that reason and exits 1.
   */
  drain(): Promise<boolean>;
  /**
   * Closes every worker's sockets and ends the threads now: for a process about to exit, after
   * its drain or when the grace period ran out. (A thread ended while uWS holds sockets aborts
   * the whole process, so process.exit() must not come first.)
   */
  terminate(): Promise<void>;
}

export interface WorkerSupervisorOptions {
  config: Config;
  /** Worker threads to start: 2 or more. */
  count: number;
  brokers: string[];
  entry: WorkerModule;
  logger: Logger;
  unsafeDiscardRecords: boolean;
  /** Called once when a worker thread stops on its own after the start. */
  onWorkerFailure?: (error: Error) => void;
  /** The admin server: default config.ingress.adminHost/adminPort; false = none. */
  admin?: false | { host?: string; port?: number };
}

const COLLECT_TIMEOUT_MS = 5000;
const READY = 1;

/** One worker thread as the main thread sees it: its messages, metrics requests, drain and end. */
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

/** The worker threads of one ingress: start() once, then the IngressWorkers it resolves with. */
export class WorkerSupervisor {
  /** One readiness slot per worker, shared with every worker (each /readyz reads all of them). */
  private readonly slots: Int32Array;
  private readonly handles: WorkerHandle[] = [];
  private state: IngressState = 'running';
  /** Until every worker listens: an exit then fails the start, not the running ingress. */
  private starting = true;
  private failed: Error | undefined;
  private nextId = 0;
  private admin: HttpServer | undefined;
  /** Drains every worker at once (once: later calls get the same answer); see IngressWorkers.drain. */
  private readonly drain: () => Promise<boolean>;

  constructor(private readonly options: WorkerSupervisorOptions) {
    this.slots = new Int32Array(new SharedArrayBuffer(4 * options.count));
    // An incomplete drain rejects with what did not finish (every worker has its own grace)
    // rather than answering false: the runner's shutdown logs that reason and exits 1.
    this.drain = once(async () => {
      await this.drainAll();
      return true;
    });
  }

  /** Starts every worker; resolves once all of them listen, else stops those started and rejects. */
  async start(): Promise<IngressWorkers> {
    const { config, count, logger } = this.options;
    const port = await this.listenAll();
    await this.serveAdmin();
    this.starting = false;
    if (config.businessesFile !== null) process.on('SIGHUP', this.onHangup);
    const url = localUrl(config.ingress.host, port);
    logger.info({ url, workers: count }, 'ingress worker threads listening');
    return this.view(port, url);
  }

  /** Every worker listening on one port (a free one when the configured port is 0); resolves with it. */
  private async listenAll(): Promise<number> {
    const { host, port: configured } = this.options.config.ingress;
    const probed = configured === 0;
    // A free port, given to every worker: uWS shares a port between listeners (SO_REUSEPORT) only when it is given, never for 0.
    let port = probed ? await probePort(host) : configured;
    try {
      // The first worker alone: it creates the topics; the others find them.
      for (let attempt = 1; ; attempt++) {
        try {
          await this.startWorker(0, port);
          break;
        } catch (err) {
          // A probed port taken by someone else in between: another one.
          if (!probed || attempt >= 3 || !/cannot listen/.test(errorMessage(err))) throw err;
          this.handles.pop();
          port = await probePort(host);
        }
      }
      await Promise.all(Array.from({ length: this.options.count - 1 }, (_, i) => this.startWorker(i + 1, port)));
    } catch (err) {
      await this.drainWorkers();
      throw err;
    }
    return port;
  }

  /** Starts worker `index` on `port`; resolves once it listens. */
  private startWorker(index: number, port: number): Promise<WorkerHandle> {
    const { config, brokers, entry, unsafeDiscardRecords } = this.options;
    const thread = spawnWorker(entry, {
      config,
      index,
      port,
      brokers,
      slots: this.slots.buffer as SharedArrayBuffer,
      unsafeDiscardRecords,
    });
    const handle = new WorkerHandle(index, thread);
    this.handles.push(handle);
    void handle.exited.then((code) => this.onExit(handle, code));
    return new Promise((resolve, reject) => {
      thread.on('message', (message: FromWorker) => {
        if (message.type === 'listening') {
          handle.listening = true;
          resolve(handle);
        } else if (message.type === 'start-failed') {
          handle.expectedExit = true;
          reject(
            message.code ? new MsgbridgeError(message.code as ErrorCode, message.message) : new Error(message.message),
          );
        }
      });
      void handle.exited.then((code) =>
        reject(
          new Error(
            `ingress worker ${handle.label} exited (code ${code}) before listening: ${firstLine(handle.lastError) ?? 'no error reported'}`,
          ),
        ),
      );
    });
  }

  /** Every listening worker's metrics, merged (worker-metrics.ts). */
  private async collect(): Promise<Registry> {
    const live = this.handles.filter((h) => h.alive && h.listening);
    const metrics = await Promise.all(
      live.map(async (h) => ({ id: h.label, metrics: await h.collect(++this.nextId) })),
    );
    return aggregateWorkerMetrics(metrics);
  }

  /** The admin port, in this thread: its /readyz reads every worker's slot, its /metrics merges every worker's. */
  private async serveAdmin(): Promise<void> {
    const { admin, config, logger } = this.options;
    if (admin === false) return;
    try {
      this.admin = await startAdminServer({
        host: admin?.host ?? config.ingress.adminHost,
        port: admin?.port ?? config.ingress.adminPort,
        registry: this.metrics,
        notReadyReason: () => this.notReadyReason(),
        logger,
        what: "the ingress's admin port (ingress.adminPort)",
      });
    } catch (err) {
      await this.drainWorkers();
      throw err;
    }
  }

  private readonly metrics = new WorkersRegistry(() => this.collect());

  /** A thread ended: not ready any more; a failure of the ingress unless expected or still starting. */
  private onExit(handle: WorkerHandle, code: number): void {
    Atomics.store(this.slots, handle.index, 0);
    if (handle.expectedExit || this.starting) return;
    handle.failed = true;
    const error = new Error(
      `ingress worker ${handle.label} stopped (exit code ${code}): ${firstLine(handle.lastError) ?? 'no error reported'}`,
    );
    this.options.logger.error(
      { worker: handle.index + 1, exitCode: code, err: firstLine(handle.lastError) },
      'ingress worker thread stopped unexpectedly: the ingress is not ready and stops',
    );
    if (this.failed) return;
    this.failed = error;
    this.options.onWorkerFailure?.(error);
  }

  /** Signals reach only the main thread: SIGHUP (reload the businesses file) goes to every worker. */
  private readonly onHangup = () => this.handles.forEach((h) => h.post({ type: 'reload' }));

  /** Drains every started worker at once; per worker, whether it finished (each ends either way). */
  private drainWorkers(): Promise<boolean[]> {
    return Promise.all(this.handles.map((h) => h.drain()));
  }

  private notReadyReason(): string | undefined {
    if (this.state !== 'running') return `${this.state}: not taking new webhooks`;
    if (this.failed) return this.failed.message;
    const waiting = this.handles
      .filter((h) => !h.alive || Atomics.load(this.slots, h.index) !== READY)
      .map((h) => h.label);
    return waiting.length === 0
      ? undefined
      : `worker${waiting.length > 1 ? 's' : ''} ${waiting.join(', ')} not ready (Kafka cannot take its writes, or its queue is full)`;
  }

  /** The drain's steps: every worker at once; throws when one did not finish or had failed. */
  private async drainAll(): Promise<void> {
    this.state = 'draining';
    const results = await this.drainWorkers();
    process.off('SIGHUP', this.onHangup);
    this.state = 'stopped';
    await this.admin?.close();
    const unfinished = this.handles
      .filter((h, i) => !results[i] && !h.failed)
      .map((h) => `worker ${h.label} did not finish its drain`);
    const failedOnes = this.handles.filter((h) => h.failed).map((h) => `worker ${h.label} had stopped unexpectedly`);
    if (unfinished.length + failedOnes.length > 0)
      throw new Error(`ingress drain incomplete: ${[...failedOnes, ...unfinished].join('; ')}`);
  }

  private async terminate(): Promise<void> {
    process.off('SIGHUP', this.onHangup);
    await Promise.all(this.handles.map((h) => h.terminate()));
    await this.admin?.close();
  }

  /** The running workers as the caller sees them: a plain object whose functions need no `this`. */
  private view(port: number, url: string): IngressWorkers {
    const state = () => this.state;
    const admin = () => this.admin?.url;
    return {
      port,
      address: url,
      get adminAddress() {
        return admin();
      },
      workers: this.options.count,
      ready: Promise.resolve(),
      isReady: () => this.notReadyReason() === undefined,
      get state() {
        return state();
      },
      metrics: this.metrics,
      drain: this.drain,
      terminate: () => this.terminate(),
    };
  }
}

function firstLine(text: string | undefined): string | undefined {
  return text?.split('\n')[0];
}
