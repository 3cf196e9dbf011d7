import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { loadConfig, type DeepPartial } from '../../src/config/load.js';
import type { Config } from '../../src/config/schema.js';
import { createLogger, silentLogger, type Logger } from '../../src/platform/logger.js';
import { startSender, type Sender, type StartSenderOptions } from '../../src/sender/index.js';
import {
  startSimulator,
  type RunningSimulator,
  type SendRecord,
  type SimulatorOptions,
} from '../../src/simulator/index.js';
import { ensureTopics } from '../../src/kafka/topics.js';
import { kafkaBrokers, testKafka, uniqueTopic, withAdmin, type ReadRecord } from '../helpers/kafka.js';
import { headersToStrings as decodeHeaders } from '../../src/kafka/headers.js';

/** A client that rides out a busy broker (new topics whose leaders are still settling). */
export function patientKafka(clientId: string, brokers?: string[]) {
  return testKafka(clientId, brokers, { retries: 10, initialRetryTime: 200, maxRetryTime: 3000 });
}

export const BIZ = { id: 'biz_1', apiKey: 'key-biz-1', signingSecret: 'secret-biz-1' };
export const BIZ2 = { id: 'biz_2', apiKey: 'key-biz-2', signingSecret: 'secret-biz-2' };

export const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export function senderTopics() {
  return {
    messages: uniqueTopic('messages'),
    deliveryStatus: uniqueTopic('status'),
    webhooksDlq: uniqueTopic('wdlq'),
    sendRequests: uniqueTopic('send-requests'),
    sendResults: uniqueTopic('send-results'),
    sendRequestsDlq: uniqueTopic('send-dlq'),
    sendLedger: uniqueTopic('send-ledger'),
    /**
     * Not created by the fixture: the tests of the conversation window guard create it (compacted) when they need it.
     */
    conversations: uniqueTopic('conversations'),
    requestOutcomes: uniqueTopic('request-outcomes'),
    inboundMessages: uniqueTopic('inbound-messages'),
  };
}

/** Logs to stderr with MSGBRIDGE_TEST_LOG=debug (or info...), silent otherwise. */
export function testLogger(name: string): Logger {
  const level = process.env.MSGBRIDGE_TEST_LOG;
  if (!level) return silentLogger;
  return createLogger({
    level,
    name,
    destination: new Writable({
      write(chunk, _e, done) {
        process.stderr.write(chunk);
        done();
      },
    }),
  });
}

export interface Fixture {
  topics: ReturnType<typeof senderTopics>;
  simulator: RunningSimulator;
  config: Config;
  groupId: string;
  /** Starts a sender in this process (several may share the group). */
  start(options?: Partial<StartSenderOptions>): Promise<Sender>;
  /** Environment for `msgbridge sender` in a child process, equivalent to `config`. */
  env(): Record<string, string>;
  close(): Promise<void>;
}

/**
 * A simulator on port 0 and unique topics on the suite's Kafka; senders on demand. Topics are
 * created up front with `partitions` partitions (the sender itself does not create them).
 */
