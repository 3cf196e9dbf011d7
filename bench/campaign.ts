// The end-to-end campaign (issue 38): a 3-node Kafka cluster (replication factor 3, min ISR 2),
// two `msgbridge ingress`, two `msgbridge sender` and two `msgbridge tracker` processes (dist/cli.js,
// as in production), --rate send requests/s over --recipients recipients for --seconds, and a fake
// provider in this process that creates a message per call, counts calls per request id, and
// delivers signed status webhooks (shuffled, some duplicated, some before their result) and
// inbound messages to the ingresses. Nine overlapping faults, at fixed fractions of --seconds so
// that a shorter run still has them all: kill -9 of a broker, a sender and a tracker; a broker
// frozen --fault-seconds with SIGSTOP; a provider outage of --fault-seconds with an ingress
// kill -9 in it; a broker, a tracker and a sender killed together. Every killed role restarts.
// Request ids already sent are produced again after the first sender kill (one call each).
// Checked by independent clients: a kafkajs read_committed consumer of this process (not the
// roles' code) reads the topics, and the fake provider's own log of calls. Prints the table of
// docs/benchmarks.md ("Sent once: the end-to-end campaign"). Needs `npm run build`, Java, Maven.
//
//   npx tsx bench/campaign.ts [--seconds 360] [--rate 100] [--recipients 500] [--fault-seconds 20]
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, writeFileSync, type WriteStream } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer } from 'node:net';
import { cpus, totalmem } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Kafka, logLevel, type Consumer, type Producer } from 'kafkajs';
import { Pool } from 'undici';
import { signBody } from '../src/contracts/signature.js';
import { startLocalCluster, type LocalCluster, type LocalNode } from '../src/local-kafka/local-broker.js';
import { benchArgs } from './args.js';

const args = benchArgs(import.meta.url, {
  seconds: { type: 'string', default: '360' },
  rate: { type: 'string', default: '100' },
  recipients: { type: 'string', default: '500' },
  /** How long the broker stays frozen and the provider stays down. */
  'fault-seconds': { type: 'string', default: '20' },
  /** After the traffic: how long to wait at most for every result, record and state. */
  'drain-seconds': { type: 'string', default: '300' },
  'inbound-rate': { type: 'string', default: '10' },
});
const SECONDS = args.wholeNumber('seconds', 90);
const RATE = args.decimal('rate');
const RECIPIENTS = args.wholeNumber('recipients', 1);
const FAULT_S = args.wholeNumber('fault-seconds', 1);
const DRAIN_S = args.wholeNumber('drain-seconds', 30);
const INBOUND_RATE = args.decimal('inbound-rate');
if (FAULT_S * 4 > SECONDS)
  args.fail(`--fault-seconds ${FAULT_S} leaves no room for the nine faults in --seconds ${SECONDS}`);

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const CLI = join(ROOT, 'dist/cli.js');
if (!existsSync(CLI)) args.fail('run `npm run build` first: the roles under test are dist/cli.js');
const RUN = randomUUID().slice(0, 8);
const LOGS = join(ROOT, '.cache/campaign', RUN);
mkdirSync(LOGS, { recursive: true });
const BUSINESS = { id: 'biz_campaign', apiKey: 'campaign-api-key', secret: 'campaign-secret', number: '+15550001111' };
const T0 = Date.now();
const since = (at: number) => `${((at - T0) / 1000).toFixed(1)} s`;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const log = (text: string) => process.stderr.write(`[campaign ${since(Date.now())}] ${text}\n`);
const sha256 = (text: string | Buffer) => createHash('sha256').update(text).digest('hex');
const recipient = (k: number) => `+1555${String(3_000_000 + k).padStart(7, '0')}`;

/** Ports handed to a member: the OS may offer a released port again, and two roles then fight for it at their restarts (run 1ec77a35). */
const handedOut = new Set<number>();

async function freePort(): Promise<number> {
  for (;;) {
    const port = await anyFreePort();
    if (handedOut.has(port)) continue;
    handedOut.add(port);
    return port;
  }
}

async function anyFreePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

// ---------------------------------------------------------------------------------------------
// The roles as processes. Ports are fixed per slot, so a restarted member answers where it did.

type RoleName = 'ingress' | 'sender' | 'tracker';
interface Member {
  name: string;
  role: RoleName;
  slot: number;
  env: Record<string, string>;
  admin: string;
  /** The ingress's webhook address. */
  url?: string;
  child?: ChildProcess;
  /** Increases at each start: a provider call is attributed to the generation that made it. */
  generation: number;
  /** Generations that ended by our kill -9, with when. */
  killed: Map<number, number>;
  unexpectedExits: number;
  stopping: boolean;
  out: WriteStream;
}

const members: Member[] = [];

function launch(m: Member): void {
  m.generation += 1;
  const generation = m.generation;
  const child = spawn(process.execPath, [CLI, m.role], {
    cwd: ROOT,
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...m.env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.pipe(m.out, { end: false });
  child.stderr!.pipe(m.out, { end: false });
  m.child = child;
  child.once('exit', (code, signal) => {
    if (m.stopping || m.killed.has(generation)) return;
    // A member that dies on its own is a finding: counted, and started again so the run goes on.
    m.unexpectedExits += 1;
    log(`${m.name} (generation ${generation}) exited on its own: code ${code}, signal ${signal}; restarting`);
    setTimeout(() => m.generation === generation && !m.stopping && launch(m), 2000);
  });
}

async function ready(m: Member, timeoutMs = 180_000): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < timeoutMs) {
    const ok = await fetch(`${m.admin}/readyz`, { signal: AbortSignal.timeout(2000) }).then(
      (r) => r.ok,
      () => false,
    );
    if (ok) return Date.now() - started;
    await sleep(250);
  }
  throw new Error(`${m.name} was not ready within ${timeoutMs} ms (log: ${LOGS}/${m.name}.log)`);
}

