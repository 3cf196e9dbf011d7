// The ingress worker module, with the second worker deaf to the drain request (it still obeys
// close-now): a drain that cannot finish (test/ingress/workers.int.test.ts).
import { parentPort, workerData } from 'node:worker_threads';

if ((workerData as { index: number }).index === 1) {
  const port = parentPort!;
  const on = port.on.bind(port);
  port.on = ((event: string, listener: (message: { type: string }) => void) =>
    on(event as 'message', (message: { type: string }) => {
      if (message.type !== 'drain') listener(message);
    })) as typeof port.on;
}
await import('../../src/ingress/worker-entry.js');
