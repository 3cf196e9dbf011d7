// A hung broker, side by side with a reference producer (issue 11). A 3-node local cluster
// (replication factor 3, min.insync.replicas 2); the ingress (its default client and timeouts)
// takes signed webhooks at --rate per second, open loop, while an idempotent acks=all
// librdkafka producer (confluent-kafka, in a Python venv under .cache/bench/) writes --rate
// records/s to its own topic of the same shape. One broker is frozen with SIGSTOP (it still
// accepts connections, as a GC-paused or disk-stalled broker does) for --freeze-seconds, then
// resumed. Reported per round: the longest stretch without a 200 (ingress) and without an
// acknowledgement (reference) from the freeze to the thaw, and their ratio; and 200s and 503s
// during the freeze. Rounds freeze the first broker of the bootstrap list, then the last.
//
//   npx tsx bench/hung-broker.ts [--rate 400] [--freeze-seconds 45] [--rounds 2]
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { spawn, execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel } from 'kafkajs';
import { Pool } from 'undici';
import { loadConfig } from '../src/config/load.js';
import { startIngress } from '../src/ingress/index.js';
import { startLocalCluster } from '../src/local-kafka/local-broker.js';
import { ensureTopics } from '../src/kafka/topics.js';
import { createLogger } from '../src/platform/logger.js';
import { messageId, signedHeaders, statusEvent } from '../test/ingress/fixtures.js';
import { benchArgs } from './args.js';

const args = benchArgs(import.meta.url, {
  rate: { type: 'string', default: '400' },
  'freeze-seconds': { type: 'string', default: '45' },
  rounds: { type: 'string', default: '2' },
});
const RATE = args.decimal('rate');
const FREEZE_MS = args.decimal('freeze-seconds') * 1000;
const ROUNDS = args.wholeNumber('rounds', 1);
const SECRET = 'hung-broker-secret';
const VENV = fileURLToPath(new URL('../.cache/bench/venv', import.meta.url));
const PYTHON = `${VENV}/bin/python`;

if (!existsSync(PYTHON)) {
  console.log('creating the reference producer venv (confluent-kafka from PyPI)');
  execFileSync('python3', ['-m', 'venv', VENV], { stdio: 'inherit' });
  execFileSync(`${VENV}/bin/pip`, ['install', '-q', 'confluent-kafka'], { stdio: 'inherit' });
}

const longestGap = (times: number[], from: number, to: number) => {
  const points = [from, ...times.filter((t) => t >= from && t <= to).sort((a, b) => a - b), to];
  return Math.max(...points.slice(1).map((t, i) => t - points[i]!));
};

