import { parentPort, workerData } from 'node:worker_threads';
import { errorMessage, isMsgbridgeError } from '../platform/errors.js';
import { createLogger } from '../platform/logger.js';
import { startIngressWithControls, type Ingress, type IngressControls } from './index.js';
import type { FromWorker, IngressWorkerData, ToWorker } from './workers.js';

/**
 * One worker thread of startIngressWorkers (workers.ts): a whole ingress on the shared port.
 * Its readiness goes to its slot in shared memory every READINESS_MS, its metrics to the main
 * thread when asked: the main thread's admin port speaks for every worker. Before the thread ends, every uWS socket is
 * closed (closeAll): a thread that ends while uWS holds sockets aborts the whole process.
 */

const READINESS_MS = 100;

const data = workerData as IngressWorkerData;
const port = parentPort!;
const slots = new Int32Array(data.slots);
const label = String(data.index + 1);
const logger = createLogger({ level: data.config.log.level, name: 'ingress' }).child({ worker: data.index + 1 });
const send = (message: FromWorker) => port.postMessage(message);

let ingress: (Ingress & IngressControls) | undefined;
let readiness: NodeJS.Timeout | undefined;
let ending = false;
/** A drain or close asked for before the ingress listened: done once it does. */
let stopRequested: 'drain' | 'close' | undefined;

/** Ends the thread once the last log lines are out; every socket closed first. */
const end = (code: number) => {
  ending = true;
  clearInterval(readiness);
  Atomics.store(slots, data.index, 0);
  ingress?.closeAll();
  const exit = () => process.exit(code);
  const timer = setTimeout(exit, 1000);
  logger.flush(() => {
    clearTimeout(timer);
    // A turn of the loop for uWS to finish closing its sockets.
    setImmediate(exit);
  });
};

const crash = (err: unknown) => {
  if (ending) return;
  // The main thread logs it, once.
  send({ type: 'crashed', error: err instanceof Error ? (err.stack ?? err.message) : String(err) });
  end(1);
};
process.on('uncaughtException', crash);
process.on('unhandledRejection', crash);

const onMessage = (message: ToWorker) => {
  switch (message.type) {
    case 'collect':
      if (!ingress) return;
      void ingress.metrics.getMetricsAsJSON().then(
        (metrics) => send({ type: 'collected', id: message.id, metrics }),
        (err: unknown) => logger.error({ err }, 'metrics collection failed'),
      );
      return;
    case 'reload':
      ingress?.reloadBusinesses();
      return;
    case 'drain':
      if (!ingress) {
        stopRequested ??= 'drain';
        return;
      }
      Atomics.store(slots, data.index, 0);
      clearInterval(readiness);
      // False: the grace ran out first; the main thread names this worker as unfinished.
      void ingress.drain().then(
        (ok) => {
          send({ type: 'drained', ok });
          end(ok ? 0 : 1);
        },
        (err: unknown) => {
          send({ type: 'drained', ok: false, error: errorMessage(err) });
          end(1);
        },
      );
      return;
    case 'close-now':
      if (!ingress) stopRequested = 'close';
      else end(1);
      return;
  }
};
port.on('message', onMessage);

try {
  ingress = await startIngressWithControls({
    config: { ...data.config, ingress: { ...data.config.ingress, port: data.port } },
    logger,
    brokers: data.brokers,
    unsafeDiscardRecords: data.unsafeDiscardRecords,
    worker: { id: label },
  });
} catch (err) {
  send({ type: 'start-failed', code: isMsgbridgeError(err) ? err.code : undefined, message: errorMessage(err) });
  end(1);
}
if (ingress) {
  const started = ingress;
  const publish = () => Atomics.store(slots, data.index, started.isReady() ? 1 : 0);
  publish();
  readiness = setInterval(publish, READINESS_MS);
  send({ type: 'listening', port: started.port });
  if (stopRequested) onMessage({ type: stopRequested === 'drain' ? 'drain' : 'close-now' });
}
