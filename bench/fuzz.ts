// Fuzz campaign against a real ingress (its own process, `msgbridge ingress`) and a real broker:
// hostile requests of every kind in bench/fuzz-campaign.ts interleaved with correctly signed
// webhooks. Afterwards: the ingress never crashed and answers /healthz, every answer was the
// one its kind must get, every signed webhook answered 200 is in Kafka byte for byte, and no
// record in Kafka came from an unsigned or mis-signed request.
//
//   npx tsx bench/fuzz.ts [--requests 100000] [--concurrency 48] [--slow 100] [--seed 1]
// KAFKA_BROKERS=host:port uses an existing Kafka; otherwise the embedded local broker starts.
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel } from 'kafkajs';
import { startLocalBroker, type LocalBroker } from '../src/local-kafka/local-broker.js';
import { benchArgs } from './args.js';
import { checkKafka, runFuzzCampaign, type FuzzReport } from './fuzz-campaign.js';

const args = benchArgs(import.meta.url, {
  requests: { type: 'string', default: '100000' },
  concurrency: { type: 'string', default: '48' },
  slow: { type: 'string', default: '100' },
  seed: { type: 'string', default: '1' },
});
const REQUESTS = args.wholeNumber('requests', 1);
const CONCURRENCY = args.wholeNumber('concurrency', 1);
const SLOW = args.wholeNumber('slow');
const SEED = args.wholeNumber('seed');
const ROOT = fileURLToPath(new URL('..', import.meta.url));
const BUSINESS = 'biz_fuzz';
const SECRET = 'fuzz-signing-secret';
const MAX_BODY = 1024 * 1024;