async function kill9(m: Member): Promise<number> {
  const at = Date.now();
  m.killed.set(m.generation, at);
  const child = m.child!;
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((r) => child.once('exit', r));
    child.kill('SIGKILL');
    await exited;
  }
  return at;
}

async function member(
  role: RoleName,
  slot: number,
  common: Record<string, string>,
  fakeProvider: string,
): Promise<Member> {
  const [port, admin] = [await freePort(), await freePort()];
  const name = `${role}-${slot}`;
  const env: Record<string, string> = { ...common };
  if (role === 'ingress')
    Object.assign(env, {
      MSGBRIDGE_INGRESS_PORT: String(port),
      MSGBRIDGE_INGRESS_ADMIN_PORT: String(admin),
      MSGBRIDGE__ingress__host: '127.0.0.1',
      MSGBRIDGE__ingress__adminHost: '127.0.0.1',
    });
  if (role === 'sender')
    Object.assign(env, {
      MSGBRIDGE_SENDER_ADMIN_PORT: String(admin),
      MSGBRIDGE__sender__adminHost: '127.0.0.1',
      // Each member its own ledger directory, kept across its restarts as a volume would be.
      MSGBRIDGE_SENDER_STATE_DIR: join(LOGS, `${name}-state`),
      // A path per member: the fake provider tells which member made a call.
      MSGBRIDGE_PROVIDER_URL: `${fakeProvider}/m${slot}`,
    });
  if (role === 'tracker')
    Object.assign(env, {
      MSGBRIDGE_TRACKER_PORT: String(port),
      MSGBRIDGE_TRACKER_ADMIN_PORT: String(admin),
      MSGBRIDGE__tracker__host: '127.0.0.1',
      MSGBRIDGE__tracker__adminHost: '127.0.0.1',
      MSGBRIDGE_TRACKER_ADVERTISED_URL: `http://127.0.0.1:${port}`,
      MSGBRIDGE_TRACKER_STATE_DIR: join(LOGS, `${name}-state`),
    });
  const m: Member = {
    name,
    role,
    slot,
    env,
    admin: `http://127.0.0.1:${admin}`,
    ...(role === 'ingress' ? { url: `http://127.0.0.1:${port}` } : {}),
    generation: 0,
    killed: new Map(),
    unexpectedExits: 0,
    stopping: false,
    out: createWriteStream(join(LOGS, `${name}.log`), { flags: 'a' }),
  };
  members.push(m);
  return m;
}

// ---------------------------------------------------------------------------------------------
// The fake provider: independent of the sender's code. A call creates a message at once (as a
// real provider does, before its answer can be lost), is answered after 30-120 ms, and schedules
// the message's signed statuses.

interface Call {
  requestId: string;
  slot: number;
  generation: number;
  at: number;
  answeredAt?: number;
  messageId: string;
}
const calls: Call[] = [];
const callsByRequest = new Map<string, Call[]>();
const createdBy = new Map<string, Call>();
let outage: { from: number; to: number } | undefined;
let refusedDuringOutage = 0;
let badCalls = 0;
let messageSeq = 0;

/** Per message, the statuses the ingress acknowledged (200) and those given up on, with their times. */
const statusAcked = new Map<string, Map<string, number>>();
const statusGivenUp = new Map<string, Set<string>>();
const statusAckAt: { messageId: string; at: number }[] = [];
const ackedWebhooks = new Map<string, string>();
let webhooksGivenUp = 0;
let inboundAcked = 0;
let statusWebhooks = 0;
let duplicatedWebhooks = 0;

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString()));
    req.on('error', reject);
  });
}

function startFakeProvider(senders: Member[], deliver: Deliverer): Promise<string> {
  const server = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      const body = await readBody(req);
      const match = /^\/m(\d+)\/v1\/businesses\/([^/]+)\/send\/messages$/.exec(req.url ?? '');
      if (req.method !== 'POST' || !match || match[2] !== BUSINESS.id || req.headers['x-api-key'] !== BUSINESS.apiKey) {
        badCalls += 1;
        res.writeHead(404).end();
        return;
      }
      const slot = Number(match[1]);
      if (outage && Date.now() < outage.to) {
        refusedDuringOutage += 1;
        await sleep(20);
        res
          .writeHead(503, { 'content-type': 'application/json' })
          .end(JSON.stringify({ message: 'outage', type: 'ERROR_TYPE_INTERNAL', code: 'ERROR_CODE_INTERNAL' }));
        return;
      }
      let parsed: { callbackData?: string; recipient?: { id?: string } };
      try {
        parsed = JSON.parse(body) as typeof parsed;
      } catch {
        parsed = {};
      }
      const requestId = parsed.callbackData;
      const to = parsed.recipient?.id;
      if (typeof requestId !== 'string' || typeof to !== 'string') {
        badCalls += 1;
        res.writeHead(400).end();
        return;
      }
      messageSeq += 1;
      const messageId = `cmp${RUN}${String(messageSeq).padStart(8, '0')}`;
      const call: Call = { requestId, slot, generation: senders[slot]!.generation, at: Date.now(), messageId };
      calls.push(call);
      createdBy.set(messageId, call);
      const list = callsByRequest.get(requestId) ?? [];
      list.push(call);
      callsByRequest.set(requestId, list);
      scheduleStatuses(messageId, to, deliver);
      await sleep(30 + Math.random() * 90);
      call.answeredAt = Date.now();
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: messageId }));
    })().catch(() => res.destroy());
  });
  server.keepAliveTimeout = 30_000;
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve(`http://127.0.0.1:${(server.address() as { port: number }).port}`)),
  );
}

