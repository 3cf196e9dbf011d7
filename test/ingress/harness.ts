import { connect, type Socket } from 'node:net';
import { Writable } from 'node:stream';
import { Pool } from 'undici';
import { loadConfig, type DeepPartial } from '../../src/config/load.js';
import type { Config } from '../../src/config/schema.js';
import { startIngress, type Ingress, type StartIngressOptions } from '../../src/ingress/index.js';
import { createLogger } from '../../src/platform/logger.js';
import { kafkaBrokers, uniqueTopic } from '../helpers/kafka.js';

export interface TestIngress {
  ingress: Ingress;
  config: Config;
  topics: { messages: string; deliveryStatus: string; webhooksDlq: string };
  /** Every log line the ingress wrote, as text. */
  logs: string[];
  post(
    path: string,
    body: string | Buffer,
    headers?: Record<string, string>,
  ): Promise<{ status: number; headers: Record<string, string>; body: string }>;
  get(path: string): Promise<{ status: number; headers: Record<string, string>; body: string }>;
  /** A GET on the admin port (/healthz, /readyz, /metrics). */
  admin(path: string): Promise<{ status: number; headers: Record<string, string>; body: string }>;
  stop(): Promise<void>;
}

/** The Kafka clients the ingress can publish with (kafka.client); the integration tests run each. */
export const KAFKA_CLIENTS = ['kafkajs', 'platformatic'] as const satisfies readonly Config['kafka']['client'][];

export function ingressTopics() {
  return { messages: uniqueTopic('messages'), deliveryStatus: uniqueTopic('status'), webhooksDlq: uniqueTopic('dlq') };
}

/**
 * An ingress in this process on 127.0.0.1, port 0, publishing to unique topics on the suite's
 * Kafka (or `brokers`), with its logs captured.
 */
export async function startTestIngress(
  options: {
    env?: Record<string, string>;
    overrides?: DeepPartial<Config>;
    brokers?: string[];
    start?: Partial<StartIngressOptions>;
    connections?: number;
  } = {},
): Promise<TestIngress> {
  const topics = ingressTopics();
  const brokers = options.brokers ?? kafkaBrokers();
  const config = loadConfig({
    env: { KAFKA_BROKERS: brokers.join(','), MSGBRIDGE_LOG_LEVEL: 'debug', ...options.env },
    overrides: {
      ...options.overrides,
      kafka: {
        partitions: 3,
        replicationFactor: 1,
        createTopics: true,
        ...options.overrides?.kafka,
        topics: { ...topics, ...options.overrides?.kafka?.topics },
      },
      ingress: { host: '127.0.0.1', port: 0, adminHost: '127.0.0.1', adminPort: 0, ...options.overrides?.ingress },
    },
  });
  const logs: string[] = [];
  const destination = new Writable({
    write(chunk, _encoding, done) {
      logs.push(...String(chunk).split('\n').filter(Boolean));
      done();
    },
  });
  const logger = createLogger({ level: 'debug', name: 'ingress', destination });
  const ingress = await startIngress({ config, logger, ...options.start });
  const pool = new Pool(ingress.address, { connections: options.connections ?? 16, pipelining: 1 });
  const call = async (
    method: 'GET' | 'POST',
    path: string,
    body?: string | Buffer,
    headers?: Record<string, string>,
  ) => {
    const res = await pool.request({ method, path, body, headers });
    const text = await res.body.text();
    return { status: res.statusCode, headers: res.headers as Record<string, string>, body: text };
  };
  return {
    ingress,
    config,
    topics,
    logs,
    post: (path, body, headers) => call('POST', path, body, headers),
    get: (path) => call('GET', path),
    admin: async (path) => {
      const res = await fetch(`${ingress.adminAddress}${path}`);
      return { status: res.status, headers: Object.fromEntries(res.headers), body: await res.text() };
    },
    async stop() {
      await pool.close().catch(() => {});
      await ingress.drain();
    },
  };
}

/** A raw connection to the ingress, for what a pooled HTTP client cannot do: what arrives, and when it closes. */
export function rawConnection(
  port: number,
  localAddress?: string,
): Promise<{ socket: Socket; received: () => string; closedAfter: Promise<number> }> {
  return new Promise((resolve, reject) => {
    // A client address of its own (127.0.0.2, 127.0.0.3...: all loopback) for per-address limits.
    const socket = connect({ port, host: '127.0.0.1', ...(localAddress ? { localAddress } : {}) });
    let text = '';
    socket.on('data', (d) => (text += d.toString('latin1')));
    socket.on('error', () => {});
    socket.once('error', reject);
    socket.once('connect', () => {
      const opened = Date.now();
      const closedAfter = new Promise<number>((done) => socket.once('close', () => done(Date.now() - opened)));
      resolve({ socket, closedAfter, received: () => text });
    });
  });
}

/** One chunk of a `transfer-encoding: chunked` body. */
export const chunk = (data: string): string => `${Buffer.byteLength(data).toString(16)}\r\n${data}\r\n`;
