// A fuzz campaign against a running ingress: hostile requests of many kinds (random and
// truncated bodies, bad, missing and borrowed signatures, lying lengths, slow senders,
// pipelined and smuggling-shaped framing, invalid UTF-8, deep JSON nesting, wrong paths and
// methods) interleaved with correctly signed webhooks. Every answer is checked against what
// its kind must get; the caller then checks Kafka against `allowedInKafka` and `acknowledged`.
// Used by bench/fuzz.ts (100,000 requests, figures in docs/benchmarks.md) and by the suite
// (test/ingress/fuzz.int.test.ts, a bounded number).
import { createHash, randomBytes } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { signBody } from '../src/contracts/signature.js';
import { Http1ResponseParser } from '../src/platform/http1-response-parser.js';
import { KeepAliveConnection } from '../src/simulator/keep-alive-connection.js';

/**
 * Where each party connects from (all loopback): the provider apart from the attackers, as in
 * production, and the smuggling-shaped requests apart from the rest, since the ingress refuses
 * what it reads from an address right behind an ambiguously framed request (docs/operations.md, "Ingress HTTP
 * answers").
 */
export const FUZZ_ADDRESSES = {
  provider: '127.0.0.1',
  hostile: '127.0.0.2',
  smuggling: '127.0.0.3',
  slow: '127.0.0.4',
} as const;

export interface FuzzOptions {
  port: number;
  businessId: string;
  secret: string;
  /** Hostile requests in all. */
  requests: number;
  /** One correctly signed webhook after every this many hostile requests. */
  legitimateEvery: number;
  /** Concurrent hostile senders. */
  concurrency: number;
  /** Connections that trickle headers or bodies for the whole campaign. */
  slowConnections: number;
  /** The ingress's maxBodyBytes. */
  maxBodyBytes: number;
  /** Deterministic choice of kinds (the bodies stay random). */
  seed?: number;
  onProgress?: (sent: number) => void;
}

/** What one request got: the HTTP statuses answered, in order, and whether the server closed the connection. */
interface Answer {
  statuses: number[];
  closed: boolean;
}

export interface FuzzReport {
  hostile: number;
  legitimate: number;
  durationMs: number;
  /** Per kind: how many, and the answers seen (`403`, `none`, `400,400`...). */
  kinds: Record<string, { sent: number; answers: Record<string, number> }>;
  /** Answers outside what their kind must get. */
  unexpected: { kind: string; answer: string }[];
  legitimateAnswers: Record<string, number>;
  /** Signed webhooks answered 200, by event-id (hex SHA-256 of the body): each must be in Kafka byte for byte. */
  acknowledged: Map<string, Buffer>;
  /** Every body that may be in Kafka (correctly signed ones); anything else there came from a forged request. */
  allowedInKafka: Set<string>;
  slow: { opened: number; closedByServer: number };
}

const sha256 = (body: Buffer | string) => createHash('sha256').update(body).digest('hex');

/** A small deterministic PRNG (mulberry32): the kinds are reproducible for a seed. */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function statusBody(): string {
  const id = `01J${randomBytes(12).toString('hex').toUpperCase().slice(0, 23)}`;
  return JSON.stringify({
    topic: 'delivery_status',
    timestamp: String(Math.floor(Date.now() / 1000)),
    sender: { channelType: 'whatsapp', id: '+15550001111' },
    recipient: { channelType: 'whatsapp', id: '+15550002222' },
    statusUpdate: { id, status: 'delivered', error: null },
  });
}

function head(method: string, path: string, lines: string[]): string {
  return `${method} ${path} HTTP/1.1\r\nhost: ingress\r\n${lines.map((l) => `${l}\r\n`).join('')}\r\n`;
}

/** What each kind sends, and the answers it may get ("none": the connection closed unanswered). */
interface Kind {
  name: string;
  weight: number;
  /** On a keep-alive connection (one answer expected), or raw on a connection of its own. */
  keepAlive: boolean;
  /** Waiting for answers on a raw connection: kinds the server may leave hanging wait less. */
  timeoutMs?: number;
  from?: string;
  build(ctx: KindContext): {
    bytes: Buffer;
    signedBody?: Buffer;
    hiddenBody?: Buffer;
    closeAfterWrite?: boolean;
    answers?: number;
  };
  allowed: (answer: string) => boolean;
}

interface KindContext {
  path: string;
  secret: string;
  businessId: string;
  maxBodyBytes: number;
  random: () => number;
}