const STATUSES = ['sent', 'delivered', 'read'] as const;

/**
 * sent, delivered, read (a fifth of the messages stop at delivered, a twentieth at sent), each
 * after 0-4 s independently: shuffled, and a share arrive before the sender's result. One in
 * ten is delivered twice, the same bytes again a few seconds later (a provider's retry).
 */
function scheduleStatuses(messageId: string, to: string, deliver: Deliverer): void {
  const createdS = Math.floor(Date.now() / 1000);
  const draw = Math.random();
  const last = draw < 0.05 ? 1 : draw < 0.25 ? 2 : 3;
  for (let i = 0; i < last; i++) {
    const status = STATUSES[i]!;
    const body = JSON.stringify({
      topic: 'delivery_status',
      timestamp: String(createdS + i + 1),
      sender: { channelType: 'whatsapp', id: BUSINESS.number },
      recipient: { channelType: 'whatsapp', id: to },
      statusUpdate: { id: messageId, status, error: null },
    });
    const onAck = (at: number) => {
      const acked = statusAcked.get(messageId) ?? new Map<string, number>();
      acked.set(status, (createdS + i + 1) * 1000);
      statusAcked.set(messageId, acked);
      statusAckAt.push({ messageId, at });
    };
    const onGiveUp = () => {
      const set = statusGivenUp.get(messageId) ?? new Set<string>();
      set.add(status);
      statusGivenUp.set(messageId, set);
    };
    statusWebhooks += 1;
    setTimeout(() => deliver.send('delivery_status', body, onAck, onGiveUp), Math.random() * 4000);
    if (Math.random() < 0.1) {
      duplicatedWebhooks += 1;
      setTimeout(() => deliver.send('delivery_status', body, onAck, onGiveUp), 2000 + Math.random() * 4000);
    }
  }
}

/**
 * Signed webhooks to the two ingresses, alternately; a refusal or a dead ingress is retried on
 * the other one (as a provider retries), for up to two minutes. At most 512 in flight.
 */
class Deliverer {
  private readonly pools: Pool[];
  private readonly queue: (() => Promise<void>)[] = [];
  private active = 0;
  private next = 0;
  pending = 0;

  constructor(private readonly ingresses: Member[]) {
    this.pools = ingresses.map((m) => new Pool(m.url!, { connections: 64 }));
  }

  send(topic: 'delivery_status' | 'messages', body: string, onAck: (at: number) => void, onGiveUp: () => void): void {
    this.pending += 1;
    this.queue.push(async () => {
      const deadline = Date.now() + 120_000;
      let index = this.next++ % this.pools.length;
      for (let attempt = 0; Date.now() < deadline; attempt++) {
        const ok = await this.pools[index]!.request({
          path: `/webhooks/${BUSINESS.id}/${topic}`,
          method: 'POST',
          body,
          headers: { 'content-type': 'application/json', 'x-service-hmac-sha256': signBody(BUSINESS.secret, body) },
          headersTimeout: 15_000,
          bodyTimeout: 15_000,
        }).then(
          async (res) => (await res.body.dump(), res.statusCode === 200),
          () => false,
        );
        if (ok) {
          ackedWebhooks.set(sha256(body), topic);
          onAck(Date.now());
          return;
        }
        index = (index + 1) % this.pools.length;
        await sleep(Math.min(2000, 100 * 2 ** attempt));
      }
      webhooksGivenUp += 1;
      onGiveUp();
    });
    this.pump();
  }

  private pump(): void {
    while (this.active < 512 && this.queue.length > 0) {
      const task = this.queue.shift()!;
      this.active += 1;
      void task().finally(() => {
        this.active -= 1;
        this.pending -= 1;
        this.pump();
      });
    }
  }

  async close(): Promise<void> {
    await Promise.all(this.pools.map((p) => p.close()));
  }
}

// ---------------------------------------------------------------------------------------------
// The independent reader: kafkajs, read_committed (its default), its own group, every topic the
// table needs from the beginning.

interface Result {
  outcome: string;
  messageId?: string;
  maybeSent: boolean;
  at: number;
}
interface StateValue {
  requestId: string | null;
  status: string;
  acceptedAt: string | null;
  sentAt: string | null;
  deliveredAt: string | null;
  readAt: string | null;
}
const seenWebhooks = new Set<string>();
const results = new Map<string, Result[]>();
/**
 * Where each request id stands in `send-requests` (partition/offset), read back: a request with no result is told apart
 * from one Kafka never held.
 */
const requestsInKafka = new Map<string, string[]>();
const states = new Map<string, StateValue>();
let readerCrashes = 0;

