// A customer's conversation at 1,000,000 messages of history (issue 37): do the recipient search
// and the thread keep their p99 under 20 ms?
//
// H message states, sent to C customers (half of them written without their +), are loaded
// straight into message-state, and I inbound messages of the same customers into
// inbound-messages (each in the partition of its customer's task), as the tracker writes them;
// one customer is heavy (1% of the history and of the inbound messages). Then `msgbridge tracker`
// (dist/cli.js, its own process, default configuration) starts, and once the indexes of its bulk
// restore are built it is asked --queries times each, one query at a time, with a read token, in
// --rounds rounds (each figure: the median over the rounds of that round's percentile):
//   - GET /messages?recipient=<customer, either form>&limit=20   the recipient search
//   - GET /thread?customer=<customer, either form>&limit=20      the conversation, first page
//   - GET /thread?customer=<heavy>&before=<next>                 a later page of the heavy one
// p50 / p99 of each, beside GET /me (the same HTTP round trip and credential check, no
// store read: the floor the machine gives any query at that moment). Then, the member stopped,
// the same queries in this process on its stores (TaskStore, TrackerLogic, QueryService.route:
// the tracker's code without HTTP and another process to schedule). With --members 2 a second member joins, and the
// same queries are asked of the first again: the thread then asks the other member for its part of the recipient's
// messages, and the owner of the customer's task for the inbound messages.
//
//   npm run build && node --import tsx bench/tracker-conversation.ts [--history 1000000] [--customers 100000]
//   [--inbound 300000] [--queries 1000] [--rounds 5] [--members 2]
// KAFKA_BROKERS=host:port uses an existing Kafka; otherwise the embedded local broker starts.
import '../src/kafka/kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed (src/kafka/README.md)
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomUUID } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import os, { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel, type Message } from 'kafkajs';
import { loadConfig } from '../src/config/load.js';
import { canonicalCustomerId } from '../src/contracts/index.js';
import { startLocalBroker, type LocalBroker } from '../src/local-kafka/local-broker.js';
import { javaCompatibleHash } from '../src/kafka/partitioner.js';
import { ensureTopics } from '../src/kafka/topics.js';
import { changelogTopicConfig } from '../src/tracker/index.js';
import { QueryService } from '../src/tracker/query-service.js';
import { TaskStore, taskStoreDir } from '../src/tracker/state-store.js';
import { TrackerLogic } from '../src/tracker/tracker-logic.js';
import { trackerTopics } from '../src/tracker/tracker-topics.js';
import { benchArgs } from './args.js';

const args = benchArgs(import.meta.url, {
  history: { type: 'string', default: '1000000' },
  customers: { type: 'string', default: '100000' },
  inbound: { type: 'string', default: '300000' },
  queries: { type: 'string', default: '1000' },
  rounds: { type: 'string', default: '5' },
  members: { type: 'string', default: '1' },
});
const H = args.wholeNumber('history', 1);
const C = args.wholeNumber('customers', 2);
const I = args.wholeNumber('inbound', 0);
const QUERIES = args.wholeNumber('queries', 1);
const ROUNDS = args.wholeNumber('rounds', 1);
const MEMBERS = args.wholeNumber('members', 1);
if (MEMBERS > 2) args.fail('--members is 1 or 2');
const PARTITIONS = 12;
const CLI = join(import.meta.dirname, '..', 'dist', 'cli.js');
if (!existsSync(CLI)) throw new Error('run `npm run build` first: the tracker under test is dist/cli.js');

let local: LocalBroker | undefined;
const brokers = process.env.KAFKA_BROKERS
  ? process.env.KAFKA_BROKERS.split(',')
  : [(local = await startLocalBroker({ heapMb: 1024, partitions: PARTITIONS })).bootstrap];
const kafka = new Kafka({ clientId: 'bench-tracker-conversation', brokers, logLevel: logLevel.NOTHING });
const admin = kafka.admin();
await admin.connect();

