import type { Config } from '../config/schema.js';
import { silentLogger, type Logger } from '../platform/logger.js';
import { resolveIngressWorkers } from './cpu-quota.js';
import { startIngress } from './index.js';
import { defaultWorkerModule, workerModuleAt } from './worker-loader.js';
import { WorkerSupervisor, type IngressWorkers } from './worker-supervisor.js';

/**
 * `ingress.workers`: N worker threads, each a whole ingress (its own uWS app, publisher and
 * producer: startIngress in worker-entry.ts) on one port, which the kernel shares between their
 * listening sockets (uWS sets SO_REUSEPORT on Linux for every port but 0, and spreads
 * connections, not requests). This main thread is the composition root: it starts them, serves
 * the admin port (/metrics with every worker's metrics aggregated, /readyz from one readiness
 * slot per worker in shared memory), forwards SIGHUP, and
 * drains them all. A worker that stops on its own is not restarted: the ingress turns not ready
 * and `onWorkerFailure` tells the caller, which stops (README.md, "Worker threads").
 *
 * This file only wires the parts, each in a file of its own (README.md, file table):
 * cpu-quota.ts ("auto"), worker-metrics.ts (/metrics merged), worker-loader.ts (which module a
 * thread runs, and tsx), worker-protocol.ts (the messages), worker-supervisor.ts (the threads).
 * What other files import from here is re-exported, so they need not know the split.
 */

export { availableCores, cgroupCpuLimit, resolveIngressWorkers, type ReadText } from './cpu-quota.js';
export { aggregateWorkerMetrics, aggregationOf } from './worker-metrics.js';
export type { FromWorker, IngressWorkerData, ToWorker } from './worker-protocol.js';
export type { IngressWorkers } from './worker-supervisor.js';

export interface StartIngressWorkersOptions {
  logger?: Logger;
  /** Bootstrap servers; default config.kafka.brokers. */
  brokers?: string[];
  /**
   * Called once when a worker thread stops on its own after the start: the ingress is then not ready and should be
   * stopped.
   */
  onWorkerFailure?: (error: Error) => void;
  /** Benchmarks only (see StartIngressOptions). */
  unsafeDiscardRecords?: boolean;
  /** The worker module; default worker-entry.js (or .mjs, or .ts through tsx) beside this file. */
  workerEntry?: URL;
  /** The admin server (/healthz, /readyz, /metrics): default config.ingress.adminHost/adminPort; false = none. */
  admin?: false | { host?: string; port?: number };
}

/**
 * The ingress on `ingress.workers` threads (module comment). With 1 (the default), or "auto" on
 * one core, it is startIngress in this thread, exactly as without the setting.
 */
export async function startIngressWorkers(
  config: Config,
  options: StartIngressWorkersOptions = {},
): Promise<IngressWorkers> {
  const logger = options.logger ?? silentLogger;
  const count = resolveIngressWorkers(config.ingress.workers);
  const brokers = options.brokers ?? config.kafka.brokers;
  if (count === 1) {
    const ingress = await startIngress({
      config,
      logger,
      brokers,
      unsafeDiscardRecords: options.unsafeDiscardRecords,
      admin: options.admin,
    });
    return Object.assign(ingress, { workers: 1, terminate: async () => {} });
  }
  // Beside this file, as before the split: the path the error names when the module is missing.
  const entry = options.workerEntry ? workerModuleAt(options.workerEntry) : defaultWorkerModule(import.meta.url);
  const supervisor = new WorkerSupervisor({
    config,
    count,
    brokers,
    entry,
    logger,
    unsafeDiscardRecords: options.unsafeDiscardRecords ?? false,
    onWorkerFailure: options.onWorkerFailure,
    admin: options.admin,
  });
  return supervisor.start();
}