async function startReader(kafka: Kafka): Promise<Consumer> {
  const consumer = kafka.consumer({ groupId: `campaign-reader-${RUN}`, maxWaitTimeInMs: 250, sessionTimeout: 30_000 });
  consumer.on(consumer.events.CRASH, (e) => {
    readerCrashes += 1;
    log(`the reader crashed (${String((e.payload as { error?: Error }).error?.message)}); kafkajs restarts it`);
  });
  await consumer.connect();
  await consumer.subscribe({
    topics: ['delivery_status', 'messages', 'send-results', 'message-state', 'send-requests'],
    fromBeginning: true,
  });
  await consumer.run({
    eachBatch: async ({ batch }) => {
      for (const m of batch.messages) {
        if (batch.topic === 'delivery_status' || batch.topic === 'messages') {
          if (m.value) seenWebhooks.add(sha256(m.value));
        } else if (batch.topic === 'send-results' && m.value) {
          const v = JSON.parse(m.value.toString()) as {
            requestId: string;
            outcome: string;
            messageId?: string;
            maybeSent?: boolean;
          };
          const list = results.get(v.requestId) ?? [];
          list.push({
            outcome: v.outcome,
            ...(v.messageId ? { messageId: v.messageId } : {}),
            maybeSent: v.maybeSent === true,
            at: Number(m.timestamp),
          });
          results.set(v.requestId, list);
        } else if (batch.topic === 'send-requests' && m.value) {
          let id: unknown;
          try {
            id = (JSON.parse(m.value.toString()) as { requestId?: unknown }).requestId;
          } catch {
            id = undefined;
          }
          if (typeof id === 'string')
            requestsInKafka.set(id, [...(requestsInKafka.get(id) ?? []), `${batch.partition}/${m.offset}`]);
        } else if (batch.topic === 'message-state' && m.key) {
          if (m.value) states.set(m.key.toString(), JSON.parse(m.value.toString()) as StateValue);
          else states.delete(m.key.toString());
        }
      }
    },
  });
  return consumer;
}

// ---------------------------------------------------------------------------------------------
// Send requests: a plain acks=all producer at --rate, open loop; a request counts once Kafka
// acknowledged it. A batch that fails or hangs is produced again (its ids may then be in Kafka
// twice: counted as produced again); a producer that keeps failing is replaced.

const acknowledgedRequests = new Map<string, number>();
const producedAgain = new Set<string>();
const retriedProduce = new Set<string>();
let unacknowledgedRequests = 0;
let produceFailures = 0;
let lastProduceError = '';
let requestSeq = 0;

function requestRecord(requestId: string, to: string) {
  return {
    key: to,
    value: JSON.stringify({
      requestId,
      type: 'text',
      recipient: { channelType: 'whatsapp', id: to },
      message: { text: `rid=${requestId}` },
      callbackData: requestId,
    }),
  };
}

async function produceLoop(kafka: Kafka, until: number, reproduceAt: number): Promise<void> {
  const tickMs = 100;
  const start = Date.now();
  const giveUpAt = until + 180_000;
  const connected = async (): Promise<Producer> => {
    const p = kafka.producer({ allowAutoTopicCreation: false, retry: { retries: 3 } });
    await p.connect().catch((err: unknown) => void (lastProduceError = (err as Error).message));
    return p;
  };
  let current = connected();
  const opened = [current];
  let failuresInARow = 0;
  let due = 0;
  let reproduced = false;
  const inFlight = new Set<Promise<void>>();
  const send = (batch: { id: string; to: string }[]): void => {
    const p = (async () => {
      while (Date.now() < giveUpAt) {
        const pending = current;
        const producer = await pending;
        const sent = producer.send({
          topic: 'send-requests',
          acks: -1,
          timeout: 10_000,
          messages: batch.map((r) => requestRecord(r.id, r.to)),
        });
        const ok = await Promise.race([sent.then(() => true), sleep(20_000).then(() => false)]).catch(
          (err: unknown) => ((lastProduceError = (err as Error).message), false),
        );
        if (ok) {
          failuresInARow = 0;
          const now = Date.now();
          for (const r of batch) if (!acknowledgedRequests.has(r.id)) acknowledgedRequests.set(r.id, now);
          return;
        }
        void sent.catch(() => undefined);
        produceFailures += 1;
        for (const r of batch) retriedProduce.add(r.id);
        if (++failuresInARow >= 3 && pending === current) {
          failuresInARow = 0;
          current = connected();
          opened.push(current);
          void producer.disconnect().catch(() => undefined);
        }
        await sleep(1000);
      }
      unacknowledgedRequests += batch.length;
    })();
    inFlight.add(p);
    void p.finally(() => inFlight.delete(p));
  };
  for (let tick = 0; Date.now() < until; tick++) {
    const target = Math.floor(((tick + 1) * tickMs * RATE) / 1000);
    const batch: { id: string; to: string }[] = [];
    for (; due < target; due++) {
      requestSeq += 1;
      const k = requestSeq % RECIPIENTS;
      batch.push({ id: `${RUN}-${requestSeq}`, to: recipient(k) });
    }
    if (batch.length > 0) send(batch);
    if (!reproduced && Date.now() >= reproduceAt) {
      // Ids Kafka acknowledged, produced again: each must still get one call.
      reproduced = true;
      const again = [...acknowledgedRequests.keys()].filter((_, i) => i % 50 === 0).slice(0, 200);
      for (const id of again) producedAgain.add(id);
      send(again.map((id) => ({ id, to: recipient(Number(id.split('-')[1]) % RECIPIENTS) })));
      log(`produced ${again.length} request ids again`);
    }
    const wait = start + (tick + 1) * tickMs - Date.now();
    if (wait > 0) await sleep(wait);
  }
  await Promise.all([...inFlight]);
  for (const p of opened) await (await p).disconnect().catch(() => undefined);
}

async function inboundLoop(deliver: Deliverer, until: number): Promise<void> {
  let n = 0;
  const start = Date.now();
  while (Date.now() < until) {
    n += 1;
    const body = JSON.stringify({
      timestamp: String(Math.floor(Date.now() / 1000)),
      sender: { channelType: 'whatsapp', id: recipient(n % RECIPIENTS), name: null },
      recipient: { channelType: 'whatsapp', id: BUSINESS.number },
      message: { text: `inbound ${RUN} ${n}` },
    });
    deliver.send(
      'messages',
      body,
      () => (inboundAcked += 1),
      () => undefined,
    );
    const wait = start + (n * 1000) / INBOUND_RATE - Date.now();
    if (wait > 0) await sleep(wait);
  }
}

