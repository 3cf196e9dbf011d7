import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLocalBroker, type LocalBroker } from '../../src/local-kafka/local-broker.js';
import { consumeRecords, countRecords } from '../helpers/kafka.js';
import { messageId, signedHeaders, statusEvent } from './fixtures.js';
import { KAFKA_CLIENTS, startTestIngress, type TestIngress } from './harness.js';

const SECRET = 'outage-secret';
const sha256 = (body: string) => createHash('sha256').update(body).digest('hex');

async function until(what: string, condition: () => Promise<boolean> | boolean, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Kafka becomes unreachable mid-traffic and comes back. The broker of this test is its own
 * (the suite's must keep running), and the outage is the broker's JVM frozen with SIGSTOP:
 * connections stay open but nothing answers, the hardest case for a client (no reset to
 * notice, only timeouts). SIGCONT brings the same broker, same port and data, back.
 */
describe('ingress through a Kafka outage', () => {
  let broker: LocalBroker;

  beforeAll(async () => {
    broker = await startLocalBroker({ heapMb: 256, partitions: 1 });
  }, 180_000);

  afterAll(async () => {
    await broker?.stop();
  });

  // One broker for both clients (a JVM start is the slow part); each client its own topics.
  describe.each(KAFKA_CLIENTS)('with %s', (client) => {
    let t: TestIngress;

    beforeAll(async () => {
      t = await startTestIngress({
        brokers: [broker.bootstrap],
        env: { MSGBRIDGE_BUSINESS_ID: 'biz_1', MSGBRIDGE_SIGNING_SECRET: SECRET },
        overrides: {
          kafka: { client, requestTimeoutMs: 1500, connectionTimeoutMs: 1000 },
          ingress: { publishTimeoutMs: 1000, retryAfterSeconds: 2, kafkaProbeIntervalMs: 500 },
        },
        connections: 8,
      });
    }, 180_000);

    afterAll(async () => {
      if (broker) process.kill(broker.pid, 'SIGCONT');
      await t?.stop();
    });

    it('answers 503 with Retry-After and reports not ready while Kafka is gone, recovers without a restart, loses no acknowledged event', async () => {
      const acknowledged: string[] = [];
      const statuses: number[] = [];
      let retryAfterOn503 = true;
      let sending = true;
      const post = async () => {
        const body = statusEvent(messageId(), 'delivered');
        try {
          const res = await t.post('/webhooks/biz_1/delivery_status', body, signedHeaders(SECRET, body));
          statuses.push(res.status);
          if (res.status === 200) acknowledged.push(sha256(body));
          if (res.status === 503 && res.headers['retry-after'] !== '2') retryAfterOn503 = false;
          return res.status;
        } catch {
          statuses.push(0);
          return 0;
        }
      };
      // Steady traffic from four clients for the whole test.
      const clients = Array.from({ length: 4 }, async () => {
        while (sending) {
          await post();
          await new Promise((r) => setTimeout(r, 20));
        }
      });

      try {
        await until('traffic to flow', () => acknowledged.length >= 20, 20_000);
        expect((await t.admin('/readyz')).status).toBe(200);

        process.kill(broker.pid, 'SIGSTOP');
        const ackedAtStop = acknowledged.length;
        await until('503 answers', () => statuses.filter((s) => s === 503).length >= 5, 30_000);
        // First the events waiting on the frozen broker: Kafka did not acknowledge in time.
        await until(
          'a refusal for a publish timeout',
          () => t.logs.some((l) => l.includes('"code":"PUBLISH_TIMEOUT"')),
          10_000,
        );
        await until('/readyz to say not ready', async () => (await t.admin('/readyz')).status === 503, 30_000);
        expect(t.ingress.isReady()).toBe(false);
        // A few events may have been acknowledged while the stop took effect, hardly any after.
        const ackedDuringOutage = acknowledged.length - ackedAtStop;
        expect(ackedDuringOutage).toBeLessThan(10);
        // Hold the outage until the producer gives up and the publisher is reconnecting with a
        // fresh producer: from then on events are refused at once instead of timing out.
        await until(
          'the producer to be declared disconnected',
          async () => /^msgbridge_ingress_kafka_connected\{[^}]*\} 0$/m.test((await t.admin('/metrics')).body),
          90_000,
        );
        await until(
          'a refusal for Kafka being unavailable',
          () => t.logs.some((l) => l.includes('"code":"KAFKA_UNAVAILABLE"')),
          10_000,
        );
        if (process.env.MSGBRIDGE_TEST_DUMP_LOGS)
          console.log(t.logs.filter((l) => !l.includes('webhook not accepted')).join('\n'));

        process.kill(broker.pid, 'SIGCONT');
        await until('/readyz to say ready again', async () => (await t.admin('/readyz')).status === 200, 90_000);
        const ackedAtRecovery = acknowledged.length;
        await until('events to be acknowledged again', () => acknowledged.length >= ackedAtRecovery + 20, 30_000);
      } finally {
        sending = false;
        await Promise.all(clients);
      }

      expect(retryAfterOn503).toBe(true);
      expect(statuses.every((s) => s === 200 || s === 503)).toBe(true);
      // Every 200 is in Kafka. (A 503 may be there too: an in-flight batch that timed out can
      // still land; the provider's redelivery is then a duplicate with the same event-id.)
      const total = await countRecords(t.topics.deliveryStatus, [broker.bootstrap]);
      expect(total).toBeGreaterThanOrEqual(acknowledged.length);
      const stored = new Set(
        (await consumeRecords(t.topics.deliveryStatus, total, { brokers: [broker.bootstrap], timeoutMs: 30_000 })).map(
          (r) => r.headers['event-id'],
        ),
      );
      const missing = acknowledged.filter((id) => !stored.has(id));
      expect(missing).toEqual([]);
    }, 240_000);

    it('with no traffic at all, reports not ready once Kafka stops answering its probe, and ready again when it is back', async () => {
      const readyz = async () => (await t.admin('/readyz')).status;
      await until('/readyz to say ready', async () => (await readyz()) === 200, 60_000);
      // Idle and healthy: probes keep succeeding, readiness holds over several intervals.
      for (let i = 0; i < 8; i++) {
        expect(await readyz()).toBe(200);
        await new Promise((r) => setTimeout(r, 250));
      }
      process.kill(broker.pid, 'SIGSTOP');
      try {
        // One probe interval of idleness plus one request timeout, and some slack for a loaded machine.
        await until('/readyz to say not ready without any webhook', async () => (await readyz()) === 503, 15_000);
        expect(t.logs.some((l) => l.includes('idle probe'))).toBe(true);
      } finally {
        process.kill(broker.pid, 'SIGCONT');
      }
      await until('/readyz to say ready again', async () => (await readyz()) === 200, 90_000);
      const body = statusEvent(messageId(), 'read');
      expect((await t.post('/webhooks/biz_1/delivery_status', body, signedHeaders(SECRET, body))).status).toBe(200);
    }, 180_000);
  });
});
