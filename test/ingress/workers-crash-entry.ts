// The ingress worker module, with a failure injected: the second worker throws from a timer
// once it listens (test/ingress/workers.int.test.ts).
import { workerData } from 'node:worker_threads';

await import('../../src/ingress/worker-entry.js');
if ((workerData as { index: number }).index === 1) {
  setTimeout(() => {
    throw new Error('injected worker failure');
  }, 300);
}
