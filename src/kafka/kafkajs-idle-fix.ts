import { createRequire } from 'node:module';

/**
 * kafkajs 2.2.4 (its last release) keeps a 1 ms timer loop running on every broker connection
 * while nothing is queued: `scheduleCheckPendingRequests` schedules a check even with no pending
 * request and no throttle (a negative delay, so 1 ms), and each check schedules the next
 * (kafkajs issues 1556 and 1704). An idle sender woke about 900 times a second for it
 * (docs/benchmarks.md). This is the fix proposed upstream: with nothing pending and no throttle,
 * schedule nothing; a request that has to wait schedules its own check when it is queued, and a
 * finished request checks the queue as before.
 */
interface RequestQueue {
  pending: unknown[];
  throttledUntil: number;
  throttleCheckTimeoutId: NodeJS.Timeout | null;
  checkPendingRequests(): void;
  scheduleCheckPendingRequests(): void;
}

/** kafkajs's own interval for a queue that waits on a marginal throttle. */
const CHECK_PENDING_REQUESTS_INTERVAL_MS = 10;

export function scheduleCheckPendingRequests(this: RequestQueue): void {
  if (this.throttleCheckTimeoutId) return;
  let delay = this.throttledUntil - Date.now();
  if (this.pending.length === 0) {
    if (delay <= 0) return;
  } else if (delay <= 0) delay = CHECK_PENDING_REQUESTS_INTERVAL_MS;
  this.throttleCheckTimeoutId = setTimeout(() => {
    this.throttleCheckTimeoutId = null;
    this.checkPendingRequests();
  }, delay);
}

const require = createRequire(import.meta.url);
/** kafkajs's RequestQueue class, the one every kafkajs connection of this process uses. */
export const KafkajsRequestQueue = require('kafkajs/src/network/requestQueue/index.js') as { prototype: RequestQueue } & (new (options: Record<string, unknown>) => RequestQueue);
KafkajsRequestQueue.prototype.scheduleCheckPendingRequests = scheduleCheckPendingRequests;