// ---------------------------------------------------------------------------------------------
// The faults, at fractions of --seconds. Broker faults wait for the previous broker to be back.

interface FaultLog {
  at: number;
  what: string;
  back?: number;
}
const faults: FaultLog[] = [];
const senderKills: { slot: number; generation: number; at: number; inFlight: number }[] = [];

async function runFaults(
  start: number,
  cluster: LocalCluster,
  ingresses: Member[],
  senders: Member[],
  trackers: Member[],
): Promise<void> {
  const S = SECONDS * 1000;
  const F = FAULT_S * 1000;
  const restarts: Promise<void>[] = [];
  const at = (fraction: number, extraMs = 0) => sleep(Math.max(0, start + fraction * S + extraMs - Date.now()));
  let brokerBack: Promise<void> = Promise.resolve();
  const killBroker = async (node: LocalNode, downMs: number) => {
    await brokerBack;
    const entry: FaultLog = { at: Date.now(), what: `kill -9 broker ${node.id}` };
    faults.push(entry);
    process.kill(node.pid, 'SIGKILL');
    brokerBack = (async () => {
      await sleep(downMs);
      while (node.alive) await sleep(100);
      await node.start();
      entry.back = Date.now();
    })();
    restarts.push(brokerBack);
  };
  const killRole = async (m: Member, downMs = 5000) => {
    const inFlightBefore = calls.filter(
      (c) => c.slot === m.slot && c.generation === m.generation && c.answeredAt === undefined,
    ).length;
    const generation = m.generation;
    const killedAt = await kill9(m);
    const entry: FaultLog = { at: killedAt, what: `kill -9 ${m.name} (generation ${generation})` };
    if (m.role === 'sender') {
      senderKills.push({ slot: m.slot, generation, at: killedAt, inFlight: inFlightBefore });
      entry.what += `, ${inFlightBefore} calls unanswered`;
    }
    faults.push(entry);
    const back = (async () => {
      await sleep(downMs);
      launch(m);
      await ready(m);
      entry.back = Date.now();
    })().catch((err: unknown) => void log(`${m.name} did not come back: ${(err as Error).message}`));
    restarts.push(back);
  };

  await at(0.08);
  await killBroker(cluster.nodes[0]!, Math.max(10_000, 0.06 * S));
  await at(0.13);
  await killRole(senders[0]!);
  await at(0.2);
  await killRole(trackers[0]!);
  await at(0.33);
  await brokerBack;
  const frozen = cluster.nodes[1]!;
  const freeze: FaultLog = { at: Date.now(), what: `SIGSTOP broker ${frozen.id} for ${FAULT_S} s` };
  faults.push(freeze);
  process.kill(frozen.pid, 'SIGSTOP');
  const thaw = sleep(F).then(() => {
    process.kill(frozen.pid, 'SIGCONT');
    freeze.back = Date.now();
  });
  restarts.push(thaw);
  await at(0.5);
  outage = { from: Date.now(), to: Date.now() + F };
  faults.push({ at: outage.from, what: `provider outage ${FAULT_S} s (every send answered 503)`, back: outage.to });
  await at(0.5, F / 4);
  await killRole(ingresses[0]!);
  await at(0.7);
  await thaw;
  await brokerBack;
  await Promise.all([killBroker(cluster.nodes[2]!, 10_000), killRole(trackers[1]!), killRole(senders[1]!)]);
  await Promise.all(restarts);
}

// ---------------------------------------------------------------------------------------------
// The figures.

const RANK: Record<string, number> = { accepted: 0, sent: 1, delivered: 2, read: 3 };
const AT_FIELD: Record<string, keyof StateValue> = { sent: 'sentAt', delivered: 'deliveredAt', read: 'readAt' };

