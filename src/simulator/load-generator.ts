import { randomBytes, randomInt } from 'node:crypto';
import { monotonicFactory } from 'ulid';
import { canonicalCustomerId, eventIdOf, SIGNATURE_HEADER, type WebhookTopic } from '../contracts/index.js';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { signBody } from '../contracts/signature.js';
import { epochSeconds } from './events.js';
import { KeepAliveConnection } from './keep-alive-connection.js';

export interface WebhookLoadOptions {
  /** The full webhook address, e.g. http://127.0.0.1:8080/webhooks/biz_1 */
  url: string;
  signingSecret: string;
  /** Keep-alive connections (one request in flight on each). */
  connections: number;
  /** Stop after this long; with `totalRequests` too, whichever comes first. */
  durationMs?: number;
  totalRequests?: number;
  /** Requests per second over all connections; undefined = as fast as the receiver answers. */
  ratePerSecond?: number;
  /** Delivery status events (sent, delivered, read, ...) per inbound message. Default 3. */
  statusesPerInbound?: number;
  /** Body size range, in bytes. Default 300–600. */
  bodyBytes?: { min: number; max: number };
  /** Post each event to `{url}/{topic}` instead of `{url}`. */
  perTopicPaths?: boolean;
  /** Delivery statuses only, no inbound messages (for a receiver that accepts only those). */
  statusesOnly?: boolean;
  /**
   * The Accept-Encoding header: `gzip` (the default) as the provider's webhook requests carry it,
   * or none. A receiver that compresses its answers when asked pays for it on every request.
   */
  acceptEncoding?: 'gzip' | 'none';
}

/** How long one request may wait for its answer before it counts as an error. */
const REQUEST_TIMEOUT_MS = 30_000;
/** The business's WhatsApp number in the events. */
const BUSINESS_NUMBER = '+15550001000';

export interface AcknowledgedEvent {
  topic: WebhookTopic;
  /** The Kafka key the ingress uses: the message id for statuses, the customer for inbound messages. */
  key: string;
  /** Hex SHA-256 of the body (the ingress's `event-id`). */
  eventId: string;
}

export interface WebhookLoadReport {
  sent: number;
  /** Answers by HTTP status. */
  answered: Record<string, number>;
  /** Requests that got no answer (connection error, timeout). */
  errors: number;
  /** First few distinct error messages. */
  errorSamples: string[];
  /** From sending a request to the end of its answer. */
  latencyMs: { p50: number; p90: number; p99: number; p999: number; max: number };
  durationMs: number;
  /** Requests answered (any status) per second. */
  ratePerSecond: number;
  /** Every event answered 200, so that a benchmark can check that Kafka holds each. */
  acknowledged: AcknowledgedEvent[];
}

interface GeneratedEvent {
  topic: WebhookTopic;
  key: string;
  body: Buffer;
}

const STATUS_CYCLE = ['sent', 'delivered', 'read'] as const;
const CUSTOMER_TEXTS = [
  'Hi, where is my order?',
  'Can I change the delivery address for my parcel please',
  'Thanks, got it!',
  'Is the store open on Sunday?',
  'I would like to cancel my appointment tomorrow',
  'Yes please',
  'What time will the courier arrive?',
  'The item arrived damaged, what should I do?',
];
const FIRST_NAMES = [
  'Ana',
  'Ben',
  'Chloé',
  'Dmitri',
  'Emeka',
  'Fatima',
  'Grace',
  'Hiro',
  'Ines',
  'Jonas',
  'Kofi',
  'Lena',
];
const CAMPAIGNS = ['order-updates', 'appointment-reminders', 'support', 'delivery-notifications'];

/**
 * Realistic signed webhook traffic: for each inbound customer message, `statusesPerInbound`
 * delivery status events (sent, delivered, read of the business's reply). Bodies carry the
 * optional fields real providers add (names, metadata, callbackData), sized into the range.
 */
export class WebhookEventMix {
  private readonly nextUlid = monotonicFactory();
  private readonly statusesPerInbound: number;
  private readonly bodyBytes: { min: number; max: number };
  private index = 0;
  private customer = '';
  private messageId = '';
  private unit = 0;
  private readonly statusesOnly: boolean;

  constructor(
    options: { statusesPerInbound?: number; bodyBytes?: { min: number; max: number }; statusesOnly?: boolean } = {},
  ) {
    this.statusesPerInbound = options.statusesPerInbound ?? 3;
    this.bodyBytes = options.bodyBytes ?? { min: 300, max: 600 };
    this.statusesOnly = options.statusesOnly ?? false;
  }

