import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  KafkajsRequestQueue,
  destroy,
  scheduleCheckPendingRequests,
  scheduleRequestTimeoutCheck,
  sendSocketRequest,
} from '../../src/kafka/kafkajs-idle-fix.js';
import '../../src/kafka/client.js';

const silent = { debug() {}, info() {}, warn() {}, error() {} };
const queues: InstanceType<typeof KafkajsRequestQueue>[] = [];
afterEach(() => {
  for (const q of queues.splice(0)) if (q.throttleCheckTimeoutId) clearTimeout(q.throttleCheckTimeoutId);
});

function queue() {
  const q = new KafkajsRequestQueue({
    maxInFlightRequests: 1,
    requestTimeout: 1000,
    enforceRequestTimeout: true,
    clientId: 'test',
    broker: 'b:1',
    logger: silent,
  });
  queues.push(q);
  return q;
}

describe('kafkajs request queue (the idle timer loop fixed)', () => {
  it('an idle queue schedules nothing after a check: no 1 ms loop', () => {
    const q = queue();
    q.checkPendingRequests();
    expect(q.throttleCheckTimeoutId).toBeNull();
  });

  it('a queue with a waiting request still schedules its check, throttled or not', () => {
    const q = queue();
    q.pending.push({});
    q.scheduleCheckPendingRequests();
    expect(q.throttleCheckTimeoutId).not.toBeNull();
    clearTimeout(q.throttleCheckTimeoutId!);
    q.throttleCheckTimeoutId = null;
    q.pending.length = 0;
    q.throttledUntil = Date.now() + 60_000;
    q.scheduleCheckPendingRequests();
    expect(q.throttleCheckTimeoutId).not.toBeNull();
  });

  it('are the methods of the RequestQueue kafkajs itself loads, once the client module is loaded', async () => {
    const { createRequire } = await import('node:module');
    const fromKafkajs = createRequire(createRequire(import.meta.url).resolve('kafkajs'))(
      './src/network/requestQueue/index.js',
    ) as typeof KafkajsRequestQueue;
    expect(fromKafkajs.prototype.scheduleCheckPendingRequests).toBe(scheduleCheckPendingRequests);
    expect(fromKafkajs.prototype.scheduleRequestTimeoutCheck).toBe(scheduleRequestTimeoutCheck);
    expect(fromKafkajs.prototype.sendSocketRequest).toBe(sendSocketRequest);
    expect(fromKafkajs.prototype.destroy).toBe(destroy);
  });
});

