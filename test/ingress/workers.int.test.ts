import { createHash } from 'node:crypto';
import { Writable } from 'node:stream';
import { Client, Pool } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import type { Config } from '../../src/config/schema.js';
import { startIngressWorkers, type IngressWorkers } from '../../src/ingress/workers.js';
import { createLogger } from '../../src/platform/logger.js';
import { runCli, startCli } from '../helpers/cli.js';
import { consumeRecords, kafkaBrokers } from '../helpers/kafka.js';
import { inboundEvent, messageId, signedHeaders, statusEvent } from './fixtures.js';
import { ingressTopics } from './harness.js';

const SECRET = 'workers-secret';
const sha256 = (body: string) => createHash('sha256').update(body).digest('hex');

function workersConfig(topics: ReturnType<typeof ingressTopics>, workers = 2): Config {
  return loadConfig({
    env: {
      KAFKA_BROKERS: kafkaBrokers().join(','),
      MSGBRIDGE_BUSINESS_ID: 'biz_1',
      MSGBRIDGE_SIGNING_SECRET: SECRET,
      MSGBRIDGE_LOG_LEVEL: 'error',
      MSGBRIDGE_INGRESS_WORKERS: String(workers),
    },
    overrides: {
      kafka: { partitions: 3, replicationFactor: 1, createTopics: true, topics },
      ingress: { host: '127.0.0.1', port: 0, adminHost: '127.0.0.1', adminPort: 0, drainGraceMs: 15_000 },
    },
  });
}

function captureLogs(): { logger: ReturnType<typeof createLogger>; logs: string[] } {
  const logs: string[] = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      logs.push(...String(chunk).split('\n').filter(Boolean));
      done();
    },
  });
  return { logger: createLogger({ level: 'debug', name: 'ingress', destination }), logs };
}

/** One signed webhook of the realistic mix: an inbound message, or a delivery status. */
function webhook(i: number): { path: string; body: string } {
  return i % 4 === 0
    ? { path: '/webhooks/biz_1/messages', body: inboundEvent(`+1555${String(i).padStart(7, '0')}`, `hello ${i}`) }
    : { path: '/webhooks/biz_1/delivery_status', body: statusEvent(messageId(), 'delivered', { n: i }) };
}

/** GET over a connection of its own: the kernel picks the worker per connection. */
async function getFresh(url: string, path: string): Promise<{ status: number; body: string }> {
  const client = new Client(url);
  try {
    const res = await client.request({ method: 'GET', path });
    return { status: res.statusCode, body: await res.body.text() };
  } finally {
    await client.close();
  }
}