const TOKEN = `bench-${randomUUID()}`;
const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');
const pct = (xs: number[], p: number) =>
  [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const DAY = 86_400_000;
const NOW = Date.now();

/** Customer k: +1555… for even k, the same digits without + for odd k (the two forms the provider writes). */
const customerOf = (k: number) => `${k % 2 === 0 ? '+' : ''}1555${String(k).padStart(7, '0')}`;
/** The customer of history entry i: the heavy one (k = 0) for 1 in 100, else spread over the others. */
const customerIndex = (i: number) => (i % 100 === 0 ? 0 : 1 + (i % (C - 1)));

/** Records into a topic, in chunks, a few requests in flight (acks=1: loading, not measuring). */
async function load(topic: string, count: number, record: (i: number) => Message): Promise<void> {
  const producer = kafka.producer({ allowAutoTopicCreation: false });
  await producer.connect();
  const inFlight: Promise<unknown>[] = [];
  for (let from = 0; from < count; from += 4000) {
    const messages: Message[] = [];
    for (let i = from; i < Math.min(count, from + 4000); i++) messages.push(record(i));
    inFlight.push(producer.send({ topic, messages, acks: 1 }));
    if (inFlight.length >= 6) await inFlight.shift();
  }
  await Promise.all(inFlight);
  await producer.disconnect();
}

const messageId = (i: number) => `01CONV${i.toString(36).toUpperCase().padStart(20, '0')}`;
function stateRecord(i: number): Message {
  const id = messageId(i);
  const at = new Date(NOW - ((i * 7919) % (20 * DAY))).toISOString();
  const state = {
    messageId: id,
    requestId: `conv-${i}`,
    businessId: 'biz_1',
    recipient: customerOf(customerIndex(i)),
    type: 'text',
    status: 'delivered',
    acceptedAt: at,
    sentAt: at,
    deliveredAt: at,
    readAt: null,
    failedAt: null,
    error: null,
    events: 3,
    updatedAt: at,
    send: {
      attempts: 1,
      maybeSent: false,
      requestedType: 'text',
      content: { text: `Your order ${i} shipped and arrives tomorrow between 9 and 12.` },
      channel: 'whatsapp',
    },
    eventIds: [sha256(`a${i}`), sha256(`s${i}`), sha256(`d${i}`)],
  };
  return {
    key: id,
    value: JSON.stringify(state),
    partition: javaCompatibleHash(Buffer.from(id)) % PARTITIONS,
    headers: {
      'event-id': sha256(`st${i}`),
      'business-id': 'biz_1',
      'content-type': 'application/json',
      schema: 'message-state/v1',
    },
  };
}

function inboundRecord(i: number): Message {
  const eventId = sha256(`in${i}`);
  const from = customerOf(customerIndex(i)).replace(/^\+/, '');
  const customer = canonicalCustomerId(from);
  const at = new Date(NOW - ((i * 104729) % (20 * DAY)) - 1000).toISOString();
  const value = {
    eventId,
    businessId: 'biz_1',
    customer,
    from,
    name: null,
    channel: 'whatsapp',
    at: new Date(Math.floor(Date.parse(at) / 1000) * 1000).toISOString(),
    text: i % 10 === 0 ? 'Yes' : `Where is order ${i}? It was due yesterday.`,
    button: i % 10 === 0 ? { payload: `confirm-${i}` } : null,
    attachments: [],
    truncated: false,
    recordedAt: at,
  };
  return {
    key: eventId,
    value: JSON.stringify(value),
    // The partition of the customer's task: where the tracker writes and restores it.
    partition: javaCompatibleHash(Buffer.from(customer)) % PARTITIONS,
    headers: {
      'event-id': sha256(`inbound-message\n${eventId}`),
      'business-id': 'biz_1',
      'content-type': 'application/json',
      schema: 'inbound-message-record/v1',
    },
  };
}

interface Proc {
  child: ChildProcess;
  url: Promise<string>;
  lines: string[];
}

function startTracker(env: Record<string, string>): Proc {
  const child = spawn(process.execPath, [CLI, 'tracker'], {
    env: { ...process.env, ...env, MSGBRIDGE_LOG_LEVEL: 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines: string[] = [];
  let resolveUrl: (url: string) => void = () => {};
  const url = new Promise<string>((r) => (resolveUrl = r));
  let rest = '';
  const onData = (d: Buffer) => {
    const parts = (rest + d.toString()).split('\n');
    rest = parts.pop()!;
    for (const line of parts) {
      if (line.includes('indexes built') || line.includes('restored in bulk') || line.includes('"level":50'))
        lines.push(line);
      const m = /"url":"(http[^"]+)"/.exec(line);
      if (m) resolveUrl(m[1]!);
    }
  };
  child.stdout!.on('data', onData);
  child.stderr!.on('data', onData);
  return { child, url, lines };
}

/** Until the member answers ready and every task it restored in bulk has its indexes. */
async function settled(proc: Proc): Promise<void> {
  const url = await proc.url;
  for (;;) {
    const ready = await fetch(`${url}/readyz`).then(
      (r) => r.ok,
      () => false,
    );
    const bulk = proc.lines.filter((l) => l.includes('restored in bulk')).length;
    if (ready && bulk > 0 && proc.lines.filter((l) => l.includes('indexes built')).length >= bulk) return;
    if (proc.child.exitCode !== null) throw new Error(`the tracker exited: ${proc.lines.join('\n')}`);
    await sleep(200);
  }
}

async function stop(proc: Proc): Promise<void> {
  proc.child.kill('SIGTERM');
  await new Promise((r) => proc.child.once('exit', r));
}

const id = randomUUID().slice(0, 8);
const t = {
  results: `bc-results-${id}`,
  status: `bc-status-${id}`,
  messages: `bc-messages-${id}`,
  state: `bc-state-${id}`,
  conv: `bc-conv-${id}`,
  outcomes: `bc-outcomes-${id}`,
  inbound: `bc-inbound-${id}`,
};
const stateDir = join(tmpdir(), `bench-conversation-${id}`);
const env = {
  KAFKA_BROKERS: brokers.join(','),
  MSGBRIDGE__kafka__topics__sendResults: t.results,
  MSGBRIDGE__kafka__topics__deliveryStatus: t.status,
  MSGBRIDGE__kafka__topics__messages: t.messages,
  MSGBRIDGE__kafka__topics__messageState: t.state,
  MSGBRIDGE__kafka__topics__conversations: t.conv,
  MSGBRIDGE__kafka__topics__requestOutcomes: t.outcomes,
  MSGBRIDGE__kafka__topics__inboundMessages: t.inbound,
  MSGBRIDGE__kafka__partitions: String(PARTITIONS),
  MSGBRIDGE__kafka__replicationFactor: '1',
  MSGBRIDGE__tracker__groupId: `bc-${id}`,
  MSGBRIDGE__tracker__transactionalIdPrefix: `bc-${id}`,
  MSGBRIDGE__tracker__host: '127.0.0.1',
  MSGBRIDGE_TRACKER_PORT: '0',
  MSGBRIDGE_TRACKER_STATE_DIR: stateDir,
  MSGBRIDGE__tracker__accessTokens: JSON.stringify([{ name: 'bench', role: 'read', sha256: sha256(TOKEN) }]),
};
const config = loadConfig({ env });
await ensureTopics(admin, [
  ...[t.results, t.status, t.messages].map((topic) => ({ topic, partitions: PARTITIONS, replicationFactor: 1 })),
  ...[t.state, t.outcomes, t.inbound].map((topic) => ({
    topic,
    partitions: PARTITIONS,
    replicationFactor: 1,
    configEntries: changelogTopicConfig(config, 'messageState'),
  })),
  {
    topic: t.conv,
    partitions: PARTITIONS,
    replicationFactor: 1,
    configEntries: changelogTopicConfig(config, 'conversations'),
  },
]);
let began = performance.now();
await load(t.state, H, stateRecord);
await load(t.inbound, I, inboundRecord);
console.error(
  `history: ${H} states and ${I} inbound messages of ${C} customers loaded in ${((performance.now() - began) / 1000).toFixed(1)} s`,
);

began = performance.now();
const first = startTracker(env);
await settled(first);
console.error(
  `one member ready and indexed ${((performance.now() - began) / 1000).toFixed(1)} s after its start (bulk restore of every task)`,
);

const headers = { authorization: `Bearer ${TOKEN}` };
/** A query over HTTP (base), or in this process (the route of a QueryService on the stores). */
type Ask = (path: string) => Promise<{ status: number; body: unknown }>;
const overHttp =
  (base: string): Ask =>
  async (path) => {
    const res = await fetch(`${base}${path}`, { headers });
    return { status: res.status, body: await res.json() };
  };
/**
 * Wall time, and the CPU time this process spent (in process: the query's own cost, whatever else the machine runs).
 */
async function timed(ask: Ask, path: string): Promise<{ ms: number; cpuMs: number; body: Record<string, unknown> }> {
  for (;;) {
    const cpu = process.cpuUsage();
    const started = performance.now();
    const { status, body } = await ask(path);
    const ms = performance.now() - started;
    const used = process.cpuUsage(cpu);
    // A rebalance (a member that missed its heartbeats on a busy machine) answers 503 "ask again": asked again,
    // counted.
    if (status === 503) {
      unavailable++;
      await sleep(200);
      continue;
    }
    if (status !== 200) throw new Error(`${path}: ${status} ${JSON.stringify(body)}`);
    return { ms, cpuMs: (used.user + used.system) / 1000, body: body as Record<string, unknown> };
  }
}
/** Queries answered 503 while the group rebalanced, asked again (not in the figures). */
let unavailable = 0;

/** The three queries, QUERIES times each, one at a time; answers checked (not empty, either form). */
async function measureRound(base: Ask, floor: string): Promise<Record<string, number[]>> {
  const times: Record<string, number[]> = {
    floor: [],
    search: [],
    thread: [],
    later: [],
    searchCpu: [],
    threadCpu: [],
    laterCpu: [],
  };
  // Warm the connection and the heavy customer's first page (its cursor for the later pages).
  const heavy = await timed(base, `/thread?customer=${encodeURIComponent(customerOf(0))}&limit=20`);
  let cursor = heavy.body.next as string;
  for (let q = 0; q < QUERIES; q++) {
    times.floor!.push((await timed(base, floor)).ms);
    const k = 1 + Math.floor(Math.random() * (C - 1));
    // Asked in the other form than the one the history wrote: one customer either way.
    const asked = encodeURIComponent(k % 2 === 0 ? customerOf(k).slice(1) : `+${customerOf(k)}`);
    const search = await timed(base, `/messages?recipient=${asked}&limit=20`);
    if ((search.body.messages as unknown[]).length === 0) throw new Error(`no message found for customer ${k}`);
    times.search!.push(search.ms);
    times.searchCpu!.push(search.cpuMs);
    const thread = await timed(base, `/thread?customer=${asked}&limit=20`);
    if ((thread.body.items as unknown[]).length === 0) throw new Error(`no conversation for customer ${k}`);
    times.thread!.push(thread.ms);
    times.threadCpu!.push(thread.cpuMs);
    const later = await timed(base, `/thread?customer=${encodeURIComponent(customerOf(0))}&limit=20&before=${cursor}`);
    times.later!.push(later.ms);
    times.laterCpu!.push(later.cpuMs);
    cursor = (later.body.next as string | null) ?? (heavy.body.next as string);
  }
  return times;
}

/**
 * ROUNDS rounds: each figure is the median over the rounds of that round's percentile (a burst of the machine's other
 * load moves one round, not the figure).
 */
async function measure(base: Ask, floor: string): Promise<Record<string, number[]>[]> {
  const rounds: Record<string, number[]>[] = [];
  for (let r = 0; r < ROUNDS; r++) rounds.push(await measureRound(base, floor));
  return rounds;
}

const median = (xs: number[]) => pct(xs, 50);
const rows: string[] = [];
const report = (members: string, rounds: Record<string, number[]>[], withCpu = false) => {
  const of = (kind: string, p: number) => rounds.map((r) => pct(r[kind]!, p));
  const cell = (kind: string) => {
    const p99s = of(kind, 99);
    const cpu =
      withCpu && rounds[0]![`${kind}Cpu`]
        ? ` (CPU ${median(of(`${kind}Cpu`, 50)).toFixed(2)} / ${median(of(`${kind}Cpu`, 99)).toFixed(2)} ms)`
        : '';
    return `${median(of(kind, 50)).toFixed(1)} / **${median(p99s).toFixed(1)}** ms (p99 ${Math.min(...p99s).toFixed(1)}–${Math.max(...p99s).toFixed(1)})${cpu}`;
  };
  const row = `| ${H.toLocaleString('en')} | ${I.toLocaleString('en')} | ${members} | ${cell('search')} | ${cell('thread')} | ${cell('later')} | ${cell('floor')} | ${os.loadavg()[0]!.toFixed(1)} |`;
  console.error(`${row}${unavailable > 0 ? ` (${unavailable} answers 503 during a rebalance, asked again)` : ''}`);
  rows.push(row);
  unavailable = 0;
};
const base = await first.url;
report('1, over HTTP', await measure(overHttp(base), '/me'));

if (MEMBERS === 2) {
  const second = startTracker({ ...env, MSGBRIDGE_TRACKER_STATE_DIR: `${stateDir}-b` });
  await settled(second);
  // The first member gave tasks away: wait until it answers ready again.
  while (
    !(await fetch(`${base}/readyz`).then(
      (r) => r.ok,
      () => false,
    ))
  )
    await sleep(200);
  report('2, over HTTP, asked of the first', await measure(overHttp(base), '/me'));
  await stop(second);
  rmSync(`${stateDir}-b`, { recursive: true, force: true });
}

await stop(first);

// The same queries in this process, on the first member's stores (every task; indexes built).
{
  const topics = trackerTopics(config);
  const clusterId = (await admin.describeCluster()).clusterId;
  const logic = new TrackerLogic({
    topics,
    partitions: PARTITIONS,
    maxCachedMessages: 1000,
    maxCachedConversations: 1000,
    counters: { event() {}, skipped() {}, evicted() {} },
  });
  const stores: TaskStore[] = [];
  for (let task = 0; task < PARTITIONS; task++) {
    const store = TaskStore.open(taskStoreDir(stateDir, config.tracker.groupId, task), {
      clusterId,
      task,
      partitions: PARTITIONS,
      messageStateTopic: topics.messageState,
      conversationsTopic: topics.conversations,
      requestOutcomesTopic: topics.requestOutcomes,
      inboundMessagesTopic: topics.inboundMessages,
    });
    if (!store.indexesComplete()) throw new Error(`the store of task ${task} has no complete indexes`);
    stores.push(store);
    logic.startTask(task, store);
  }
  const queries = new QueryService(logic, 5000);
  const self = 'http://in-process';
  const all = new Map(stores.map((_, task) => [task, self]));
  queries.attach(
    { ownedTasks: () => [...all.keys()] },
    { owners: async () => all, members: async () => [self], invalidate() {} },
    self,
    async () => {},
  );
  const inProcess: Ask = async (path) => {
    const url = new URL(path, self);
    const answer = await queries.route(url.pathname, url.searchParams, {});
    return answer ?? { status: 404, body: { path } };
  };
  // The floor: a lookup by message id (one task, one store read).
  report('1, in process (no HTTP)', await measure(inProcess, `/messages/${messageId(H - 1)}`), true);
  for (const store of stores) await store.close();
}
rmSync(stateDir, { recursive: true, force: true });
await admin.deleteTopics({ topics: Object.values(t) }).catch(() => undefined);
await admin.disconnect();
await local?.stop();
console.log(
  `\n| history (states) | inbound messages | members | GET /messages?recipient= p50 / p99 | GET /thread, first page, p50 / p99 | GET /thread of the heavy customer, a later page, p50 / p99 | floor: GET /me (HTTP, no store read) or GET /messages/{id} (in process), p50 / p99 | load average (1 min) after |\n|---|---|---|---|---|---|---|---|\n${rows.join('\n')}`,
);
process.exit(0);
