import { providerErrorSchema, SEND_PATH_SEGMENT, type SendOperation } from '../contracts/index.js';
import { Http1Pool, type Http1Error, type Http1Exchange, type Http1Request } from '../platform/http1-pool.js';
import type { ParsedResponse } from '../platform/http1-response-parser.js';
import { NOOP_TRACER, type TraceSpan, type Tracer } from '../platform/tracing.js';
import { onAbort } from '../platform/on-abort.js';
import type { HttpProxy } from '../platform/proxy.js';
import type { AttemptOutcome, ProviderErrorBody } from './retry-policy.js';

/**
 * The provider's two send operations over a keep-alive HTTP/1.1 connection pool
 * (src/platform/http1-pool.ts; README "Provider calls"). Every call carries
 * `Accept: application/json`, `Content-Type: application/json` and `X-API-Key`, has a deadline
 * of its own, and ends in an `AttemptOutcome`: it never throws, so the retry policy sees every
 * failure the same way.
 */

export interface ProviderClientOptions {
  /** Base URL; a path prefix is kept (`https://host/api` → `https://host/api/v1/...`). */
  baseUrl: string;
  /** Keep-alive connections in the pool. */
  connections: number;
  /** Deadline of one call, connect to last body byte. */
  callTimeoutMs: number;
  /** Deadline of the TCP/TLS connect (default: callTimeoutMs). */
  connectTimeoutMs?: number;
  /** Largest answer body read (default 64 KiB); the rest is discarded. */
  maxResponseBytes?: number;
  /** Longest idle time of a kept connection when the provider names none (default 30 s). */
  keepAliveTimeoutMs?: number;
  userAgent?: string;
  /**
   * OpenTelemetry (src/platform/README.md, "Tracing"): each call with a parent span is an HTTP client span; default
   * off.
   */
  tracer?: Tracer;
  /** https: trust settings beyond the system's certificate authorities (tests). */
  tls?: { ca?: string | Buffer; rejectUnauthorized?: boolean };
  /** Reach the provider through this HTTP proxy (README "Egress proxy"). */
  proxy?: HttpProxy;
  /**
   * Called when calls start failing at the proxy (`working` false, with what it answered) and
   * when one passes it again: once per change, for one log line each, not one per call.
   */
  onProxyChange?: (working: boolean, detail: string) => void;
}

export interface ProviderClient {
  /** `parent` (tracing on): the call is its child HTTP client span, and carries that span's `traceparent`. */
  send(
    operation: SendOperation,
    businessId: string,
    apiKey: string,
    body: unknown,
    signal?: AbortSignal,
    parent?: TraceSpan,
  ): Promise<AttemptOutcome>;
  close(): Promise<void>;
}

export function sendPath(prefix: string, operation: SendOperation, businessId: string): string {
  return `${prefix}/v1/businesses/${encodeURIComponent(businessId)}/send/${SEND_PATH_SEGMENT[operation]}`;
}

/** A header value may hold no control character (no CR or LF: they would end the header). */
const SAFE_HEADER_VALUE = /^[^\x00-\x08\x0a-\x1f\x7f]*$/;

export function createProviderClient(options: ProviderClientOptions): ProviderClient {
  const url = new URL(options.baseUrl);
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new Error(`the provider URL must be http or https, not ${url.protocol}`);
  const prefix = url.pathname.replace(/\/+$/, '');
  const userAgent = options.userAgent ?? 'msgbridge-sender';
  if (!SAFE_HEADER_VALUE.test(userAgent)) throw new Error('the user agent holds a control character');
  const pool = new Http1Pool({
    protocol: url.protocol,
    host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: serverPort(url),
    connections: options.connections,
    connectTimeoutMs: options.connectTimeoutMs ?? options.callTimeoutMs,
    keepAliveTimeoutMs: options.keepAliveTimeoutMs ?? 30_000,
    maxResponseBytes: options.maxResponseBytes ?? 64 * 1024,
    ...(options.tls ? { tls: options.tls } : {}),
    ...(options.proxy ? { proxy: options.proxy } : {}),
  });
  const heads = new RequestHeads(pool, prefix, userAgent);
  const tracer = options.tracer ?? NOOP_TRACER;
  const proxy = options.proxy
    ? new ProxyWatch(options.proxy, url.protocol === 'http:', options.onProxyChange)
    : undefined;
  return {
    send(operation, businessId, apiKey, body, signal, parent) {
      if (signal?.aborted) return Promise.resolve(failure(signal.reason, false));
      const head = heads.of(operation, businessId, apiKey);
      if (head === undefined)
        return Promise.resolve({
          kind: 'network',
          code: 'INVALID_API_KEY',
          message: 'the API key holds a control character: it cannot be sent as a header',
          requestWritten: false,
        });
      let traceparent = '';
      let span: TraceSpan | undefined;
      if (parent && tracer.enabled && !parent.recording) {
        // Left out by the sampler, so is its child (src/platform/tracing.ts, startKafkaSendSpan): the trace goes on,
        // unsampled.
        traceparent = parent.traceparent;
      } else if (parent && tracer.enabled) {
        // url.full has no secret: the API key travels in a header, never in the URL.
        span = tracer.startSpan('POST', 'client', {
          parent,
          attributes: {
            'http.request.method': 'POST',
            'url.full': `${url.origin}${sendPath(prefix, operation, businessId)}`,
            'server.address': url.hostname,
            'server.port': serverPort(url),
          },
        });
        traceparent = span.traceparent;
      }
      const json = JSON.stringify(body);
      const payload = `${head}${traceparent === '' ? '' : `traceparent: ${traceparent}\r\n`}Content-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`;
      const call = new Call(options.callTimeoutMs, signal, span, proxy);
      call.start(pool.request(payload, call));
      return call.outcome;
    },
    async close() {
      await pool.close();
    },
  };
}