async function readAll(kafka: Kafka, topics: string[]): Promise<Buffer[]> {
  const admin = kafka.admin();
  await admin.connect();
  let expected = 0;
  for (const topic of topics)
    for (const p of await admin.fetchTopicOffsets(topic)) expected += Number(p.high) - Number(p.low);
  await admin.disconnect();
  const values: Buffer[] = [];
  const consumer = kafka.consumer({
    groupId: `fuzz-reader-${randomUUID()}`,
    maxWaitTimeInMs: 200,
    maxBytes: 50 * 1024 * 1024,
  });
  await consumer.connect();
  await consumer.subscribe({ topics, fromBeginning: true });
  await consumer.run({
    eachBatch: async ({ batch }) => void values.push(...batch.messages.map((m) => m.value ?? Buffer.alloc(0))),
  });
  const deadline = Date.now() + 120_000;
  while (values.length < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  await consumer.disconnect();
  return values;
}

async function main() {
  let local: LocalBroker | undefined;
  let brokers = (process.env.KAFKA_BROKERS ?? '').split(',').filter(Boolean);
  if (brokers.length === 0) {
    local = await startLocalBroker({
      heapMb: 768,
      partitions: 3,
      onProgress: (l) => process.stderr.write(`[kafka] ${l}\n`),
    });
    brokers = [local.bootstrap];
  }
  const run = randomUUID().slice(0, 8);
  const topics = {
    messages: `fuzz-messages-${run}`,
    deliveryStatus: `fuzz-status-${run}`,
    webhooksDlq: `fuzz-dlq-${run}`,
  };
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'ingress'], {
    cwd: ROOT,
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      KAFKA_BROKERS: brokers.join(','),
      MSGBRIDGE_BUSINESS_ID: BUSINESS,
      MSGBRIDGE_SIGNING_SECRET: SECRET,
      MSGBRIDGE_INGRESS_PORT: '0',
      MSGBRIDGE_INGRESS_ADMIN_PORT: '0',
      MSGBRIDGE_LOG_LEVEL: 'error',
      MSGBRIDGE__kafka__topics__messages: topics.messages,
      MSGBRIDGE__kafka__topics__deliveryStatus: topics.deliveryStatus,
      MSGBRIDGE__kafka__topics__webhooksDlq: topics.webhooksDlq,
      MSGBRIDGE__kafka__partitions: '3',
      MSGBRIDGE__kafka__replicationFactor: '1',
      MSGBRIDGE__ingress__host: '127.0.0.1',
      MSGBRIDGE__ingress__idleTimeoutSeconds: '10',
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let exit: number | null | undefined;
  child.on('exit', (code, signal) => (exit = code ?? (signal ? -1 : null)));
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-20_000)));
  const { ingress: url, admin } = await new Promise<{ ingress: string; admin: string }>((resolve, reject) => {
    child.once('exit', () => reject(new Error(`the ingress exited before listening:\n${stderr}`)));
    createInterface({ input: child.stdout! }).on('line', (l) => {
      if (l.startsWith('{"ingress"')) resolve(JSON.parse(l) as { ingress: string; admin: string });
    });
  });
  const port = Number(new URL(url).port);
  process.stderr.write(`[fuzz] ingress at ${url}; ${REQUESTS} hostile requests…\n`);

  let report: FuzzReport;
  let healthz = 0;
  let aliveAfter = false;
  let kafkaCheck: ReturnType<typeof checkKafka>;
  try {
    report = await runFuzzCampaign({
      port,
      businessId: BUSINESS,
      secret: SECRET,
      requests: REQUESTS,
      legitimateEvery: 10,
      concurrency: CONCURRENCY,
      slowConnections: SLOW,
      maxBodyBytes: MAX_BODY,
      seed: SEED,
      onProgress: (n) => process.stderr.write(`[fuzz] ${n} sent\n`),
    });
    healthz = (await fetch(`${admin}/healthz`)).status;
    aliveAfter = exit === undefined;
    const kafka = new Kafka({ clientId: 'fuzz-reader', brokers, logLevel: logLevel.NOTHING });
    kafkaCheck = checkKafka(report, await readAll(kafka, Object.values(topics)));
  } finally {
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
    await local?.stop();
  }

  const fmt = (n: number) => n.toLocaleString('en-US', { maximumFractionDigits: 0 });
  const out: string[] = [];
  out.push(
    `${fmt(report.hostile)} hostile requests and ${fmt(report.legitimate)} signed webhooks in ${(report.durationMs / 1000).toFixed(1)} s (${fmt((report.hostile + report.legitimate) / (report.durationMs / 1000))} requests/s), ${report.slow.opened} slow connections alongside.`,
  );
  out.push('');
  out.push('| kind | sent | answers |');
  out.push('|---|---|---|');
  for (const [name, k] of Object.entries(report.kinds)) {
    out.push(
      `| ${name} | ${fmt(k.sent)} | ${Object.entries(k.answers)
        .sort((a, b) => b[1] - a[1])
        .map(([a, n]) => `${a}: ${fmt(n)}`)
        .join(', ')} |`,
    );
  }
  out.push(
    `| **signed webhooks (the provider)** | ${fmt(report.legitimate)} | ${Object.entries(report.legitimateAnswers)
      .map(([a, n]) => `${a}: ${fmt(n)}`)
      .join(', ')} |`,
  );
  out.push('');
  out.push(
    `- ingress process: ${aliveAfter ? 'alive through the campaign' : `**exited (${exit})**`}; /healthz after: ${healthz}`,
  );
  out.push(
    `- answers outside what their kind must get: **${report.unexpected.length}**${report.unexpected.length > 0 ? ` (${JSON.stringify(report.unexpected.slice(0, 10))})` : ''}`,
  );
  out.push(
    `- signed webhooks answered 200: ${fmt(report.acknowledged.size)} of ${fmt(report.legitimate)} (${((100 * report.acknowledged.size) / report.legitimate).toFixed(2)}%); missing from Kafka: **${kafkaCheck.missing}**`,
  );
  out.push(
    `- records in Kafka: ${fmt(kafkaCheck.records)}; from an unsigned or mis-signed request: **${kafkaCheck.forged}**`,
  );
  out.push(`- slow connections closed by the ingress: ${report.slow.closedByServer} of ${report.slow.opened}`);
  process.stdout.write(`${out.join('\n')}\n`);
  const failed =
    !aliveAfter || healthz !== 200 || report.unexpected.length > 0 || kafkaCheck.missing > 0 || kafkaCheck.forged > 0;
  process.exit(failed ? 1 : 0);
}

main().catch((err: unknown) => {
  process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
  process.exit(1);
});