const series = (text: string, name: string, labels: string) =>
  Number(new RegExp(`^${name}\\{${labels}\\} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);

describe('ingress.workers = 2: worker threads on one port (suite Kafka)', () => {
  const topics = ingressTopics();
  const { logger, logs } = captureLogs();
  let ingress: IngressWorkers;
  let pool: Pool;
  const accepted = new Map<string, string>();

  beforeAll(async () => {
    ingress = await startIngressWorkers(workersConfig(topics), { logger, brokers: kafkaBrokers() });
    pool = new Pool(ingress.address, { connections: 16, pipelining: 1 });
  });
  afterAll(async () => {
    await pool?.close().catch(() => {});
    await ingress?.drain().catch(() => {});
    await ingress?.terminate();
  });

  it('listens on one port with two threads, ready', async () => {
    expect(ingress.workers).toBe(2);
    expect(ingress.port).toBeGreaterThan(0);
    expect(ingress.isReady()).toBe(true);
    expect(logs.some((l) => l.includes('ingress worker threads listening'))).toBe(true);
  });

  it('answers many concurrent signed webhooks on both workers: every 200 in Kafka, /metrics aggregated on the admin port, 404 on the webhook port', async () => {
    const total = 1200;
    const answers = await Promise.all(
      Array.from({ length: total }, async (_, i) => {
        const { path, body } = webhook(i);
        const res = await pool.request({ method: 'POST', path, body, headers: signedHeaders(SECRET, body) });
        const text = await res.body.text();
        if (res.statusCode === 200)
          accepted.set(sha256(body), path.endsWith('messages') ? topics.messages : topics.deliveryStatus);
        return { status: res.statusCode, text };
      }),
    );
    expect(answers.filter((a) => a.status !== 200)).toEqual([]);

    // The main thread's admin port answers /metrics with every worker's counts.
    for (let i = 0; i < 3; i++) {
      const { status, body: text } = await getFresh(ingress.adminAddress!, '/metrics');
      expect(status).toBe(200);
      const published =
        series(text, 'msgbridge_ingress_requests_total', 'topic="messages",outcome="published",role="ingress"') +
        series(text, 'msgbridge_ingress_requests_total', 'topic="delivery_status",outcome="published",role="ingress"');
      expect(published).toBe(total);
      const perWorker = ['1', '2'].map((w) =>
        series(text, 'msgbridge_ingress_worker_requests_total', `worker="${w}",role="ingress"`),
      );
      // Both workers served requests, and together all of them.
      expect(perWorker[0]).toBeGreaterThan(0);
      expect(perWorker[1]).toBeGreaterThan(0);
      expect(perWorker[0]! + perWorker[1]!).toBe(total);
      expect(
        series(text, 'msgbridge_ingress_publish_latency_seconds_count', 'destination="event",role="ingress"'),
      ).toBe(total);
      expect(series(text, 'msgbridge_ingress_ready', 'role="ingress"')).toBe(1);
      expect(text).toMatch(/^msgbridge_nodejs_heap_size_used_bytes\{role="ingress",worker="2"\} \d+/m);
    }
    expect(await getFresh(ingress.adminAddress!, '/readyz')).toEqual({ status: 200, body: '{"ready":true}' });
    // The webhook port (any worker: a connection each) has no /metrics nor /readyz.
    for (let i = 0; i < 4; i++)
      for (const path of ['/metrics', '/readyz']) expect((await getFresh(ingress.address, path)).status).toBe(404);

    const records = await consumeRecords([topics.messages, topics.deliveryStatus], total, { timeoutMs: 60_000 });
    const stored = new Map(records.map((r) => [r.headers['event-id'], r.topic]));
    const missing = [...accepted].filter(([eventId, topic]) => stored.get(eventId) !== topic);
    expect(missing).toEqual([]);
    expect(records).toHaveLength(total);
  });

  it('drains both workers under load: every request answered (200 or 503), every 200 in Kafka, the threads gone', async () => {
    const before = accepted.size;
    const inFlight = Array.from({ length: 600 }, async (_, i) => {
      const { path, body } = webhook(i + 10_000);
      try {
        const res = await pool.request({ method: 'POST', path, body, headers: signedHeaders(SECRET, body) });
        await res.body.text();
        if (res.statusCode === 200)
          accepted.set(sha256(body), path.endsWith('messages') ? topics.messages : topics.deliveryStatus);
        return res.statusCode;
      } catch {
        // Sent after the listening sockets closed (a new connection refused): never admitted.
        return 'refused';
      }
    });
    await new Promise((r) => setTimeout(r, 30));
    const started = Date.now();
    await ingress.drain();
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(ingress.state).toBe('stopped');
    expect(ingress.isReady()).toBe(false);
    const outcomes = await Promise.all(inFlight);
    expect(outcomes.every((o) => o === 200 || o === 503 || o === 'refused')).toBe(true);
    expect(outcomes.filter((o) => o === 200).length).toBeGreaterThan(0);
    // The port is closed: both threads are gone; so is the admin port.
    await expect(getFresh(ingress.address, '/healthz')).rejects.toThrow();
    await expect(getFresh(ingress.adminAddress!, '/healthz')).rejects.toThrow();

    const records = await consumeRecords([topics.messages, topics.deliveryStatus], accepted.size, {
      timeoutMs: 60_000,
      settleMs: 500,
    });
    const stored = new Map(records.map((r) => [r.headers['event-id'], r.topic]));
    expect([...accepted].filter(([eventId, topic]) => stored.get(eventId) !== topic)).toEqual([]);
    expect(accepted.size).toBeGreaterThan(before);
  });
});

describe('a worker thread that fails', () => {
  it('makes the ingress not ready (/readyz 503 on the admin port), logs one line, reports it, and the drain says so', async () => {
    const { logger, logs } = captureLogs();
    const failures: Error[] = [];
    const ingress = await startIngressWorkers(workersConfig(ingressTopics()), {
      logger,
      brokers: kafkaBrokers(),
      workerEntry: new URL('./workers-crash-entry.ts', import.meta.url),
      onWorkerFailure: (err) => failures.push(err),
    });
    try {
      const deadline = Date.now() + 10_000;
      while (failures.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(failures.map((e) => e.message)).toEqual([
        expect.stringMatching(/^ingress worker 2 stopped \(exit code 1\): Error: injected worker failure/),
      ]);
      expect(ingress.isReady()).toBe(false);
      const readyz = await getFresh(ingress.adminAddress!, '/readyz');
      expect(readyz.status).toBe(503);
      expect(JSON.parse(readyz.body)).toEqual({
        ready: false,
        reason: expect.stringMatching(/^ingress worker 2 stopped/),
      });
      const lines = logs.filter((l) => l.includes('stopped unexpectedly'));
      expect(lines).toHaveLength(1);
      expect(JSON.parse(lines[0]!)).toMatchObject({
        level: 50,
        worker: 2,
        exitCode: 1,
        err: 'Error: injected worker failure',
      });
      await expect(ingress.drain()).rejects.toThrow('ingress drain incomplete: worker 2 had stopped unexpectedly');
    } finally {
      await ingress.terminate();
    }
  });

  it('one whose drain does not finish is closed by terminate() (what the CLI does when the grace period runs out), without taking the process down', async () => {
    const ingress = await startIngressWorkers(workersConfig(ingressTopics()), {
      brokers: kafkaBrokers(),
      workerEntry: new URL('./workers-stuck-entry.ts', import.meta.url),
    });
    const drained = ingress.drain().then(
      () => 'drained',
      (err: Error) => err.message,
    );
    expect(await Promise.race([drained, new Promise((r) => setTimeout(() => r('still draining'), 1500))])).toBe(
      'still draining',
    );
    const started = Date.now();
    await ingress.terminate();
    expect(Date.now() - started).toBeLessThan(1500);
    expect(await drained).toBe('ingress drain incomplete: worker 2 did not finish its drain');
    await expect(getFresh(ingress.address, '/healthz')).rejects.toThrow();
  });
});

describe('msgbridge ingress --workers', () => {
  it('runs two worker threads and exits 0 on SIGTERM after draining them', async () => {
    const topics = ingressTopics();
    const cli = startCli(['ingress', '--workers', '2'], {
      KAFKA_BROKERS: kafkaBrokers().join(','),
      MSGBRIDGE_BUSINESS_ID: 'biz_1',
      MSGBRIDGE_SIGNING_SECRET: SECRET,
      MSGBRIDGE_INGRESS_PORT: '0',
      MSGBRIDGE_INGRESS_ADMIN_PORT: '0',
      MSGBRIDGE__ingress__host: '127.0.0.1',
      MSGBRIDGE__ingress__adminHost: '127.0.0.1',
      MSGBRIDGE__kafka__topics__messages: topics.messages,
      MSGBRIDGE__kafka__topics__deliveryStatus: topics.deliveryStatus,
      MSGBRIDGE__kafka__topics__webhooksDlq: topics.webhooksDlq,
      MSGBRIDGE__kafka__replicationFactor: '1',
    });
    try {
      const line = await cli.waitFor(/^\{"ingress".*\}$/m);
      const ready = JSON.parse(line[0]) as { ingress: string; admin: string; workers: number };
      expect(ready.workers).toBe(2);
      expect((await getFresh(ready.admin, '/readyz')).status).toBe(200);
      const pool = new Pool(ready.ingress, { connections: 8 });
      const statuses = await Promise.all(
        Array.from({ length: 100 }, async (_, i) => {
          const { path, body } = webhook(i);
          const res = await pool.request({ method: 'POST', path, body, headers: signedHeaders(SECRET, body) });
          await res.body.text();
          return res.statusCode;
        }),
      );
      await pool.close();
      expect(statuses.every((s) => s === 200)).toBe(true);
    } finally {
      const code = await cli.stop('SIGTERM', 30_000);
      expect(cli.output().stderr).not.toMatch(/Assertion failed|uv_loop_close/);
      expect(code).toBe(0);
    }
  });

  it.each([
    [['--workers', 'lots'], {}, '--workers expects an integer from 1 to 256 or "auto", got "lots"'],
    [
      [],
      { MSGBRIDGE_INGRESS_WORKERS: '0' },
      'ingress.workers: expected an integer from 1 to 256 or "auto", got 0 (from MSGBRIDGE_INGRESS_WORKERS)',
    ],
    [
      [],
      { MSGBRIDGE_INGRESS_ADMIN_PORT: '8080' },
      'ingress.adminPort: must differ from ingress.port (8080, the webhook port)',
    ],
  ])('refuses %j %j with exit code 2 and a clear message', async (args, env, message) => {
    const result = await runCli(['ingress', ...args], {
      KAFKA_BROKERS: '127.0.0.1:1',
      MSGBRIDGE_BUSINESS_ID: 'biz_1',
      MSGBRIDGE_SIGNING_SECRET: SECRET,
      ...env,
    });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain(message);
  });
});