const is =
  (...answers: string[]) =>
  (answer: string) =>
    answers.includes(answer);
/** Under load the ingress may also refuse with 503 (+ Retry-After): a defined answer for anything it would read. */
const orBusy = (...answers: string[]) => is(...answers, '503');

function signedRequest(ctx: KindContext, body: Buffer, extra: string[] = []): Buffer {
  return Buffer.concat([
    Buffer.from(
      head('POST', ctx.path, [
        `content-length: ${body.length}`,
        `x-service-hmac-sha256: ${signBody(ctx.secret, body)}`,
        'content-type: application/json',
        ...extra,
      ]),
    ),
    body,
  ]);
}

const KINDS: Kind[] = [
  {
    name: 'bad-signature',
    weight: 10,
    keepAlive: true,
    build: (ctx) => {
      const body = Buffer.from(statusBody());
      return {
        bytes: Buffer.concat([
          Buffer.from(
            head('POST', ctx.path, [
              `content-length: ${body.length}`,
              `x-service-hmac-sha256: ${randomBytes(32).toString('base64')}`,
            ]),
          ),
          body,
        ]),
      };
    },
    allowed: orBusy('403'),
  },
  {
    name: 'missing-signature',
    weight: 6,
    keepAlive: true,
    build: (ctx) => {
      const body = Buffer.from(statusBody());
      return { bytes: Buffer.concat([Buffer.from(head('POST', ctx.path, [`content-length: ${body.length}`])), body]) };
    },
    allowed: orBusy('403'),
  },
  {
    name: 'signature-of-another-body',
    weight: 8,
    keepAlive: true,
    build: (ctx) => {
      const body = Buffer.from(statusBody());
      const other = Buffer.from(statusBody());
      return {
        bytes: Buffer.concat([
          Buffer.from(
            head('POST', ctx.path, [
              `content-length: ${body.length}`,
              `x-service-hmac-sha256: ${signBody(ctx.secret, other)}`,
            ]),
          ),
          body,
        ]),
      };
    },
    allowed: orBusy('403'),
  },
  {
    name: 'malformed-signature',
    weight: 4,
    keepAlive: true,
    build: (ctx) => {
      const body = Buffer.from(statusBody());
      const junk = ['sha256=abc', '', '%%%', 'A'.repeat(500), signBody(ctx.secret, body).slice(0, 20)][
        Math.floor(ctx.random() * 5)
      ]!;
      return {
        bytes: Buffer.concat([
          Buffer.from(head('POST', ctx.path, [`content-length: ${body.length}`, `x-service-hmac-sha256: ${junk}`])),
          body,
        ]),
      };
    },
    allowed: orBusy('403'),
  },
  {
    name: 'unknown-business',
    weight: 4,
    keepAlive: true,
    build: (ctx) => ({
      bytes: signedRequest(
        { ...ctx, path: `/webhooks/nope_${Math.floor(ctx.random() * 1e6)}/delivery_status` },
        Buffer.from(statusBody()),
      ),
    }),
    allowed: orBusy('403'),
  },
  {
    name: 'random-body',
    weight: 8,
    keepAlive: true,
    build: () => {
      const body = randomBytes(1 + Math.floor(Math.random() * 4000));
      return {
        bytes: Buffer.concat([
          Buffer.from(
            head('POST', '/webhooks/biz_fuzz/messages', [
              `content-length: ${body.length}`,
              `x-service-hmac-sha256: ${randomBytes(32).toString('base64')}`,
            ]),
          ),
          body,
        ]),
      };
    },
    allowed: orBusy('403'),
  },
  {
    name: 'wrong-path-or-method',
    weight: 4,
    keepAlive: true,
    build: (ctx) => {
      const choices = [
        head('GET', ctx.path, []),
        head('PUT', ctx.path, ['content-length: 0']),
        head('POST', `/webhooks/${ctx.businessId}/nope`, ['content-length: 0']),
        head('GET', `/${randomBytes(6).toString('hex')}`, []),
        head('DELETE', '/readyz', []),
      ];
      return { bytes: Buffer.from(choices[Math.floor(ctx.random() * choices.length)]!) };
    },
    allowed: is('404', '405'),
  },
  {
    name: 'unsupported-encoding',
    weight: 2,
    keepAlive: true,
    build: (ctx) => ({ bytes: signedRequest(ctx, Buffer.from(statusBody()), ['content-encoding: gzip']) }),
    allowed: orBusy('415'),
  },
  {
    name: 'oversized',
    weight: 3,
    keepAlive: false,
    build: (ctx) => ({
      bytes: Buffer.from(
        head('POST', ctx.path, [
          `content-length: ${ctx.maxBodyBytes + 1 + Math.floor(ctx.random() * 1e6)}`,
          `x-service-hmac-sha256: ${randomBytes(32).toString('base64')}`,
        ]) + '{"a":',
      ),
    }),
    allowed: is('413'),
  },
  {
    name: 'invalid-utf8-signed',
    weight: 3,
    keepAlive: true,
    build: (ctx) => {
      const body = Buffer.concat([
        Buffer.from('{"topic":"delivery_status","x":"'),
        Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0xa0, 0xa1]),
        randomBytes(8),
        Buffer.from('"}'),
      ]);
      return { bytes: signedRequest(ctx, body), signedBody: body };
    },
    // Authentic but unusable: kept in the DLQ, answered 200.
    allowed: orBusy('200'),
  },
  {
    name: 'deep-json-signed',
    weight: 2,
    keepAlive: true,
    build: (ctx) => {
      const depth = 1000 + Math.floor(ctx.random() * 200_000);
      const body = Buffer.from(`${'['.repeat(depth)}${']'.repeat(depth)}`);
      return { bytes: signedRequest(ctx, body), signedBody: body };
    },
    allowed: orBusy('200'),
  },
  {
    name: 'truncated',
    weight: 8,
    keepAlive: false,
    build: (ctx) => {
      const full = signedRequest(ctx, Buffer.from(statusBody()));
      // Cut anywhere after the request line, then the client goes away.
      return {
        bytes: full.subarray(0, 20 + Math.floor(ctx.random() * (full.length - 21))),
        closeAfterWrite: true,
        hiddenBody: full,
      };
    },
    allowed: is('none'),
  },
  {
    name: 'lying-length-long',
    weight: 4,
    keepAlive: false,
    build: (ctx) => {
      const body = Buffer.from(statusBody());
      return {
        bytes: Buffer.concat([
          Buffer.from(
            head('POST', ctx.path, [
              `content-length: ${body.length + 1 + Math.floor(ctx.random() * 5000)}`,
              `x-service-hmac-sha256: ${signBody(ctx.secret, body)}`,
            ]),
          ),
          body,
        ]),
        closeAfterWrite: true,
        hiddenBody: body,
      };
    },
    allowed: is('none'),
  },
  {
    name: 'lying-length-short',
    weight: 4,
    keepAlive: false,
    build: (ctx) => {
      const body = Buffer.from(statusBody());
      const declared = Math.max(1, body.length - 1 - Math.floor(ctx.random() * 50));
      // The signature is the whole body's: the declared prefix must fail; the rest is garbage.
      return {
        bytes: Buffer.concat([
          Buffer.from(
            head('POST', ctx.path, [
              `content-length: ${declared}`,
              `x-service-hmac-sha256: ${signBody(ctx.secret, body)}`,
            ]),
          ),
          body,
        ]),
        hiddenBody: body,
        answers: 1,
      };
    },
    allowed: (answer) => answer === '403' || answer === '503' || answer.startsWith('403') || answer === 'none',
  },
  {
    name: 'pipelined',
    weight: 4,
    keepAlive: false,
    build: (ctx) => {
      const parts = Array.from({ length: 3 }, () => {
        const body = Buffer.from(statusBody());
        return Buffer.concat([
          Buffer.from(
            head('POST', ctx.path, [
              `content-length: ${body.length}`,
              `x-service-hmac-sha256: ${randomBytes(32).toString('base64')}`,
            ]),
          ),
          body,
        ]);
      });
      return { bytes: Buffer.concat(parts), answers: 3 };
    },
    allowed: (answer) => answer.split(',').every((a) => a === '403' || a === '503'),
  },
  {
    name: 'smuggling',
    weight: 6,
    keepAlive: false,
    from: FUZZ_ADDRESSES.smuggling,
    build: (ctx) => {
      const hidden = Buffer.from(statusBody());
      const inner = signedRequest(ctx, hidden);
      const shapes = [
        head('POST', ctx.path, ['content-length: 0', `content-length: ${inner.length}`]),
        head('GET', '/healthz', ['content-length: 0', `content-length: ${inner.length}`]),
        head('POST', ctx.path, ['transfer-encoding: xchunked']),
        head('POST', ctx.path, ['transfer-encoding: chunked', 'transfer-encoding: identity']),
        head('POST', ctx.path, ['transfer-encoding: chunked', `content-length: ${inner.length}`]),
        head('POST', ctx.path, ['x-a: b', ' folded: yes', `content-length: ${inner.length}`]),
        head('POST', ctx.path, [`content-length: ${inner.length}, ${inner.length}`]),
        head('POST', ctx.path, ['transfer-encoding: gzip, chunked']),
      ];
      return {
        bytes: Buffer.concat([Buffer.from(shapes[Math.floor(ctx.random() * shapes.length)]!), inner]),
        hiddenBody: hidden,
        answers: 2,
      };
    },
    // Refused (every answer 400) or dropped unanswered by uWS: never a 200, never in Kafka.
    allowed: (answer) => answer === 'none' || answer.split(',').every((a) => a === '400'),
  },
  {
    name: 'garbage',
    weight: 5,
    keepAlive: false,
    // Random bytes may look like the start of a request that never ends: no answer is the answer.
    timeoutMs: 300,
    build: (ctx) => {
      const shapes = [
        randomBytes(1 + Math.floor(ctx.random() * 2000)),
        Buffer.from(`POST ${ctx.path} HTTP/1.1\r\n${randomBytes(200).toString('latin1')}\r\n\r\n`),
        Buffer.from(`\u0000\u0001GET / HTTP/9.9\r\n\r\n`),
        Buffer.from(`POST ${ctx.path} HTTP/1.1\nhost: x\ncontent-length: 2\n\n{}`),
      ];
      return { bytes: shapes[Math.floor(ctx.random() * shapes.length)]!, closeAfterWrite: ctx.random() < 0.5 };
    },
    allowed: (answer) => answer === 'none' || answer.split(',').every((a) => Number(a) >= 400 && Number(a) < 500),
  },
];