function figures() {
  const acked = [...ackedWebhooks.keys()];
  const missingWebhooks = acked.filter((id) => !seenWebhooks.has(id)).length;
  const requestIds = [...acknowledgedRequests.keys()];
  let missingResults = 0;
  let missingResultsInKafka = 0;
  let notAccepted = 0;
  let exact = 0;
  let wrong = 0;
  let missingStates = 0;
  const wrongExamples: string[] = [];
  const missingExamples: string[] = [];
  const named = new Set<string>();
  for (const results_ of results.values()) for (const r of results_) if (r.messageId) named.add(r.messageId);
  let namesUnknownMessage = 0;
  for (const id of requestIds) {
    const list = results.get(id);
    if (!list || list.length === 0) {
      missingResults += 1;
      const inKafka = requestsInKafka.get(id);
      if (inKafka) missingResultsInKafka += 1;
      if (missingExamples.length < 5)
        missingExamples.push(
          `${id} (acknowledged at ${since(acknowledgedRequests.get(id)!)}, provider calls: ${callsByRequest.get(id)?.length ?? 0}, in send-requests at ${inKafka?.join(' ') ?? 'no offset'})`,
        );
      continue;
    }
    const accepted = list.find((r) => r.outcome === 'accepted');
    if (!accepted) {
      notAccepted += 1;
      continue;
    }
    const messageId = accepted.messageId!;
    if (!createdBy.has(messageId)) namesUnknownMessage += 1;
    const state = states.get(messageId);
    if (!state) {
      missingStates += 1;
      continue;
    }
    const ackedStatuses = statusAcked.get(messageId) ?? new Map<string, number>();
    const givenUp = statusGivenUp.get(messageId) ?? new Set<string>();
    let ok = state.requestId === id && state.acceptedAt !== null;
    let top = 0;
    for (const status of STATUSES) {
      const value = state[AT_FIELD[status]!] as string | null;
      const expected = ackedStatuses.get(status);
      if (expected !== undefined) ok &&= value !== null && Date.parse(value) === expected;
      else if (!givenUp.has(status)) ok &&= value === null;
      if (value !== null) top = Math.max(top, RANK[status]!);
    }
    ok &&= RANK[state.status] === top;
    if (ok) exact += 1;
    else {
      wrong += 1;
      if (wrongExamples.length < 5)
        wrongExamples.push(`${messageId}: ${JSON.stringify(state)} acked ${JSON.stringify([...ackedStatuses])}`);
    }
  }
  // Sent twice: the provider created two or more messages for one request id.
  const twice = [...callsByRequest].filter(([, list]) => list.length > 1);
  let twiceMaybeSent = 0;
  let unexplained = 0;
  const unexplainedExamples: string[] = [];
  const unexplainedIds = new Set<string>();
  let unexplainedSameProcess = 0;
  // Per killed sender generation: requests sent twice because of it, how many of their first
  // calls were still unanswered at the kill, and the longest time from such a call to the kill.
  const byKill = new Map<string, { count: number; unanswered: number; maxGapMs: number; over30s: number }>();
  for (const [id, list] of twice) {
    if ((results.get(id) ?? []).some((r) => r.maybeSent)) twiceMaybeSent += 1;
    // Explained: the member process that made the first call was later killed -9, before it had
    // recorded the call's outcome (else the ledger would have stopped the second call). A call
    // may reach this (busy) process after the kill: a dead process sends nothing, so it was sent
    // before, and it still counts as that generation's until the member restarts.
    const first = list[0]!;
    const m = members.find((x) => x.role === 'sender' && x.slot === first.slot)!;
    const killedAt = m.killed.get(first.generation);
    const second = list[1]!;
    // A second call by the same process before its death is its own retry, not the kill's doing;
    // a second call by another member while the first caller was still alive is a hand-over that
    // did not wait for the first outcome, whatever became of the first caller later.
    if (
      killedAt === undefined ||
      second.at < killedAt ||
      (second.slot === first.slot && second.generation === first.generation)
    ) {
      unexplained += 1;
      unexplainedIds.add(id);
      // The same process calling again is its own retry (a call it gave up on as timed out);
      // another member calling again is a hand-over that did not wait for the first outcome.
      if (second.slot === first.slot && second.generation === first.generation) unexplainedSameProcess += 1;
      if (unexplainedExamples.length < 5)
        unexplainedExamples.push(`${id}: ${list.map((c) => `m${c.slot}g${c.generation}@${since(c.at)}`).join(', ')}`);
      continue;
    }
    const key = `${m.name} generation ${first.generation}`;
    const k = byKill.get(key) ?? { count: 0, unanswered: 0, maxGapMs: 0, over30s: 0 };
    k.count += 1;
    if (killedAt - first.at > 30_000) k.over30s += 1;
    if (first.answeredAt === undefined || first.answeredAt > killedAt) k.unanswered += 1;
    k.maxGapMs = Math.max(k.maxGapMs, killedAt - first.at);
    byKill.set(key, k);
  }
  // Orphans: messages created for a request id that no result names any message of.
  let orphans = 0;
  let extraMessages = 0;
  for (const [id, list] of callsByRequest) {
    const anyNamed = list.some((c) => named.has(c.messageId));
    if (!anyNamed) orphans += list.length;
    else extraMessages += list.filter((c) => !named.has(c.messageId)).length;
    void id;
  }
  const againIds = new Set([...producedAgain, ...retriedProduce]);
  const againTwice = [...againIds].filter((id) => (callsByRequest.get(id)?.length ?? 0) > 1);
  const again = againTwice.length;
  const againUnexplained = againTwice.filter((id) => unexplainedIds.has(id)).length;
  const resultAt = new Map<string, number>();
  for (const list of results.values())
    for (const r of list) if (r.messageId && !resultAt.has(r.messageId)) resultAt.set(r.messageId, r.at);
  const beforeResult = statusAckAt.filter((s) => s.at < (resultAt.get(s.messageId) ?? Infinity)).length;
  return {
    acked: acked.length,
    missingWebhooks,
    requests: requestIds.length,
    missingResults,
    missingResultsInKafka,
    notAccepted,
    states: exact + wrong + missingStates,
    exact,
    wrong,
    missingStates,
    namesUnknownMessage,
    twice: twice.length,
    twiceMaybeSent,
    unexplained,
    orphans,
    extraMessages,
    producedAgain: againIds.size,
    unexplainedSameProcess,
    producedAgainTwice: again,
    producedAgainUnexplained: againUnexplained,
    byKill,
    beforeResult,
    wrongExamples,
    missingExamples,
    unexplainedExamples,
  };
}

// ---------------------------------------------------------------------------------------------

let cluster: LocalCluster | undefined;
let cleaningUp = false;
async function cleanup(): Promise<void> {
  if (cleaningUp) return;
  cleaningUp = true;
  for (const m of members) {
    m.stopping = true;
    m.child?.kill('SIGKILL');
  }
  await cluster?.stop().catch(() => undefined);
}
process.once('exit', () => {
  for (const m of members) if (m.child && m.child.exitCode === null) m.child.kill('SIGKILL');
});
for (const signal of ['SIGINT', 'SIGTERM'] as const)
  process.once(signal, () => {
    log(`${signal}: stopping every child`);
    void cleanup().finally(() => process.exit(130));
  });