/**
 * The constant part of each request's head, per operation, business and API key: built once,
 * not per call. Bounded: the set is cleared past 1,024 (keys rotate, businesses come and go).
 */
class RequestHeads {
  private readonly heads = new Map<string, string>();

  constructor(
    private readonly pool: Pick<Http1Pool, 'hostHeader' | 'requestTarget' | 'proxyHeaders'>,
    private readonly prefix: string,
    private readonly userAgent: string,
  ) {}

  /** Undefined when the API key cannot be a header value. */
  of(operation: SendOperation, businessId: string, apiKey: string): string | undefined {
    const id = `${operation}\u0000${businessId}\u0000${apiKey}`;
    let head = this.heads.get(id);
    if (head === undefined) {
      if (!SAFE_HEADER_VALUE.test(apiKey)) return undefined;
      if (this.heads.size >= 1024) this.heads.clear();
      const { pool } = this;
      head = `POST ${pool.requestTarget(sendPath(this.prefix, operation, businessId))} HTTP/1.1\r\nHost: ${pool.hostHeader}\r\n${pool.proxyHeaders}Accept: application/json\r\nContent-Type: application/json\r\nX-API-Key: ${apiKey}\r\nUser-Agent: ${this.userAgent}\r\n`;
      this.heads.set(id, head);
    }
    return head;
  }
}

/**
 * Whether calls get past the proxy: one change reported per state change, not one per call
 * (at thousands of calls a second, one line per failed call would bury the log). A 407 from the
 * proxy to an absolute-form request (http provider) is the proxy's refusal, not the provider's
 * answer: nothing was forwarded, and it is retried like a refused connection.
 */
class ProxyWatch {
  private failing = false;

  constructor(
    private readonly proxy: HttpProxy,
    private readonly absoluteForm: boolean,
    private readonly onChange: ((working: boolean, detail: string) => void) | undefined,
  ) {}

  /** The outcome of an answer, a 407 from the proxy made a refusal. */
  answered(response: ParsedResponse): AttemptOutcome | undefined {
    if (!this.absoluteForm || response.status !== 407) {
      this.passed();
      return undefined;
    }
    const message = `the proxy ${this.proxy.display} answered 407 Proxy Authentication Required: check the credentials in its URL`;
    this.refused(message);
    return { kind: 'network', code: 'PROXY_REFUSED', message, requestWritten: false };
  }

  failed(error: Http1Error): void {
    if (error.atProxy) this.refused(error.message);
  }

  private passed(): void {
    if (!this.failing) return;
    this.failing = false;
    this.onChange?.(true, `provider calls pass the proxy ${this.proxy.display} again`);
  }

  private refused(detail: string): void {
    if (this.failing) return;
    this.failing = true;
    this.onChange?.(false, detail);
  }
}

/**
 * One call: the pool's exchange, a deadline, and the caller's signal. It knows whether the
 * request reached a connected socket: only then may the provider have created a message when
 * no answer comes. At the deadline, or when the caller's signal aborts, the outcome is settled
 * at once and the request is cancelled wherever it is (a connection it was written on is closed).
 */