const cluster = await startLocalCluster({ nodes: 3, heapMb: 320, partitions: 6 });
console.log(`cluster ${cluster.bootstrap} ready in ${cluster.startupMs} ms`);
const admin = new Kafka({
  clientId: 'bench-admin',
  brokers: cluster.bootstrap.split(','),
  logLevel: logLevel.NOTHING,
}).admin();
await admin.connect();
const rows: string[] = [];
try {
  for (let round = 0; round < ROUNDS; round++) {
    const victim = round % 2 === 0 ? cluster.nodes[0]! : cluster.nodes[cluster.nodes.length - 1]!;
    const id = randomUUID().slice(0, 8);
    const referenceTopic = `ref-${id}`;
    await ensureTopics(admin, [{ topic: referenceTopic, partitions: 6, replicationFactor: 3, minInsyncReplicas: 2 }]);
    const config = loadConfig({
      env: {
        KAFKA_BROKERS: cluster.bootstrap,
        MSGBRIDGE_BUSINESS_ID: 'biz_1',
        MSGBRIDGE_SIGNING_SECRET: SECRET,
        MSGBRIDGE__kafka__topics__messages: `hb-messages-${id}`,
        MSGBRIDGE__kafka__topics__deliveryStatus: `hb-status-${id}`,
        MSGBRIDGE__kafka__topics__webhooksDlq: `hb-dlq-${id}`,
        MSGBRIDGE__kafka__partitions: '6',
        MSGBRIDGE__kafka__replicationFactor: '3',
        MSGBRIDGE__ingress__host: '127.0.0.1',
        MSGBRIDGE__ingress__port: '0',
        MSGBRIDGE_INGRESS_ADMIN_PORT: '0',
      },
    });
    const ingress = await startIngress({ config, logger: createLogger({ level: 'error' }) });
    const reference = spawn(
      PYTHON,
      [
        fileURLToPath(new URL('./reference-producer.py', import.meta.url)),
        cluster.bootstrap,
        referenceTopic,
        String(RATE),
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    const lines = createInterface({ input: reference.stdout! });
    const nextLine = () => new Promise<string>((resolve) => lines.once('line', resolve));
    await nextLine();

    const pool = new Pool(ingress.address, { connections: 256, pipelining: 1 });
    const oks: number[] = [];
    let refused = 0;
    let failed = 0;
    let inFlight = 0;
    let running = true;
    const fire = () => {
      if (inFlight >= 4000) return;
      inFlight++;
      const body = statusEvent(messageId());
      pool
        .request({
          path: '/webhooks/biz_1/delivery_status',
          method: 'POST',
          body,
          headers: signedHeaders(SECRET, body),
          headersTimeout: 60_000,
        })
        .then(async (res) => {
          await res.body.dump();
          if (res.statusCode === 200) oks.push(Date.now());
          else refused++;
        })
        .catch(() => failed++)
        .finally(() => inFlight--);
    };
    const started = Date.now();
    let sent = 0;
    const ticker = setInterval(() => {
      const due = Math.floor(((Date.now() - started) / 1000) * RATE);
      for (; sent < due && running; sent++) fire();
    }, 5);

    await new Promise((r) => setTimeout(r, 5000));
    const okBefore = oks.length;
    process.kill(victim.pid, 'SIGSTOP');
    const frozenAt = Date.now();
    await new Promise((r) => setTimeout(r, FREEZE_MS));
    const thawAt = Date.now();
    const refusedDuring = refused;
    process.kill(victim.pid, 'SIGCONT');
    await new Promise((r) => setTimeout(r, 5000));
    running = false;
    clearInterval(ticker);
    reference.stdin!.end();
    const { acked } = JSON.parse(await nextLine()) as { acked: number[] };
    await pool.close();
    await ingress.drain();

    const ingressGap = longestGap(oks, frozenAt, thawAt);
    const referenceGap = longestGap(acked, frozenAt, thawAt);
    const which = round % 2 === 0 ? 'first' : 'last';
    const okDuring = oks.filter((t) => t >= frozenAt && t <= thawAt).length;
    const row = `| ${which} (node ${victim.id}) | ${(ingressGap / 1000).toFixed(1)} s | ${(referenceGap / 1000).toFixed(1)} s | ${(ingressGap / referenceGap).toFixed(2)} | ${okDuring} / ${refusedDuring} | ${acked.filter((t) => t >= frozenAt && t <= thawAt).length} |`;
    rows.push(row);
    console.log(
      `round ${round + 1}: froze the ${which} broker: ingress gap ${ingressGap} ms, reference gap ${referenceGap} ms; ingress 200s before ${okBefore}, during ${okDuring}, 503s ${refusedDuring}, transport errors ${failed}`,
    );
    // Let the cluster settle (the thawed broker catches up and rejoins the ISR) before the next round.
    await new Promise((r) => setTimeout(r, 10_000));
  }
} finally {
  await admin.disconnect().catch(() => {});
  await cluster.stop();
}
console.log(
  `\n| frozen broker | ingress: longest gap without a 200 | librdkafka: longest gap without an ack | ratio | ingress 200s / 503s while frozen | librdkafka acks while frozen |\n|---|---|---|---|---|---|\n${rows.join('\n')}`,
);
process.exit(0);