async function main(): Promise<void> {
  log(`run ${RUN}: ${SECONDS} s at ${RATE} requests/s over ${RECIPIENTS} recipients; logs in ${LOGS}`);
  cluster = await startLocalCluster({ nodes: 3, heapMb: 384, partitions: 6, onProgress: (l) => log(`[kafka] ${l}`) });
  log(`cluster ${cluster.bootstrap} in ${cluster.startupMs} ms`);
  const common: Record<string, string> = {
    KAFKA_BROKERS: cluster.bootstrap,
    KAFKAJS_NO_PARTITIONER_WARNING: '1',
    MSGBRIDGE_BUSINESS_ID: BUSINESS.id,
    MSGBRIDGE_API_KEY: BUSINESS.apiKey,
    MSGBRIDGE_SIGNING_SECRET: BUSINESS.secret,
    MSGBRIDGE_LOG_LEVEL: 'info',
    MSGBRIDGE__kafka__partitions: '6',
    MSGBRIDGE__kafka__replicationFactor: '3',
    MSGBRIDGE__kafka__minInsyncReplicas: '2',
  };
  // The ingresses and the deliverer exist before the provider, which needs the deliverer.
  const placeholder = 'http://127.0.0.1:1';
  const ingresses = [await member('ingress', 0, common, placeholder), await member('ingress', 1, common, placeholder)];
  const deliver = new Deliverer(ingresses);
  const senders: Member[] = [];
  const fakeProvider = await startFakeProvider(senders, deliver);
  senders.push(await member('sender', 0, common, fakeProvider), await member('sender', 1, common, fakeProvider));
  const trackers = [await member('tracker', 0, common, fakeProvider), await member('tracker', 1, common, fakeProvider)];
  // One member of each role first (it creates its topics), then the others.
  for (const m of [trackers[0]!, senders[0]!, ingresses[0]!]) {
    launch(m);
    log(`${m.name} ready in ${await ready(m)} ms`);
  }
  for (const m of [trackers[1]!, senders[1]!, ingresses[1]!]) launch(m);
  for (const m of [trackers[1]!, senders[1]!, ingresses[1]!]) log(`${m.name} ready in ${await ready(m)} ms`);

  const kafka = new Kafka({
    clientId: 'campaign-checker',
    brokers: cluster.bootstrap.split(','),
    logLevel: logLevel.NOTHING,
    retry: { retries: 20 },
  });
  const reader = await startReader(kafka);

  const trafficStart = Date.now();
  const until = trafficStart + SECONDS * 1000;
  log(`traffic for ${SECONDS} s, the faults' clock starting now`);
  const progress = setInterval(() => {
    const f = figures();
    log(
      `requests ${f.requests} (produce failures ${produceFailures}${lastProduceError ? `: ${lastProduceError}` : ''}), results ${f.requests - f.missingResults}, calls ${calls.length} for ${callsByRequest.size} ids, webhooks acked ${f.acked} (pending ${deliver.pending}), seen by the reader: ${seenWebhooks.size} webhooks, results for ${results.size} ids, ${states.size} states`,
    );
  }, 15_000);
  const faultsDone = runFaults(trafficStart, cluster, ingresses, senders, trackers);
  await Promise.all([
    produceLoop(kafka, until, trafficStart + 0.13 * SECONDS * 1000 + 20_000),
    inboundLoop(deliver, until),
    faultsDone,
  ]);
  log('traffic over; waiting for the last webhooks, results and states');

  // Done when everything is in and checked, or when nothing has changed for 60 s, or at the drain deadline.
  const drainDeadline = Date.now() + DRAIN_S * 1000;
  let last = '';
  let lastChange = Date.now();
  for (;;) {
    await sleep(5000);
    const f = figures();
    const text = JSON.stringify(f);
    if (text !== last) {
      last = text;
      lastChange = Date.now();
    }
    const complete =
      deliver.pending === 0 &&
      f.missingWebhooks === 0 &&
      f.missingResults === 0 &&
      f.missingStates === 0 &&
      f.wrong === 0;
    if (complete && Date.now() - lastChange > 10_000) break;
    if (deliver.pending === 0 && Date.now() - lastChange > 60_000) break;
    if (Date.now() > drainDeadline) break;
    log(
      `draining: pending webhooks ${deliver.pending}, missing webhooks ${f.missingWebhooks}, missing results ${f.missingResults}, states missing ${f.missingStates} wrong ${f.wrong}`,
    );
  }
  clearInterval(progress);
  const drainedAt = Date.now();
  const f = figures();
  await reader.disconnect().catch(() => undefined);
  await deliver.close();
  for (const m of members) {
    m.stopping = true;
    m.child?.kill('SIGTERM');
  }
  // Their drain is bounded by drainGraceMs (20 s); past 30 s a member is killed.
  const hard = setTimeout(() => members.forEach((m) => m.child?.kill('SIGKILL')), 30_000);
  await Promise.all(
    members.map((m) =>
      m.child && m.child.exitCode === null && m.child.signalCode === null
        ? new Promise((r) => m.child!.once('exit', r))
        : undefined,
    ),
  );
  clearTimeout(hard);
  await cluster.stop();
  cluster = undefined;
  // The raw observations, to recompute or dig into any figure after the run.
  writeFileSync(
    join(LOGS, 'observations.json'),
    JSON.stringify({
      trafficStart,
      calls,
      results: [...results],
      kills: members.map((m) => ({ name: m.name, killed: [...m.killed] })),
      faults,
      acknowledgedRequests: [...acknowledgedRequests],
    }),
  );
  print(f, trafficStart, drainedAt);
}