/**
 * Sends raw bytes on a connection of its own; collects every answer until the server closes or `answers` came (or a
 * timeout).
 */
function rawExchange(
  port: number,
  bytes: Buffer,
  options: { closeAfterWrite: boolean; answers: number; timeoutMs: number; from: string },
): Promise<Answer> {
  return new Promise((resolve) => {
    const socket: Socket = connect({ port, host: '127.0.0.1', localAddress: options.from });
    const parser = new Http1ResponseParser();
    const statuses: number[] = [];
    let done = false;
    const finish = (closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      resolve({ statuses, closed });
    };
    const timer = setTimeout(() => finish(false), options.timeoutMs);
    socket.on('connect', () => {
      socket.write(bytes);
      if (options.closeAfterWrite) setTimeout(() => finish(false), 5);
    });
    socket.on('data', (chunk: Buffer) => {
      try {
        for (const answer of parser.push(chunk)) statuses.push(answer.status);
      } catch {
        finish(true);
        return;
      }
      if (statuses.length >= options.answers) finish(false);
    });
    socket.on('error', () => finish(true));
    socket.on('close', () => finish(true));
  });
}

/** Connections that send a few bytes every few seconds for as long as the campaign runs. */
function slowSenders(
  port: number,
  count: number,
  path: string,
): { stop(): { opened: number; closedByServer: number } } {
  let closedByServer = 0;
  const sockets: Socket[] = [];
  const timers: NodeJS.Timeout[] = [];
  for (let i = 0; i < count; i++) {
    const socket = connect({ port, host: '127.0.0.1', localAddress: FUZZ_ADDRESSES.slow });
    socket.on('error', () => {});
    socket.on('close', () => {
      if (!(socket as Socket & { stopping?: boolean }).stopping) closedByServer += 1;
    });
    // Half trickle their headers (uWS's own idle timeout), half a body (the body deadline).
    const text =
      i % 2 === 0
        ? `POST ${path} HTTP/1.1\r\nhost: x\r\nx-slow: ${'a'.repeat(2000)}`
        : `POST ${path} HTTP/1.1\r\nhost: x\r\ncontent-length: 100000\r\nx-service-hmac-sha256: ${randomBytes(32).toString('base64')}\r\n\r\n${'b'.repeat(5000)}`;
    let offset = 0;
    timers.push(
      setInterval(() => {
        if (socket.destroyed || offset >= text.length) return;
        socket.write(text.slice(offset, offset + 3));
        offset += 3;
      }, 3000),
    );
    sockets.push(socket);
  }
  return {
    stop() {
      for (const t of timers) clearInterval(t);
      for (const s of sockets) {
        (s as Socket & { stopping?: boolean }).stopping = !s.destroyed;
        s.destroy();
      }
      return { opened: count, closedByServer };
    },
  };
}

