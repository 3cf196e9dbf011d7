import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { startSimulator, type RunningSimulator, type SimulatorOptions } from '../../src/simulator/index.js';

export const BIZ = { id: 'biz_1', apiKey: 'key-biz-1', signingSecret: 'secret-biz-1', number: '+15550001000' };
export const OTHER = { id: 'biz_2', apiKey: 'key-biz-2', signingSecret: 'secret-biz-2' };

/** Short lifecycle and retry timings so that tests run in milliseconds. */
export function fastOptions(overrides: Partial<SimulatorOptions> = {}): SimulatorOptions {
  return {
    host: '127.0.0.1',
    port: 0,
    businesses: [BIZ, OTHER],
    ...overrides,
    lifecycle: { sentDelayMs: 10, deliveredDelayMs: 10, readDelayMs: 10, ...overrides.lifecycle },
    delivery: {
      backoffInitialMs: 20,
      backoffMaxMs: 200,
      timeoutMs: 1000,
      maxAttempts: 5,
      reorderWindowMs: 50,
      ...overrides.delivery,
    },
  };
}

export async function withSimulator(overrides: Partial<SimulatorOptions> = {}): Promise<RunningSimulator> {
  return startSimulator(fastOptions(overrides));
}

export interface ReceivedRequest {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  /** Raw header names and values in the order they arrived. */
  rawHeaders: string[];
  body: Buffer;
  at: number;
}

export interface Receiver {
  url: string;
  requests: ReceivedRequest[];
  /** Bodies parsed as JSON, in arrival order. */
  events(): Record<string, unknown>[];
  waitFor(count: number, timeoutMs?: number): Promise<ReceivedRequest[]>;
  close(): Promise<void>;
}

export type Reply = { status: number; headers?: Record<string, string>; delayMs?: number } | 'hang';

/** A real HTTP server on port 0 that records every request and answers as `reply` says (200 by default). */
export async function startReceiver(
  reply: (request: ReceivedRequest, index: number) => Reply = () => ({ status: 200 }),
): Promise<Receiver> {
  const requests: ReceivedRequest[] = [];
  const hanging = new Set<() => void>();
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const received: ReceivedRequest = {
        method: req.method ?? '',
        url: req.url ?? '',
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        body: Buffer.concat(chunks),
        at: Date.now(),
      };
      const index = requests.length;
      requests.push(received);
      const answer = reply(received, index);
      if (answer === 'hang') {
        hanging.add(() => res.destroy());
        return;
      }
      const send = () => {
        res.writeHead(answer.status, answer.headers);
        res.end(answer.status === 200 ? 'ok' : 'no');
      };
      if (answer.delayMs) setTimeout(send, answer.delayMs);
      else send();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    events: () => requests.map((r) => JSON.parse(r.body.toString('utf8')) as Record<string, unknown>),
    async waitFor(count, timeoutMs = 5000) {
      const deadline = Date.now() + timeoutMs;
      while (requests.length < count) {
        if (Date.now() > deadline)
          throw new Error(`expected ${count} requests at the receiver, got ${requests.length}`);
        await sleep(5);
      }
      return requests.slice(0, count);
    },
    async close() {
      for (const destroy of hanging) destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export interface Answer<T = unknown> {
  status: number;
  headers: Headers;
  body: T;
}

/** One HTTP call with fetch; the body is parsed as JSON when it is JSON. */
export async function call<T = Record<string, unknown>>(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: unknown; rawBody?: string } = {},
): Promise<Answer<T>> {
  const response = await fetch(url, {
    method: init.method ?? (init.body !== undefined || init.rawBody !== undefined ? 'POST' : 'GET'),
    headers: init.headers ?? {},
    ...(init.rawBody !== undefined
      ? { body: init.rawBody }
      : init.body !== undefined
        ? { body: JSON.stringify(init.body) }
        : {}),
  });
  const text = await response.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // kept as text
  }
  return { status: response.status, headers: response.headers, body: body as T };
}

/** Headers of a provider API call by business `biz`. */
export function apiHeaders(apiKey = BIZ.apiKey): Record<string, string> {
  return { 'content-type': 'application/json', accept: 'application/json', 'x-api-key': apiKey };
}

export async function sendText(
  sim: RunningSimulator,
  to: string,
  text = 'hello',
  extra: Record<string, unknown> = {},
): Promise<Answer> {
  return call(`${sim.url}/v1/businesses/${BIZ.id}/send/messages`, {
    headers: apiHeaders(),
    body: { recipient: { channelType: 'whatsapp', id: to }, message: { text }, ...extra },
  });
}

export async function sendTemplate(
  sim: RunningSimulator,
  to: string,
  templateName: string,
  parameters: { name: string; value: string }[],
): Promise<Answer> {
  return call(`${sim.url}/v1/businesses/${BIZ.id}/send/whatsapp_templated_messages`, {
    headers: apiHeaders(),
    body: { parameters, number: to, templateName },
  });
}

export async function register(
  sim: RunningSimulator,
  topic: 'messages' | 'delivery_status',
  address: string,
  business: { id: string; apiKey: string } = BIZ,
): Promise<Answer> {
  return call(`${sim.url}/v1/businesses/${business.id}/create/webhooks`, {
    headers: apiHeaders(business.apiKey),
    body: { topic, address },
  });
}

export async function inbound(sim: RunningSimulator, from: string, text = 'hi'): Promise<Answer> {
  return call(`${sim.url}/sim/businesses/${BIZ.id}/inbound`, { body: { from, text } });
}

/** Polls until `check` returns a value (not undefined), or fails after `timeoutMs`. */
export async function eventually<T>(
  check: () => T | undefined | Promise<T | undefined>,
  timeoutMs = 5000,
  what = 'condition',
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}
