import { Pool, type Dispatcher } from 'undici';
import { providerErrorSchema, SEND_PATH_SEGMENT, type SendOperation } from '../contracts/index.js';
import { NOOP_TRACER, type TraceSpan, type Tracer } from '../platform/tracing.js';
import type { AttemptOutcome, ProviderErrorBody } from './retry-policy.js';

/**
 * The provider's two send operations over a keep-alive connection pool (undici). Every call
 * carries `Accept: application/json`, `Content-Type: application/json` and `X-API-Key`, has a
 * deadline of its own, and ends in an `AttemptOutcome`: it never throws, so the retry policy
 * sees every failure the same way.
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
  userAgent?: string;
  /** OpenTelemetry (src/platform/README.md, "Tracing"): each call with a parent span is an HTTP client span; default off. */
  tracer?: Tracer;
}

export interface ProviderClient {
  /** `parent` (tracing on): the call is its child HTTP client span, and carries that span's `traceparent`. */
  send(operation: SendOperation, businessId: string, apiKey: string, body: unknown, signal?: AbortSignal, parent?: TraceSpan): Promise<AttemptOutcome>;
  close(): Promise<void>;
}

export function sendPath(prefix: string, operation: SendOperation, businessId: string): string {
  return `${prefix}/v1/businesses/${encodeURIComponent(businessId)}/send/${SEND_PATH_SEGMENT[operation]}`;
}

export function createProviderClient(options: ProviderClientOptions): ProviderClient {
  const url = new URL(options.baseUrl);
  const prefix = url.pathname.replace(/\/+$/, '');
  const pool = new Pool(url.origin, {
    connections: options.connections,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    connectTimeout: options.connectTimeoutMs ?? options.callTimeoutMs,
    headersTimeout: options.callTimeoutMs,
    bodyTimeout: options.callTimeoutMs,
  });
  const settings: CallSettings = { maxResponseBytes: options.maxResponseBytes ?? 64 * 1024, callTimeoutMs: options.callTimeoutMs };
  const userAgent = options.userAgent ?? 'msgbridge-sender';
  const stops = new StopSignals();
  const tracer = options.tracer ?? NOOP_TRACER;
  return {
    send(operation, businessId, apiKey, body, signal, parent) {
      if (signal?.aborted) return Promise.resolve(failure(signal.reason, false));
      const path = sendPath(prefix, operation, businessId);
      const headers: Record<string, string> = { Accept: 'application/json', 'Content-Type': 'application/json', 'X-API-Key': apiKey, 'User-Agent': userAgent };
      let span: TraceSpan | undefined;
      if (parent && tracer.enabled && !parent.recording) {
        // Left out by the sampler, so is its child (src/platform/tracing.ts, startKafkaSendSpan): the trace goes on, unsampled.
        headers.traceparent = parent.traceparent;
      } else if (parent && tracer.enabled) {
        // url.full has no secret: the API key travels in a header, never in the URL.
        span = tracer.startSpan('POST', 'client', {
          parent,
          attributes: { 'http.request.method': 'POST', 'url.full': `${url.origin}${path}`, 'server.address': url.hostname, 'server.port': serverPort(url) },
        });
        headers.traceparent = span.traceparent;
      }
      const call = new Call(settings, stops, signal, span);
      pool.dispatch({ method: 'POST', path, headers, body: JSON.stringify(body) }, call);
      return call.outcome;
    },
    async close() {
      await pool.close();
    },
  };
}

interface CallSettings {
  maxResponseBytes: number;
  callTimeoutMs: number;
}

/**
 * One call, as undici's dispatch handler: no stream, no AbortController and no listener of its
 * own (they were a tenth of the sender's CPU per call). It knows whether the request reached a
 * connected socket (undici starts writing right after onRequestStart): only then may the
 * provider have created a message when no answer comes. At the deadline, or when the caller's
 * signal aborts, the outcome is settled at once; a call still queued for a connection is
 * aborted when it gets one, before anything is written.
 */
