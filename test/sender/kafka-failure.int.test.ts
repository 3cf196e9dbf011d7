import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createKafkajsClient } from '../../src/kafka/client.js';
import { startLocalBroker, type LocalBroker } from '../../src/local-kafka/local-broker.js';
import { loadConfig } from '../../src/config/load.js';
import { collect, committedOffsets, endOffsets, fixture, produceRequests, textRequest, waitUntil } from './harness.js';

/**
 * Kafka fails under the sender while it publishes results: the broker of this test is its own
 * (the suite's must keep running), frozen with SIGSTOP mid-stream so that produce requests
 * already written time out (the case where kafkajs rolls back sequence numbers the broker may
 * have used). The sender must replace its producer, report not ready meanwhile, and end with
 * a result for every request and every offset committed: no result lost, no partition jammed.
 */
describe('sender through a Kafka stall', () => {
  let broker: LocalBroker;
  const cleanups: (() => Promise<unknown>)[] = [];

  beforeAll(async () => {
    broker = await startLocalBroker({ heapMb: 256, partitions: 1 });
  }, 180_000);

  afterEach(async () => {
    if (broker) process.kill(broker.pid, 'SIGCONT');
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
  });

  afterAll(async () => {
    await broker?.stop();
  });

  it('a broker frozen mid-stream: the results producer is replaced, /readyz turns false, every request gets its result', async () => {
    const N = 600;
    const brokers = [broker.bootstrap];
    const f = await fixture({
      brokers,
      partitions: 3,
      kafka: { requestTimeoutMs: 2000, connectionTimeoutMs: 1000 },
      sender: { ratePerSecond: 100, concurrency: 16 },
    });
    cleanups.push(() => f.close());
    const results = await collect(f.topics.sendResults, brokers);
    cleanups.push(() => results.stop());
    const requests = Array.from({ length: N }, (_, i) => {
      const to = `+1555${String(8_000_000 + (i % 50)).padStart(7, '0')}`;
      return { key: to, value: textRequest(`stall-${i}`, to, `message ${i}`, { callbackData: `stall-${i}` }) };
    });
    await produceRequests(f.topics.sendRequests, requests, brokers);
    const sender = await f.start();
    await results.waitFor((r) => r.length >= 100, 30_000, 'the first results');

    let wasNotReady = false;
    const watch = setInterval(() => (wasNotReady ||= !sender.isReady()), 50);
    cleanups.push(async () => clearInterval(watch));
    // Long enough for the client's own retries (6 × the 2 s request timeout) to give up.
    process.kill(broker.pid, 'SIGSTOP');
    await new Promise((r) => setTimeout(r, 20_000));
    process.kill(broker.pid, 'SIGCONT');

    await waitUntil(
      () => new Set(results.values().map((v) => v.requestId)).size >= N,
      90_000,
      () => `a result per request (${new Set(results.values().map((v) => v.requestId)).size}/${N})`,
    );
    await waitUntil(
      () => sender.isReady(),
      30_000,
      () => 'ready again',
    );
    clearInterval(watch);

    expect(wasNotReady).toBe(true);
    const values = results.values();
    expect(values.every((v) => v.outcome === 'accepted')).toBe(true);
    // A result written twice (a produce that landed but timed out) is recognisable: same event-id.
    const eventIds = new Map<string, Set<string>>();
    for (const r of results.records) {
      const id = JSON.parse(r.value.toString()).requestId as string;
      eventIds.set(id, (eventIds.get(id) ?? new Set()).add(r.headers['event-id']!));
    }
    expect([...eventIds.values()].every((ids) => ids.size === 1)).toBe(true);
    const metrics = await sender.metrics.metrics();
    expect(metrics).toMatch(/msgbridge_sender_publish_errors_total\{[^}]*\} [1-9]/);
    expect(metrics).toMatch(/msgbridge_sender_results_publishable\{[^}]*\} 1/);
    // Nothing jammed: the group commits to the end of every partition.
    const ends = await endOffsets(f.topics.sendRequests, brokers);
    const deadline = Date.now() + 20_000;
    for (;;) {
      const committed = await committedOffsets(f.groupId, f.topics.sendRequests, brokers);
      if ([...ends].every(([p, end]) => committed.get(p)?.offset === end)) break;
      if (Date.now() > deadline)
        throw new Error(`not committed to the end: ${JSON.stringify({ ends: [...ends], committed: [...committed] })}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  }, 180_000);

  // The sender's consumer is kafkajs; its request timeouts run on one timer per connection
  // (src/kafka/kafkajs-idle-fix.ts) instead of kafkajs's 100 ms interval.
  it('a kafkajs request to the frozen broker times out at kafka.requestTimeoutMs: not before, and not never', async () => {
    const kafka = createKafkajsClient({
      ...loadConfig({ env: {} }).kafka,
      brokers: [broker.bootstrap],
      requestTimeoutMs: 1500,
    });
    const admin = kafka.admin({ retry: { retries: 0 } });
    await admin.connect();
    cleanups.push(() => admin.disconnect());
    await admin.fetchTopicMetadata({ topics: [] });
    process.kill(broker.pid, 'SIGSTOP');
    const started = Date.now();
    const error = (await admin.fetchTopicMetadata({ topics: [] }).then(
      () => undefined,
      (err: unknown) => err,
    )) as (Error & { originalError?: Error }) | undefined;
    const waitedMs = Date.now() - started;
    process.kill(broker.pid, 'SIGCONT');
    expect(error).toBeDefined();
    expect([error!.name, error!.originalError?.name]).toContain('KafkaJSRequestTimeoutError');
    expect(waitedMs).toBeGreaterThanOrEqual(1500);
    expect(waitedMs).toBeLessThan(15_000);
  }, 60_000);
});