function print(f: ReturnType<typeof figures>, trafficStart: number, drainedAt: number): void {
  const fmt = (n: number) => n.toLocaleString('en-US');
  // The provider's answer time as the provider saw it (it sleeps 30-120 ms): past that, this process was starved.
  const answer = calls
    .filter((c) => c.answeredAt !== undefined)
    .map((c) => c.answeredAt! - c.at)
    .sort((a, b) => a - b);
  const pct = (q: number) => answer[Math.min(answer.length - 1, Math.floor(q * answer.length))] ?? NaN;
  const perKill = senderKills.map((k) => `m${k.slot}: ${k.inFlight}`).join(', ');
  const out = [
    '',
    `Machine: ${cpus().length} × ${cpus()[0]?.model.trim()}, ${Math.round(totalmem() / 2 ** 30)} GiB, Node ${process.version}. Run ${RUN}: ${SECONDS} s of traffic at ${RATE} requests/s over ${RECIPIENTS} recipients, inbound ${INBOUND_RATE}/s; drained ${((drainedAt - trafficStart) / 1000 - SECONDS).toFixed(0)} s after it.`,
    '',
    '| check | figure | goal |',
    '|---|---|---|',
    `| acknowledged webhooks (statuses and inbound) / missing in Kafka | ${fmt(f.acked)} / **${fmt(f.missingWebhooks)}** | 0 missing |`,
    `| send requests acknowledged by Kafka / missing results | ${fmt(f.requests)} / **${fmt(f.missingResults)}** | 0 missing |`,
    `| … of which the request was read back from \`send-requests\` | ${fmt(f.missingResultsInKafka)} | |`,
    `| results other than accepted (rejected, expired) | ${fmt(f.notAccepted)} | 0 |`,
    `| message states exact / wrong / missing | ${fmt(f.exact)} / **${fmt(f.wrong)}** / **${fmt(f.missingStates)}** | 0 wrong, 0 missing |`,
    `| requests sent twice (the provider created 2 messages) / with \`maybeSent: true\` | ${fmt(f.twice)} / ${fmt(f.twiceMaybeSent)} | only calls in flight at a sender's kill -9, ≤ 20 per kill, all \`maybeSent\` |`,
    `| … of which not explained by a sender's kill -9 (second call by the same process / by another member) | **${fmt(f.unexplained)}** (${fmt(f.unexplainedSameProcess)} / ${fmt(f.unexplained - f.unexplainedSameProcess)}) | 0 |`,
    `| messages created whose request got no result naming one (orphans) | **${fmt(f.orphans)}** | 0 |`,
    `| request ids produced again (${fmt(producedAgain.size)} on purpose, the rest by a retried produce) / called twice / … not explained by a kill -9 | ${fmt(f.producedAgain)} / ${fmt(f.producedAgainTwice)} / **${fmt(f.producedAgainUnexplained)}** | one call each |`,
    '',
    `Provider answer time as the fake provider measured it (it waits 30-120 ms): p50 ${pct(0.5)} ms, p99 ${pct(0.99)} ms, max ${answer.at(-1) ?? NaN} ms; calls never answered (the caller gone): ${calls.length - answer.length}.`,
    '',
    `Send requests Kafka never acknowledged (given up 3 min after the traffic): ${unacknowledgedRequests}; produce attempts failed or timed out: ${produceFailures}. Provider calls: ${fmt(calls.length)} created a message, ${fmt(refusedDuringOutage)} refused during the outage, ${badCalls} malformed; second messages of requests sent twice: ${fmt(f.extraMessages)}; results naming a message the provider never created: ${f.namesUnknownMessage}. Status webhooks ${fmt(statusWebhooks)} (+${fmt(duplicatedWebhooks)} duplicated), ${fmt(f.beforeResult)} acknowledged before their message's result; inbound acknowledged ${fmt(inboundAcked)}; webhooks given up after 2 min of retries: ${webhooksGivenUp}. Roles that exited on their own: ${
      members
        .filter((m) => m.unexpectedExits > 0)
        .map((m) => `${m.name} ×${m.unexpectedExits}`)
        .join(', ') || 'none'
    }; reader crashes: ${readerCrashes}.`,
    '',
    `Sent twice, per sender kill -9: ${[...f.byKill].map(([k, v]) => `${k}: ${v.count} (${v.unanswered} of their first calls unanswered at the kill, the others answered but their outcome not yet recorded; first call up to ${(v.maxGapMs / 1000).toFixed(1)} s before the kill, ${v.over30s} more than 30 s before)`).join('; ') || 'none'}. Calls unanswered at each kill: ${perKill}.`,
    '',
    'Faults (from the start of the traffic):',
    ...faults.map(
      (x) => `- ${since2(x.at, trafficStart)} ${x.what}${x.back ? `; back at ${since2(x.back, trafficStart)}` : ''}`,
    ),
  ];
  if (f.missingExamples.length > 0)
    out.push('', 'Requests without a result (first 5):', ...f.missingExamples.map((x) => `- ${x}`));
  if (f.wrongExamples.length > 0) out.push('', 'Wrong states (first 5):', ...f.wrongExamples.map((x) => `- ${x}`));
  if (f.unexplainedExamples.length > 0)
    out.push(
      '',
      'Sent twice, not explained (first 5; calls as m<member>g<generation>@time):',
      ...f.unexplainedExamples.map((x) => `- ${x}`),
    );
  process.stdout.write(`${out.join('\n')}\n`);
}

function since2(at: number, start: number): string {
  return `t+${((at - start) / 1000).toFixed(1)} s`;
}

main().then(
  () => process.exit(0),
  async (err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    await cleanup();
    process.exit(1);
  },
);