export async function fixture(
  options: {
    partitions?: number;
    businesses?: { id: string; apiKey: string; signingSecret: string }[];
    /** API keys the sender uses, when they should differ from the simulator's. */
    senderApiKeys?: Record<string, string>;
    sender?: DeepPartial<Config['sender']>;
    simulator?: Partial<SimulatorOptions>;
    /** Send to this provider instead of the simulator (which still runs, idle). */
    providerUrl?: string;
    kafka?: DeepPartial<Config['kafka']>;
    /** A broker of the test's own instead of the suite's. */
    brokers?: string[];
  } = {},
): Promise<Fixture> {
  const topics = senderTopics();
  const partitions = options.partitions ?? 3;
  const brokers = options.brokers ?? kafkaBrokers();
  // ensureTopics waits until every partition has a leader (kafkajs's own wait gives up on a busy broker).
  await withAdmin(
    (admin) =>
      ensureTopics(
        admin,
        [topics.sendRequests, topics.sendResults, topics.sendRequestsDlq, topics.sendLedger].map((topic) => ({
          topic,
          partitions,
          replicationFactor: 1,
          ...(topic === topics.sendLedger
            ? { configEntries: [{ name: 'cleanup.policy', value: 'compact,delete' }] }
            : {}),
        })),
      ),
    brokers,
  );
  const businesses = options.businesses ?? [BIZ];
  const simulator = await startSimulator({
    host: '127.0.0.1',
    port: 0,
    businesses,
    history: { sends: 100_000, messages: 100_000 },
    lifecycle: { sentDelayMs: 10, deliveredDelayMs: 10, readDelayMs: 10 },
    logger: testLogger('simulator'),
    ...options.simulator,
  });
  const groupId = `sender-${randomUUID().slice(0, 8)}`;
  const sender = {
    groupId,
    adminPort: 0,
    adminHost: '127.0.0.1',
    backoffInitialMs: 20,
    backoffMaxMs: 200,
    drainGraceMs: 15_000,
    stateDir: mkdtempSync(join(tmpdir(), 'msgbridge-sender-state-')),
    ...options.sender,
  };
  const config = loadConfig({
    env: {},
    overrides: {
      kafka: { brokers, topics, createTopics: false, partitions, replicationFactor: 1, ...options.kafka },
      businesses: businesses.map((b) => ({
        id: b.id,
        signingSecrets: [b.signingSecret],
        apiKey: options.senderApiKeys?.[b.id] ?? b.apiKey,
      })),
      provider: { url: options.providerUrl ?? simulator.url },
      sender,
      log: { level: 'info' },
    },
  });
  const running: Sender[] = [];
  // Members running together each have a state directory of their own, as on their own machines
  // (one process must not open an LMDB environment twice); a member that drained leaves its
  // directory to the next start, which then restores from it as a restart would.
  const freeStateDirs = [sender.stateDir];
  return {
    topics,
    simulator,
    config,
    groupId,
    async start(startOptions = {}) {
      const stateDir = freeStateDirs.pop() ?? mkdtempSync(join(tmpdir(), 'msgbridge-sender-state-'));
      const s = await startSender({
        config: { ...config, sender: { ...config.sender, stateDir } },
        brokers,
        logger: testLogger('sender'),
        admin: false,
        ...startOptions,
      });
      const drain = s.drain.bind(s);
      let released = false;
      s.drain = async () => {
        const finished = await drain();
        if (!released) freeStateDirs.push(stateDir);
        released = true;
        return finished;
      };
      running.push(s);
      return s;
    },
    env() {
      const env: Record<string, string> = {
        KAFKA_BROKERS: brokers.join(','),
        MSGBRIDGE_PROVIDER_URL: options.providerUrl ?? simulator.url,
        MSGBRIDGE_LOG_LEVEL: process.env.MSGBRIDGE_TEST_LOG ?? 'warn',
        MSGBRIDGE__kafka__topics: JSON.stringify(config.kafka.topics),
        MSGBRIDGE__kafka__createTopics: 'false',
        MSGBRIDGE__sender: JSON.stringify(config.sender),
      };
      if (businesses.length === 1) {
        env.MSGBRIDGE_BUSINESS_ID = businesses[0]!.id;
        env.MSGBRIDGE_API_KEY = config.businesses[0]!.apiKey!;
      } else {
        env.MSGBRIDGE__businesses = JSON.stringify(config.businesses);
      }
      return env;
    },
    async close() {
      await Promise.all(running.map((s) => s.drain().catch(() => undefined)));
      await simulator.close();
    },
  };
}

export interface RequestSpec {
  key?: string | null;
  value: string | Buffer | Record<string, unknown>;
  headers?: Record<string, string>;
  partition?: number;
  /** Record timestamp (ms); default now. */
  timestamp?: number;
}

/** Produces requests in order, each exactly once (idempotent producer, acks=all). */
export async function produceRequests(topic: string, requests: RequestSpec[], brokers?: string[]): Promise<void> {
  const producer = patientKafka('sender-test-producer', brokers).producer({
    allowAutoTopicCreation: false,
    idempotent: true,
    maxInFlightRequests: 1,
  });
  await producer.connect();
  try {
    for (let i = 0; i < requests.length; i += 1000) {
      await producer.send({
        topic,
        acks: -1,
        messages: requests.slice(i, i + 1000).map((r) => ({
          key: r.key ?? null,
          value: typeof r.value === 'string' || Buffer.isBuffer(r.value) ? r.value : JSON.stringify(r.value),
          headers: r.headers,
          partition: r.partition,
          timestamp: r.timestamp === undefined ? undefined : String(r.timestamp),
        })),
      });
    }
  } finally {
    await producer.disconnect();
  }
}

