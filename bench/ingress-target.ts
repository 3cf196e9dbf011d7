// One ingress under test, as its own process so that its memory can be measured alone.
//   tsx bench/ingress-target.ts <mode>
// modes:
//   kafkajs                the real ingress (uWS, batching publisher, idempotent kafkajs producer, acks=all)
//   platformatic           the same with the @platformatic/kafka producer (kafka.client: platformatic)
//   discard                the same ingress with publishing disabled: the ceiling
//   naive                  node:http, one kafkajs send (acks=all) per request: the baseline
//   <mode>-w<N>            kafkajs, platformatic or discard on N worker threads (ingress.workers: N)
// Environment: BENCH_BROKERS, BENCH_SECRET, BENCH_TOPICS (JSON {messages, deliveryStatus, webhooksDlq}),
// and the OTEL_* variables, read by the ingress itself (bench/ingress.ts sets them for its +otel modes).
// Prints {"url","pid"} on stdout once listening; SIGTERM drains and exits.
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { createServer } from 'node:http';
import { loadConfig } from '../src/config/load.js';
import { createWebhookHandler, rulesFromConfig } from '../src/ingress/handle-webhook.js';
import { startIngressWorkers } from '../src/ingress/workers.js';
import { createKafkajsClient } from '../src/kafka/client.js';
import { ensureTopics } from '../src/kafka/topics.js';
import { createLogger } from '../src/platform/logger.js';

const mode = process.argv[2] ?? 'kafkajs';
const [, base = mode, workerSuffix] = /^(.*?)(?:-w(\d+))?$/.exec(mode) ?? [];
const workers = workerSuffix === undefined ? 1 : Number(workerSuffix);
const client = base.startsWith('platformatic') ? 'platformatic' : 'kafkajs';
const brokers = (process.env.BENCH_BROKERS ?? '').split(',').filter(Boolean);
const topics = JSON.parse(process.env.BENCH_TOPICS ?? '{}') as {
  messages: string;
  deliveryStatus: string;
  webhooksDlq: string;
};
const config = loadConfig({
  env: {
    KAFKA_BROKERS: brokers.join(','),
    MSGBRIDGE_BUSINESS_ID: 'biz_bench',
    MSGBRIDGE_SIGNING_SECRET: process.env.BENCH_SECRET ?? 'bench-secret',
  },
  overrides: {
    kafka: { client, topics: { ...topics }, partitions: 6, replicationFactor: 1 },
    ingress: { host: '127.0.0.1', port: 0, adminHost: '127.0.0.1', adminPort: 0, workers },
    log: { level: 'warn' },
  },
});
const logger = createLogger({ level: 'warn', name: `bench-${mode}` });

/** The webhook URL, and msgbridge's admin URL (its /metrics) when the target has one. */
function announce(url: string, admin?: string) {
  process.stdout.write(`${JSON.stringify({ url, admin, pid: process.pid })}\n`);
}

if (base === 'naive') {
  // What a first version would be: node:http, verify and validate (the same pure handler, so
  // that only the server and the publishing differ), then one producer.send per request.
  const handler = createWebhookHandler(rulesFromConfig(config));
  const kafka = createKafkajsClient(config.kafka, { logger, brokers });
  const admin = kafka.admin();
  await admin.connect();
  await ensureTopics(
    admin,
    [topics.messages, topics.deliveryStatus, topics.webhooksDlq].map((topic) => ({
      topic,
      partitions: 6,
      replicationFactor: 1,
    })),
  );
  await admin.disconnect();
  // The kafkajs default producer: not idempotent, no limit on requests in flight (the most
  // favourable setting for one send per request).
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const header = (name: string) => {
        const v = req.headers[name];
        return Array.isArray(v) ? v[0] : v;
      };
      const match = /^\/webhooks\/([^/]+)(?:\/([^/]+))?$/.exec(req.url ?? '');
      if (!match) {
        res.writeHead(404).end();
        return;
      }
      const decision = handler.handle({
        businessId: match[1]!,
        pathTopic: match[2],
        body: Buffer.concat(chunks),
        signature: header('x-service-hmac-sha256'),
        contentType: header('content-type'),
        contentEncoding: header('content-encoding'),
        traceparent: header('traceparent'),
        receivedAt: Date.now(),
      });
      if (decision.kind === 'reject') {
        res.writeHead(403).end();
        return;
      }
      const { topic, key, value, headers } = decision.record;
      producer.send({ topic, acks: -1, messages: [{ key, value, headers }] }).then(
        () =>
          res
            .writeHead(200, { 'content-type': 'application/json' })
            .end(`{"status":"accepted","eventId":"${decision.eventId}"}`),
        () => res.writeHead(503, { 'retry-after': '1' }).end(),
      );
    });
  });
  server.keepAliveTimeout = 60_000;
  server.listen(0, '127.0.0.1', () => {
    const address = server.address();
    announce(`http://127.0.0.1:${typeof address === 'object' && address ? address.port : 0}`);
  });
  process.once('SIGTERM', () => {
    server.close();
    server.closeAllConnections();
    void producer.disconnect().finally(() => process.exit(0));
  });
} else {
  const ingress = await startIngressWorkers(config, {
    logger,
    brokers,
    unsafeDiscardRecords: base === 'discard',
  });
  announce(ingress.address, ingress.adminAddress);
  process.once('SIGTERM', () => {
    void ingress
      .drain()
      .finally(() => ingress.terminate())
      .finally(() => process.exit(0));
  });
}