  next(): GeneratedEvent {
    const position = this.index % (this.statusesPerInbound + 1);
    this.index += 1;
    const target = this.bodyBytes.min + randomInt(0, this.bodyBytes.max - this.bodyBytes.min + 1);
    const timestamp = epochSeconds(Date.now());
    if (position === 0) {
      this.unit += 1;
      this.customer = `+1555${String(randomInt(0, 10_000_000)).padStart(7, '0')}`;
      if (this.statusesOnly) return this.next();
      const event: Record<string, unknown> = {
        timestamp,
        sender: {
          channelType: 'whatsapp',
          id: this.customer,
          name: `${pick(FIRST_NAMES)} ${String.fromCharCode(65 + randomInt(0, 26))}.`,
        },
        recipient: { channelType: 'whatsapp', id: BUSINESS_NUMBER, name: 'Acme Support' },
        message: { text: pick(CUSTOMER_TEXTS) },
      };
      return {
        topic: 'messages',
        key: canonicalCustomerId(this.customer),
        body: sized(event, target, 'context', (n) => ({ conversationId: padToken(`conv-${this.unit}-`, n) })),
      };
    }
    if ((position - 1) % STATUS_CYCLE.length === 0) this.messageId = this.nextUlid();
    const status = STATUS_CYCLE[(position - 1) % STATUS_CYCLE.length]!;
    const event: Record<string, unknown> = {
      topic: 'delivery_status',
      timestamp,
      sender: { channelType: 'whatsapp', id: BUSINESS_NUMBER, name: 'Acme Support' },
      recipient: { channelType: 'whatsapp', id: this.customer, name: null },
      statusUpdate: { id: this.messageId, status, error: null },
      metadata: { campaign: pick(CAMPAIGNS), pricingCategory: 'utility', conversationId: `conv-${this.unit}` },
    };
    return {
      topic: 'delivery_status',
      key: this.messageId,
      body: sized(event, target, 'callbackData', (n) => padToken(`order-${this.unit}|`, n)),
    };
  }
}

/**
 * The event's JSON, with `field` added last (holding `make(n)`, n characters of content) to
 * reach `target` bytes where it can. Built by appending to the serialised event rather than
 * serialising it again for every size probe: generating load must stay cheap.
 */
function sized(event: Record<string, unknown>, target: number, field: string, make: (n: number) => unknown): Buffer {
  const base = JSON.stringify(event);
  const open = `${base.slice(0, -1)},"${field}":`;
  const room = target - (Buffer.byteLength(open) + JSON.stringify(make(0)).length + 1);
  return Buffer.from(room > 0 ? `${open}${JSON.stringify(make(room))}}` : base, 'utf8');
}

/** Random hex, drawn once: tokens are slices of it at random offsets (unique enough for load, and cheap). */
const RANDOM_HEX = randomBytes(32 * 1024).toString('hex');

function padToken(prefix: string, length: number): string {
  if (length <= prefix.length) return prefix.slice(0, Math.max(0, length));
  const n = Math.min(length - prefix.length, RANDOM_HEX.length);
  const from = randomInt(0, RANDOM_HEX.length - n + 1);
  return prefix + RANDOM_HEX.slice(from, from + n);
}

function pick<T>(list: readonly T[]): T {
  return list[randomInt(0, list.length)]!;
}

function validate(options: WebhookLoadOptions): URL {
  const problems: string[] = [];
  let url: URL | undefined;
  try {
    url = new URL(options.url);
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      problems.push(`url must be http(s), got ${url.protocol}`);
  } catch {
    problems.push(`url is not a valid address: "${options.url}"`);
  }
  if (options.signingSecret === '') problems.push('signingSecret must not be empty');
  if (!Number.isInteger(options.connections) || options.connections < 1)
    problems.push('connections must be a positive integer');
  if (options.durationMs === undefined && options.totalRequests === undefined)
    problems.push('give durationMs or totalRequests');
  if (options.durationMs !== undefined && !(options.durationMs > 0)) problems.push('durationMs must be positive');
  if (options.totalRequests !== undefined && (!Number.isInteger(options.totalRequests) || options.totalRequests < 1))
    problems.push('totalRequests must be a positive integer');
  if (options.ratePerSecond !== undefined && !(options.ratePerSecond > 0))
    problems.push('ratePerSecond must be positive');
  if (
    options.statusesPerInbound !== undefined &&
    (!Number.isInteger(options.statusesPerInbound) || options.statusesPerInbound < 0)
  ) {
    problems.push('statusesPerInbound must be a non-negative integer');
  }
  if (options.acceptEncoding !== undefined && options.acceptEncoding !== 'gzip' && options.acceptEncoding !== 'none') {
    problems.push(`acceptEncoding must be gzip or none, got ${String(options.acceptEncoding)}`);
  }
  if (options.statusesOnly && options.statusesPerInbound === 0)
    problems.push('statusesOnly needs statusesPerInbound above 0');
  const b = options.bodyBytes;
  if (b !== undefined && !(Number.isInteger(b.min) && Number.isInteger(b.max) && b.min > 0 && b.min <= b.max))
    problems.push('bodyBytes must be {min, max} with 0 < min <= max');
  if (problems.length > 0 || url === undefined)
    throw new MsgbridgeError('INVALID_ARGUMENT', `invalid load options: ${problems.join('; ')}`);
  return url;
}