export function textRequest(
  requestId: string,
  recipient: string,
  text: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    requestId,
    type: 'text',
    recipient: { channelType: 'whatsapp', id: recipient },
    message: { text },
    ...extra,
  };
}

export function templateRequest(
  requestId: string,
  number: string,
  extra: Record<string, unknown> = {},
): Record<string, unknown> {
  return {
    requestId,
    type: 'template',
    number,
    templateName: 'order_update',
    parameters: [{ name: 'order', value: '42' }],
    ...extra,
  };
}

export interface Collector {
  /** With `at`: when the collector read it (ms). */
  records: (ReadRecord & { at: number })[];
  /** Parsed JSON values. */
  values(): Record<string, unknown>[];
  waitFor(predicate: (records: ReadRecord[]) => boolean, timeoutMs?: number, what?: string): Promise<ReadRecord[]>;
  stop(): Promise<void>;
}

/** Reads a topic from the beginning, continuously, until stopped. */
export async function collect(topic: string, brokers?: string[]): Promise<Collector> {
  const consumer = patientKafka('sender-test-collector', brokers).consumer({
    groupId: `collector-${randomUUID()}`,
    maxWaitTimeInMs: 100,
  });
  const records: (ReadRecord & { at: number })[] = [];
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ topic: t, partition, message }) => {
      records.push({
        topic: t,
        partition,
        offset: message.offset,
        key: message.key?.toString() ?? null,
        value: message.value ?? Buffer.alloc(0),
        headers: decodeHeaders(message.headers),
        at: Date.now(),
      });
    },
  });
  return {
    records,
    values: () => records.map((r) => JSON.parse(r.value.toString()) as Record<string, unknown>),
    waitFor: (predicate, timeoutMs = 30_000, what = 'records') =>
      waitUntil(
        () => predicate(records),
        timeoutMs,
        () => `${what}: saw ${records.length} on ${topic}`,
      ).then(() => records),
    stop: () => consumer.disconnect(),
  };
}

export async function waitUntil(
  condition: () => boolean,
  timeoutMs: number,
  describe: () => string = () => 'condition',
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${describe()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The group's committed offsets per partition (-1 when none). */
export async function committedOffsets(
  groupId: string,
  topic: string,
  brokers?: string[],
): Promise<Map<number, { offset: number; metadata: string | null }>> {
  return withAdmin(async (admin) => {
    const [entry] = await admin.fetchOffsets({ groupId, topics: [topic] });
    return new Map(
      (entry?.partitions ?? []).map((p) => [p.partition, { offset: Number(p.offset), metadata: p.metadata }]),
    );
  }, brokers);
}

export async function endOffsets(topic: string, brokers?: string[]): Promise<Map<number, number>> {
  return withAdmin(
    async (admin) => new Map((await admin.fetchTopicOffsets(topic)).map((p) => [p.partition, Number(p.high)])),
    brokers,
  );
}

/** The `callbackData` the tests put in every request, as the provider received it. */
export function sentRequestId(send: SendRecord): string | undefined {
  const body = send.body as { callbackData?: unknown } | null;
  return typeof body?.callbackData === 'string' ? body.callbackData : undefined;
}

export function recipientOf(send: SendRecord): string | undefined {
  const body = send.body as { recipient?: { id?: string }; number?: string } | null;
  return body?.recipient?.id ?? body?.number;
}

export interface ChildSender {
  child: ChildProcess;
  output(): string;
  exited: Promise<number | null>;
  waitForOutput(pattern: RegExp, timeoutMs?: number): Promise<void>;
}

/** `msgbridge sender` in a child process (through tsx, as a user would run it from a checkout). */
export function spawnSender(env: Record<string, string>): ChildSender {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'sender'], {
    cwd: ROOT,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => {
    out += d.toString();
    if (process.env.MSGBRIDGE_TEST_LOG) process.stderr.write(d);
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return {
    child,
    output: () => out,
    exited,
    waitForOutput: (pattern, timeoutMs = 60_000) =>
      waitUntil(
        () => pattern.test(out) || child.exitCode !== null,
        timeoutMs,
        () => `${pattern} in the sender output:\n${out}`,
      ).then(() => {
        if (!pattern.test(out))
          throw new Error(`the sender exited (${child.exitCode}) before printing ${pattern}:\n${out}`);
      }),
  };
}