describe('kafkajs request queue (request timeouts on one timer per connection)', () => {
  type Outcome = { settled?: 'resolved' | 'rejected'; error?: Error };
  let connected = true;
  let correlation = 0;
  const live: InstanceType<typeof KafkajsRequestQueue>[] = [];

  beforeEach(() => {
    vi.useFakeTimers({ now: 1_000_000 });
    connected = true;
  });
  afterEach(() => {
    for (const q of live.splice(0)) q.destroy();
    vi.useRealTimers();
  });

  function connectedQueue(requestTimeout = 1000, maxInFlightRequests: number | null = null) {
    const q = new KafkajsRequestQueue({
      maxInFlightRequests,
      requestTimeout,
      enforceRequestTimeout: true,
      clientId: 'test',
      broker: 'b:1',
      logger: silent,
      isConnected: () => connected,
    });
    live.push(q);
    q.scheduleRequestTimeoutCheck();
    return q;
  }

  function send(
    q: InstanceType<typeof KafkajsRequestQueue>,
    requestTimeout?: number,
    options: { expectResponse?: boolean; write?: () => void } = {},
  ) {
    const outcome: Outcome = {};
    const correlationId = ++correlation;
    const entry = {
      apiKey: 1,
      apiName: 'Fetch',
      apiVersion: 11,
      correlationId,
      resolve: () => (outcome.settled = 'resolved'),
      reject: (error: Error) => Object.assign(outcome, { settled: 'rejected', error }),
    };
    (q as unknown as { push(r: object): void }).push({
      entry,
      expectResponse: options.expectResponse ?? true,
      requestTimeout,
      sendRequest: options.write ?? (() => undefined),
    });
    return { outcome, correlationId };
  }

  const timers = () => vi.getTimerCount();

  /** The request is still unanswered 1 ms before `ms` from now, and timed out at `ms`. */
  function timesOutIn(outcome: Outcome, ms: number) {
    vi.advanceTimersByTime(ms - 1);
    expect(outcome.settled).toBeUndefined();
    vi.advanceTimersByTime(1);
    expect(outcome.settled).toBe('rejected');
  }

  it('a connected queue with nothing in flight keeps no timer: no wake-ups while idle', () => {
    connectedQueue();
    expect(timers()).toBe(0);
    vi.advanceTimersByTime(10_000);
    expect(timers()).toBe(0);
  });

  it('times out a request not answered in its timeout, at its deadline and not before', () => {
    const q = connectedQueue(1000);
    const { outcome } = send(q);
    expect(timers()).toBe(1);
    timesOutIn(outcome, 1001);
    expect(outcome.error?.name).toBe('KafkaJSRequestTimeoutError');
    expect(q.inflight.size).toBe(0);
    expect(timers()).toBe(0);
  });

  it('an answered request is not timed out, and the timer left for it stops without another', () => {
    const q = connectedQueue(1000);
    const { outcome, correlationId } = send(q);
    (q as unknown as { fulfillRequest(r: object): void }).fulfillRequest({
      correlationId,
      payload: Buffer.alloc(0),
      size: 0,
    });
    expect(outcome.settled).toBe('resolved');
    vi.advanceTimersByTime(5000);
    expect(outcome.settled).toBe('resolved');
    expect(timers()).toBe(0);
  });

  it('each request times out at its own deadline: a longer one sent first, a shorter one after', () => {
    const q = connectedQueue(1000);
    const long = send(q, 5000); // a fetch waiting for records: its own, longer timeout
    vi.advanceTimersByTime(100);
    const short = send(q);
    vi.advanceTimersByTime(1001);
    expect(short.outcome.settled).toBe('rejected');
    expect(long.outcome.settled).toBeUndefined();
    expect(timers()).toBe(1);
    timesOutIn(long.outcome, 5000 - 1100);
    expect(timers()).toBe(0);
  });

  it('a request sent while another is in flight is still timed out after the first is answered', () => {
    const q = connectedQueue(1000);
    const first = send(q);
    vi.advanceTimersByTime(500);
    const second = send(q);
    (q as unknown as { fulfillRequest(r: object): void }).fulfillRequest({
      correlationId: first.correlationId,
      payload: Buffer.alloc(0),
      size: 0,
    });
    vi.advanceTimersByTime(1001);
    expect(second.outcome.settled).toBe('rejected');
  });

  it('a request sent because another timed out (one in flight at a time) times out at its own deadline', () => {
    const q = connectedQueue(1000, 1);
    const first = send(q);
    vi.advanceTimersByTime(500);
    const waiting = send(q);
    expect(q.pending).toHaveLength(1);
    vi.advanceTimersByTime(501);
    expect(first.outcome.settled).toBe('rejected');
    expect(q.pending).toHaveLength(0);
    timesOutIn(waiting.outcome, 1001);
    expect(timers()).toBe(0);
  });

  it('a request that expects no answer sets no timer', () => {
    const q = connectedQueue(1000);
    const { outcome } = send(q, undefined, { expectResponse: false });
    expect(outcome.settled).toBe('resolved');
    expect(timers()).toBe(0);
  });

  it('a request whose socket write threw is timed out at once, as kafkajs does, not kept in flight', () => {
    const q = connectedQueue(1000);
    let thrown: unknown;
    try {
      send(q, undefined, {
        write: () => {
          throw new Error('write EPIPE');
        },
      });
    } catch (err) {
      thrown = err;
    }
    expect((thrown as Error).message).toBe('write EPIPE');
    expect(q.inflight.size).toBe(1);
    vi.advanceTimersByTime(0);
    expect(q.inflight.size).toBe(0);
    expect(timers()).toBe(0);
  });

  it('destroy (a disconnect) stops timing out, as kafkajs does, until the next connect arms it again', () => {
    const q = connectedQueue(1000);
    const before = send(q);
    q.destroy();
    expect(timers()).toBe(0);
    vi.advanceTimersByTime(5000);
    expect(before.outcome.settled).toBeUndefined();
    q.scheduleRequestTimeoutCheck(); // connected again: what is still in flight is overdue
    expect(before.outcome.settled).toBe('rejected');
    const after = send(q);
    vi.advanceTimersByTime(1001);
    expect(after.outcome.settled).toBe('rejected');
  });

  it('a connection found closed when the timer fires: what is overdue times out, then the timer stops, as in kafkajs', () => {
    const q = connectedQueue(1000);
    const overdue = send(q);
    vi.advanceTimersByTime(500);
    const later = send(q);
    connected = false;
    vi.advanceTimersByTime(501);
    expect(overdue.outcome.settled).toBe('rejected');
    expect(timers()).toBe(0);
    // kafkajs's destroyed queue times out nothing more; the closed connection rejects the rest.
    vi.advanceTimersByTime(5000);
    expect(later.outcome.settled).toBeUndefined();
  });

  it('a queue without enforced timeouts keeps no timer and times nothing out', () => {
    const q = new KafkajsRequestQueue({
      maxInFlightRequests: null,
      requestTimeout: 1000,
      enforceRequestTimeout: false,
      clientId: 'test',
      broker: 'b:1',
      logger: silent,
    });
    live.push(q);
    q.scheduleRequestTimeoutCheck();
    const request = send(q);
    vi.advanceTimersByTime(5000);
    expect(request.outcome.settled).toBeUndefined();
    expect(timers()).toBe(0);
  });
});
