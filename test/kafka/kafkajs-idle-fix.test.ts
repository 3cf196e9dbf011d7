import { afterEach, describe, expect, it } from 'vitest';
import { KafkajsRequestQueue, scheduleCheckPendingRequests } from '../../src/kafka/kafkajs-idle-fix.js';
import '../../src/kafka/client.js';

const silent = { debug() {}, info() {}, warn() {}, error() {} };
const queues: InstanceType<typeof KafkajsRequestQueue>[] = [];
afterEach(() => {
  for (const q of queues.splice(0)) if (q.throttleCheckTimeoutId) clearTimeout(q.throttleCheckTimeoutId);
});

function queue() {
  const q = new KafkajsRequestQueue({ maxInFlightRequests: 1, requestTimeout: 1000, enforceRequestTimeout: true, clientId: 'test', broker: 'b:1', logger: silent });
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

  it('is the method of the RequestQueue kafkajs itself loads, once the client module is loaded', async () => {
    const { createRequire } = await import('node:module');
    const fromKafkajs = createRequire(createRequire(import.meta.url).resolve('kafkajs'))('./src/network/requestQueue/index.js') as typeof KafkajsRequestQueue;
    expect(fromKafkajs.prototype.scheduleCheckPendingRequests).toBe(scheduleCheckPendingRequests);
  });
});
