import { createRequire } from 'node:module';

/**
 * Replaces two kafkajs 2.2.4 timers that run on every broker connection, idle or not: a 1 ms
 * loop over an empty request queue (kafkajs issues 1556 and 1704), and a 100 ms interval looking
 * for timed-out requests, here one timer per connection set for the earliest deadline in flight.
 * Why and how: src/kafka/README.md, "kafkajs's per-connection timers".
 */
interface InflightRequest {
  correlationId: number;
  sentAt: number | null;
  requestTimeout: number;
  timeoutRequest(): void;
}

interface RequestQueue {
  pending: unknown[];
  inflight: Map<number, InflightRequest>;
  throttledUntil: number;
  throttleCheckTimeoutId: NodeJS.Timeout | null;
  enforceRequestTimeout: boolean;
  requestTimeoutIntervalId?: NodeJS.Timeout;
  isConnected(): boolean;
  checkPendingRequests(): void;
  scheduleCheckPendingRequests(): void;
  scheduleRequestTimeoutCheck(): void;
  sendSocketRequest(request: InflightRequest): void;
  destroy(): void;
  /** Whether requests are timed out: from the connection's connect until `destroy`. */
  timeoutsArmed?: boolean;
  /** When the timer in `requestTimeoutIntervalId` fires. */
  timeoutCheckAt?: number;
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

/**
 * A request is overdue once more than its timeout has passed since it was sent (kafkajs's test,
 * in which a request whose socket write threw, never sent, is overdue at once).
 */
const isOverdue = (request: InflightRequest, now: number): boolean =>
  request.sentAt === null || now - request.sentAt > request.requestTimeout;
const deadlineOf = (request: InflightRequest): number =>
  request.sentAt === null ? Date.now() : request.sentAt + request.requestTimeout + 1;
/** Node's longest timer; a longer delay would become 1 ms. */
const MAX_DELAY_MS = 2 ** 31 - 1;

function armTimeoutCheck(queue: RequestQueue, at: number): void {
  clearTimeout(queue.requestTimeoutIntervalId);
  queue.timeoutCheckAt = at;
  queue.requestTimeoutIntervalId = setTimeout(
    () => checkRequestTimeouts(queue),
    Math.min(MAX_DELAY_MS, Math.max(0, at - Date.now())),
  );
}

function checkRequestTimeouts(queue: RequestQueue): void {
  queue.requestTimeoutIntervalId = undefined;
  queue.timeoutCheckAt = undefined;
  const now = Date.now();
  // A timed-out request leaves `inflight` and may send a pending one (which can set the timer).
  for (const request of [...queue.inflight.values()]) if (isOverdue(request, now)) request.timeoutRequest();
  if (!queue.isConnected()) {
    queue.destroy();
    return;
  }
  let next = Infinity;
  for (const request of queue.inflight.values()) next = Math.min(next, deadlineOf(request));
  if (queue.timeoutsArmed && next < (queue.timeoutCheckAt ?? Infinity)) armTimeoutCheck(queue, next);
}

export function scheduleRequestTimeoutCheck(this: RequestQueue): void {
  if (!this.enforceRequestTimeout) return;
  this.destroy();
  this.timeoutsArmed = true;
  checkRequestTimeouts(this);
}

export function sendSocketRequest(this: RequestQueue, request: InflightRequest): void {
  try {
    original.sendSocketRequest.call(this, request);
  } finally {
    // Also when the socket write threw: the request stays in flight, and kafkajs times it out.
    if (this.timeoutsArmed && this.inflight.has(request.correlationId)) {
      const deadline = deadlineOf(request);
      if (deadline < (this.timeoutCheckAt ?? Infinity)) armTimeoutCheck(this, deadline);
    }
  }
}

export function destroy(this: RequestQueue): void {
  this.timeoutsArmed = false;
  clearTimeout(this.requestTimeoutIntervalId);
  this.requestTimeoutIntervalId = undefined;
  this.timeoutCheckAt = undefined;
  original.destroy.call(this);
}

const require = createRequire(import.meta.url);
/** kafkajs's RequestQueue class, the one every kafkajs connection of this process uses. */
export const KafkajsRequestQueue = require('kafkajs/src/network/requestQueue/index.js') as {
  prototype: RequestQueue;
} & (new (options: Record<string, unknown>) => RequestQueue);
// kafkajs's own methods, kept once per process: a second copy of this module (a test runner's
// fresh module graph) must not wrap the wrappers.
const ORIGINAL = Symbol.for('msgbridge.kafkajs.requestQueue.original');
const prototype = KafkajsRequestQueue.prototype as RequestQueue & {
  [ORIGINAL]?: Pick<RequestQueue, 'sendSocketRequest' | 'destroy'>;
};
const original = (prototype[ORIGINAL] ??= {
  sendSocketRequest: prototype.sendSocketRequest,
  destroy: prototype.destroy,
});
Object.assign(prototype, { scheduleCheckPendingRequests, scheduleRequestTimeoutCheck, sendSocketRequest, destroy });
