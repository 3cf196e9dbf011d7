import { Pool, type Dispatcher } from 'undici';
import { createdMessageSchema, providerErrorSchema, SEND_PATH_SEGMENT, type SendOperation } from '../contracts/index.js';
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
}

export interface ProviderClient {
  send(operation: SendOperation, businessId: string, apiKey: string, body: unknown, signal?: AbortSignal): Promise<AttemptOutcome>;
  close(): Promise<void>;
}

export function sendPath(prefix: string, operation: SendOperation, businessId: string): string {
  return `${prefix}/v1/businesses/${encodeURIComponent(businessId)}/send/${SEND_PATH_SEGMENT[operation]}`;
}

export function createProviderClient(options: ProviderClientOptions): ProviderClient {
  const url = new URL(options.baseUrl);
  const prefix = url.pathname.replace(/\/+$/, '');
  const maxResponseBytes = options.maxResponseBytes ?? 64 * 1024;
  const basePool = new Pool(url.origin, {
    connections: options.connections,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    connectTimeout: options.connectTimeoutMs ?? options.callTimeoutMs,
    headersTimeout: options.callTimeoutMs,
    bodyTimeout: options.callTimeoutMs,
  });
  // Calls whose request reached a connected socket (undici starts writing right after
  // onRequestStart): only those may have created a message when no answer comes back. Keyed
  // by the call's own abort signal, which undici hands the dispatch unchanged.
  const written = new WeakSet<AbortSignal>();
  const pool = basePool.compose((dispatch) => (opts, handler) => {
    const signal = (opts as { signal?: unknown }).signal;
    if (!(signal instanceof AbortSignal)) return dispatch(opts, handler);
    return dispatch(opts, new WriteTracker(handler, () => written.add(signal)));
  });
  const userAgent = options.userAgent ?? 'msgbridge-sender';

  return {
    async send(operation, businessId, apiKey, body, signal) {
      const deadline = new AbortController();
      let timedOut = false;
      const timer = setTimeout(() => {
        timedOut = true;
        deadline.abort(new Error(`no complete answer within ${options.callTimeoutMs} ms`));
      }, options.callTimeoutMs);
      const onAbort = () => deadline.abort(signal?.reason);
      signal?.addEventListener('abort', onAbort, { once: true });
      try {
        const response = await pool.request({
          method: 'POST',
          path: sendPath(prefix, operation, businessId),
          headers: {
            Accept: 'application/json',
            'Content-Type': 'application/json',
            'X-API-Key': apiKey,
            'User-Agent': userAgent,
          },
          body: JSON.stringify(body),
          signal: deadline.signal,
        });
        const text = await readLimited(response.body, maxResponseBytes);
        return interpret(response.statusCode, headerValue(response.headers['retry-after']), text);
      } catch (error) {
        const requestWritten = written.has(deadline.signal);
        if (timedOut) return { kind: 'timeout', message: `no complete answer within ${options.callTimeoutMs} ms`, requestWritten };
        return failure(error, requestWritten);
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
      }
    },
    async close() {
      await basePool.close();
    },
  };
}

function headerValue(value: string | string[] | undefined): string | undefined {
  return Array.isArray(value) ? value[0] : value;
}

async function readLimited(body: AsyncIterable<Buffer | string> & { destroy?: () => void }, limit: number): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of body) {
    const buffer = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    if (size < limit) chunks.push(buffer.subarray(0, limit - size));
    size += buffer.length;
  }
  return Buffer.concat(chunks).toString('utf8');
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
    const created = createdMessageSchema.safeParse(json);
    if (created.success) return { kind: 'accepted', status, messageId: created.data.id };
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

/** Forwards every callback of a dispatch, telling `onStart` when the request reaches a socket. */
class WriteTracker implements Dispatcher.DispatchHandler {
  constructor(
    private readonly inner: Dispatcher.DispatchHandler,
    private readonly onStart: () => void,
  ) {}
  onRequestStart(controller: Dispatcher.DispatchController, context: unknown): void {
    this.onStart();
    this.inner.onRequestStart?.(controller, context);
  }
  onRequestUpgrade(...args: Parameters<NonNullable<Dispatcher.DispatchHandler['onRequestUpgrade']>>): void {
    this.inner.onRequestUpgrade?.(...args);
  }
  onResponseStart(...args: Parameters<NonNullable<Dispatcher.DispatchHandler['onResponseStart']>>): void {
    this.inner.onResponseStart?.(...args);
  }
  onResponseData(...args: Parameters<NonNullable<Dispatcher.DispatchHandler['onResponseData']>>): void {
    this.inner.onResponseData?.(...args);
  }
  onResponseEnd(...args: Parameters<NonNullable<Dispatcher.DispatchHandler['onResponseEnd']>>): void {
    this.inner.onResponseEnd?.(...args);
  }
  onResponseError(...args: Parameters<NonNullable<Dispatcher.DispatchHandler['onResponseError']>>): void {
    this.inner.onResponseError?.(...args);
  }
}