class Call implements Dispatcher.DispatchHandler {
  readonly outcome: Promise<AttemptOutcome>;
  private resolve!: (outcome: AttemptOutcome) => void;
  private controller: Dispatcher.DispatchController | undefined;
  private written = false;
  private settled = false;
  private status = 0;
  private retryAfter: string | undefined;
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly settings: CallSettings,
    private readonly stops: StopSignals,
    private readonly signal: AbortSignal | undefined,
    private readonly span: TraceSpan | undefined = undefined,
  ) {
    this.outcome = new Promise((resolve) => (this.resolve = resolve));
    this.timer = setTimeout(() => this.stop({ kind: 'timeout', message: `no complete answer within ${settings.callTimeoutMs} ms`, requestWritten: this.written }), settings.callTimeoutMs);
    if (signal) stops.add(signal, this);
  }

  /** Ends the call now with `outcome`, aborting the request if it is (or when it gets) on a socket. */
  stop(outcome: AttemptOutcome): void {
    if (this.settled) return;
    this.settle(outcome);
    this.controller?.abort(new Error('call ended by the sender'));
  }

  stopped(reason: unknown): void {
    this.stop(failure(reason, this.written));
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.controller = controller;
    if (this.settled) {
      controller.abort(new Error('call ended before it was written'));
      return;
    }
    this.written = true;
  }

  onResponseStart(_controller: Dispatcher.DispatchController, statusCode: number, headers: Record<string, string | string[] | undefined>): void {
    this.status = statusCode;
    const value = headers['retry-after'];
    this.retryAfter = Array.isArray(value) ? value[0] : value;
  }

  onResponseData(_controller: Dispatcher.DispatchController, chunk: Buffer): void {
    const room = this.settings.maxResponseBytes - this.size;
    if (room > 0) this.chunks.push(chunk.length <= room ? chunk : chunk.subarray(0, room));
    this.size += chunk.length;
  }

  onResponseEnd(): void {
    const text = this.chunks.length === 1 ? this.chunks[0]!.toString('utf8') : Buffer.concat(this.chunks).toString('utf8');
    this.settle(interpret(this.status, this.retryAfter, text));
  }

  onResponseError(_controller: Dispatcher.DispatchController, error: Error): void {
    this.settle(failure(error, this.written));
  }

  private settle(outcome: AttemptOutcome): void {
    if (this.settled) return;
    this.settled = true;
    clearTimeout(this.timer);
    if (this.signal) this.stops.remove(this.signal, this);
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

/** One abort listener per caller signal (a partition's), however many of its calls are in flight. */
class StopSignals {
  private readonly calls = new Map<AbortSignal, { calls: Set<Call>; listener: () => void }>();

  add(signal: AbortSignal, call: Call): void {
    let entry = this.calls.get(signal);
    if (!entry) {
      const calls = new Set<Call>();
      const listener = () => {
        this.calls.delete(signal);
        signal.removeEventListener('abort', listener);
        for (const c of calls) c.stopped(signal.reason);
      };
      entry = { calls, listener };
      this.calls.set(signal, entry);
      signal.addEventListener('abort', listener);
    }
    entry.calls.add(call);
  }

  remove(signal: AbortSignal, call: Call): void {
    const entry = this.calls.get(signal);
    if (!entry) return;
    entry.calls.delete(call);
    if (entry.calls.size === 0) {
      this.calls.delete(signal);
      signal.removeEventListener('abort', entry.listener);
    }
  }
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
    const id = typeof json === 'object' && json !== null && !Array.isArray(json) ? (json as { id?: unknown }).id : undefined;
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

const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT', 'ETIMEDOUT']);

function failure(error: unknown, requestWritten: boolean): AttemptOutcome {
  const err = error as { code?: unknown; message?: unknown; cause?: { code?: unknown } };
  const code = typeof err?.code === 'string' ? err.code : typeof err?.cause?.code === 'string' ? err.cause.code : 'UNKNOWN';
  const message = typeof err?.message === 'string' ? err.message : String(error);
  if (TIMEOUT_CODES.has(code)) return { kind: 'timeout', message, requestWritten };
  return { kind: 'network', code, message, requestWritten };
}