class Call implements Http1Exchange {
  readonly outcome: Promise<AttemptOutcome>;
  private resolve!: (outcome: AttemptOutcome) => void;
  private request: Http1Request | undefined;
  private written = false;
  private settled = false;
  private readonly timer: NodeJS.Timeout;
  private unregister: (() => void) | undefined;

  constructor(
    private readonly callTimeoutMs: number,
    signal: AbortSignal | undefined,
    private readonly span: TraceSpan | undefined = undefined,
    private readonly proxy: ProxyWatch | undefined = undefined,
  ) {
    this.outcome = new Promise((resolve) => (this.resolve = resolve));
    this.timer = setTimeout(
      () =>
        this.stop({
          kind: 'timeout',
          message: `no complete answer within ${callTimeoutMs} ms`,
          requestWritten: this.written,
        }),
      callTimeoutMs,
    );
    // One listener per partition's signal, however many of its calls are in flight (on-abort.ts).
    if (signal) this.unregister = onAbort(signal, () => this.stopped(signal.reason));
  }

  start(request: Http1Request): void {
    this.request = request;
    // The pool may have failed it at once (closed, queue full): it is then settled already.
    if (this.settled) request.cancel();
  }

  /** Ends the call now with `outcome`, cancelling the request wherever it is. */
  stop(outcome: AttemptOutcome): void {
    if (this.settled) return;
    this.settle(outcome);
    this.request?.cancel();
  }

  stopped(reason: unknown): void {
    this.stop(failure(reason, this.written));
  }

  onWritten(): void {
    this.written = true;
  }

  onResponse(response: ParsedResponse): void {
    const refused = this.proxy?.answered(response);
    this.settle(refused ?? interpret(response.status, response.retryAfter, response.body.toString('utf8')));
  }

  onError(error: Http1Error): void {
    this.proxy?.failed(error);
    this.settle(failure(error, this.written));
  }

  private settle(outcome: AttemptOutcome): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.timer);
    this.unregister?.();
    if (this.span) endCallSpan(this.span, outcome);
    this.resolve(outcome);
  }
}

function serverPort(url: URL): number {
  return url.port !== '' ? Number(url.port) : url.protocol === 'https:' ? 443 : 80;
}

/** The HTTP client span's end (semantic conventions: a 4xx or 5xx, or no answer, is an error of a client span). */
function endCallSpan(span: TraceSpan, outcome: AttemptOutcome): void {
  switch (outcome.kind) {
    case 'accepted':
    case 'invalid-response':
      span.setAttribute('http.response.status_code', outcome.status);
      if (outcome.kind === 'invalid-response') span.fail('invalid_response', 'a 2xx answer without a message id');
      break;
    case 'http-error':
      span.setAttribute('http.response.status_code', outcome.status);
      span.fail(String(outcome.status), outcome.error?.message);
      break;
    case 'timeout':
      span.fail('timeout', outcome.message);
      break;
    case 'network':
      span.fail(outcome.code, outcome.message);
      break;
  }
  span.end();
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

const snippet = (text: string) => (text.length > 512 ? `${text.slice(0, 512)}…` : text);

/** Any 2xx with an `id` is success; error bodies are read as the provider's error object when they are one. */
export function interpret(status: number, retryAfter: string | undefined, text: string): AttemptOutcome {
  const json = parseJson(text);
  if (status >= 200 && status < 300) {
    // createdMessageSchema's rule (an object with a non-empty string id), without zod on the hot path.
    const id =
      typeof json === 'object' && json !== null && !Array.isArray(json) ? (json as { id?: unknown }).id : undefined;
    if (typeof id === 'string' && id.length > 0) return { kind: 'accepted', status, messageId: id };
    return { kind: 'invalid-response', status, bodySnippet: snippet(text) };
  }
  const parsed = providerErrorSchema.safeParse(json);
  return {
    kind: 'http-error',
    status,
    retryAfter,
    error: parsed.success ? (parsed.data as ProviderErrorBody) : undefined,
    bodySnippet: parsed.success ? undefined : snippet(text),
  };
}

const TIMEOUT_CODES = new Set(['CONNECT_TIMEOUT', 'ETIMEDOUT']);

function failure(error: unknown, requestWritten: boolean): AttemptOutcome {
  const err = error as { code?: unknown; message?: unknown; cause?: { code?: unknown } };
  const code =
    typeof err?.code === 'string' ? err.code : typeof err?.cause?.code === 'string' ? err.cause.code : 'UNKNOWN';
  const message = typeof err?.message === 'string' ? err.message : String(error);
  if (TIMEOUT_CODES.has(code)) return { kind: 'timeout', message, requestWritten };
  return { kind: 'network', code, message, requestWritten };
}