export async function runFuzzCampaign(options: FuzzOptions): Promise<FuzzReport> {
  const random = prng(options.seed ?? 1);
  const path = `/webhooks/${options.businessId}/delivery_status`;
  const ctx: KindContext = {
    path,
    secret: options.secret,
    businessId: options.businessId,
    maxBodyBytes: options.maxBodyBytes,
    random,
  };
  const totalWeight = KINDS.reduce((sum, k) => sum + k.weight, 0);
  const pick = (): Kind => {
    let r = random() * totalWeight;
    for (const kind of KINDS) if ((r -= kind.weight) < 0) return kind;
    return KINDS[0]!;
  };
  const report: FuzzReport = {
    hostile: 0,
    legitimate: 0,
    durationMs: 0,
    kinds: Object.fromEntries(KINDS.map((k) => [k.name, { sent: 0, answers: {} }])),
    unexpected: [],
    legitimateAnswers: {},
    acknowledged: new Map(),
    allowedInKafka: new Set(),
    slow: { opened: 0, closedByServer: 0 },
  };
  const count = (bucket: Record<string, number>, key: string) => (bucket[key] = (bucket[key] ?? 0) + 1);
  const target = (from: string) => ({
    protocol: 'http:' as const,
    host: '127.0.0.1',
    port: options.port,
    localAddress: from,
  });

  const legitimate = async (connection: KeepAliveConnection) => {
    const body = Buffer.from(statusBody());
    report.allowedInKafka.add(sha256(body));
    report.legitimate += 1;
    let answer: string;
    try {
      answer = String(await connection.send(signedRequest(ctx, body)));
    } catch {
      answer = 'none';
    }
    count(report.legitimateAnswers, answer);
    if (answer === '200') report.acknowledged.set(sha256(body), body);
  };

  const slow = slowSenders(options.port, options.slowConnections, path);
  const started = performance.now();
  let next = 0;
  const worker = async () => {
    const keepAlive = new KeepAliveConnection(target(FUZZ_ADDRESSES.hostile), 10_000);
    const provider = new KeepAliveConnection(target(FUZZ_ADDRESSES.provider), 10_000);
    try {
      for (;;) {
        const n = next++;
        if (n >= options.requests) return;
        if (n % options.legitimateEvery === 0) await legitimate(provider);
        const kind = pick();
        const built = kind.build(ctx);
        if (built.signedBody) report.allowedInKafka.add(sha256(built.signedBody));
        let answer: string;
        if (kind.keepAlive) {
          try {
            answer = String(await keepAlive.send(built.bytes));
          } catch {
            answer = 'none';
          }
        } else {
          const result = await rawExchange(options.port, built.bytes, {
            closeAfterWrite: built.closeAfterWrite ?? false,
            answers: built.answers ?? 1,
            timeoutMs: kind.timeoutMs ?? 3000,
            from: kind.from ?? FUZZ_ADDRESSES.hostile,
          });
          answer = result.statuses.length === 0 ? 'none' : result.statuses.join(',');
        }
        const stats = report.kinds[kind.name]!;
        stats.sent += 1;
        count(stats.answers, answer);
        if (!kind.allowed(answer)) report.unexpected.push({ kind: kind.name, answer });
        report.hostile += 1;
        if (report.hostile % 10_000 === 0) options.onProgress?.(report.hostile);
      }
    } finally {
      keepAlive.close();
      provider.close();
    }
  };
  await Promise.all(Array.from({ length: options.concurrency }, worker));
  report.durationMs = performance.now() - started;
  report.slow = slow.stop();
  return report;
}

/** Checks what Kafka holds after a campaign: every acknowledged webhook byte for byte, nothing forged. */
export function checkKafka(report: FuzzReport, values: Buffer[]): { missing: number; forged: number; records: number } {
  // By SHA-256 of the exact bytes: equal hashes are equal bytes.
  const seen = new Set(values.map((v) => sha256(v)));
  let missing = 0;
  for (const id of report.acknowledged.keys()) if (!seen.has(id)) missing += 1;
  const forged = values.filter((v) => !report.allowedInKafka.has(sha256(v))).length;
  return { missing, forged, records: values.length };
}