/**
 * Sends signed webhook traffic to one address over keep-alive connections and reports the
 * answers by status and the latency distribution. With `ratePerSecond`, request i is due at
 * start + i/rate (the schedule slips when the receiver is slower); without it every
 * connection sends its next request as soon as the previous one is answered.
 */
export async function runWebhookLoad(options: WebhookLoadOptions): Promise<WebhookLoadReport> {
  const url = validate(options);
  const basePath = url.pathname.replace(/\/+$/, '');
  const pathFor = (topic: WebhookTopic) =>
    `${options.perTopicPaths ? `${basePath}/${topic}` : basePath || '/'}${url.search}`;
  const mix = new WebhookEventMix({
    ...(options.statusesPerInbound !== undefined ? { statusesPerInbound: options.statusesPerInbound } : {}),
    ...(options.bodyBytes !== undefined ? { bodyBytes: options.bodyBytes } : {}),
    statusesOnly: options.statusesOnly ?? false,
  });
  const target = {
    protocol: url.protocol as 'http:' | 'https:',
    host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: url.port !== '' ? Number(url.port) : url.protocol === 'https:' ? 443 : 80,
  };
  const connections = Array.from(
    { length: options.connections },
    () => new KeepAliveConnection(target, REQUEST_TIMEOUT_MS),
  );
  // Everything but the path, length and signature is the same for every request.
  const acceptEncoding = (options.acceptEncoding ?? 'gzip') === 'gzip' ? 'Accept-Encoding: gzip\r\n' : '';
  const headPrefix = (topic: WebhookTopic) =>
    `POST ${pathFor(topic)} HTTP/1.1\r\nHost: ${url.host}\r\nContent-Type: text/plain; charset=utf-8\r\n${acceptEncoding}`;
  const prefixes = {
    messages: headPrefix('messages'),
    delivery_status: headPrefix('delivery_status'),
  } satisfies Record<WebhookTopic, string>;

  const answered: Record<string, number> = {};
  const acknowledged: AcknowledgedEvent[] = [];
  const errorSamples = new Set<string>();
  let latencies = new Float64Array(1024);
  let latencyCount = 0;
  let sent = 0;
  let errors = 0;
  let issued = 0;
  const start = performance.now();
  const deadline = options.durationMs !== undefined ? start + options.durationMs : Infinity;
  const total = options.totalRequests ?? Infinity;
  const interval = options.ratePerSecond !== undefined ? 1000 / options.ratePerSecond : 0;

  const recordLatency = (ms: number) => {
    if (latencyCount === latencies.length) {
      const grown = new Float64Array(latencies.length * 2);
      grown.set(latencies);
      latencies = grown;
    }
    latencies[latencyCount] = ms;
    latencyCount += 1;
  };

  const worker = async (connection: KeepAliveConnection) => {
    for (;;) {
      if (issued >= total || performance.now() >= deadline) return;
      const index = issued;
      issued += 1;
      if (interval > 0) {
        const wait = start + index * interval - performance.now();
        if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
        if (performance.now() >= deadline) return;
      }
      const event = mix.next();
      const signature = signBody(options.signingSecret, event.body);
      sent += 1;
      const head = `${prefixes[event.topic]}Content-Length: ${event.body.length}\r\n${SIGNATURE_HEADER}: ${signature}\r\n\r\n`;
      const request = Buffer.concat([Buffer.from(head, 'latin1'), event.body]);
      const t0 = performance.now();
      try {
        const statusCode = await connection.send(request);
        recordLatency(performance.now() - t0);
        const status = String(statusCode);
        answered[status] = (answered[status] ?? 0) + 1;
        if (statusCode === 200) {
          acknowledged.push({ topic: event.topic, key: event.key, eventId: eventIdOf(event.body) });
        }
      } catch (err) {
        errors += 1;
        if (errorSamples.size < 5) errorSamples.add(errorMessage(err));
      }
    }
  };

  try {
    await Promise.all(connections.map(worker));
  } finally {
    for (const connection of connections) connection.close();
  }
  const durationMs = performance.now() - start;
  const sorted = latencies.subarray(0, latencyCount).sort();
  const answeredCount = Object.values(answered).reduce((a, b) => a + b, 0);
  return {
    sent,
    answered,
    errors,
    errorSamples: [...errorSamples],
    latencyMs: {
      p50: percentile(sorted, 0.5),
      p90: percentile(sorted, 0.9),
      p99: percentile(sorted, 0.99),
      p999: percentile(sorted, 0.999),
      max: latencyCount > 0 ? round(sorted[latencyCount - 1]!) : 0,
    },
    durationMs: round(durationMs),
    ratePerSecond: round(answeredCount / (durationMs / 1000)),
    acknowledged,
  };
}

function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return 0;
  return round(sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!);
}

function round(value: number): number {
  return Math.round(value * 100) / 100;
}
