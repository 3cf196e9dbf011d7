import type { HttpResponse } from 'uWebSockets.js';
import type { MsgbridgeError } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';
import type { TraceSpan } from '../platform/tracing.js';
import { httpStatusOf } from './http-status.js';
import { ReceivingSet, type ReceivingLimits } from './receiving.js';
import type { Refusable, Responder } from './responder.js';

/** One webhook request in progress, everything read from the request up front (it does not outlive its handler). */
export interface Exchange extends Refusable {
  res: HttpResponse;
  contentType: string;
  contentEncoding: string;
  traceparent: string;
  receivedAt: number;
  startedAt: number;
  chunks: Buffer[] | undefined;
  received: number;
  /** Admitted and not yet finished: counted in `inFlight`. */
  active: boolean;
  /** Its server span when tracing is on (server.ts), ended by the time the exchange finishes. */
  span?: TraceSpan;
}

export interface ExchangesOptions {
  publisher: { admission(): MsgbridgeError | undefined; heldBytes(): number };
  /** Body bytes received so far plus events held by the publisher stay under this. */
  memoryBudgetBytes: number;
  receiving: ReceivingLimits;
  /** A body must be complete within this time, else its connection is closed. */
  bodyTimeoutMs: number;
  maxBodyBytes: number;
  responder: Responder;
  logger: Logger;
  /** A response's remote address (asked only when a per-address bound could be reached). */
  addressOf: (res: HttpResponse) => string;
}

/**
 * The webhook requests in progress, from admission to answer: who may start (not draining,
 * Kafka taking events, memory budget not spent, room among the bodies in progress — made by
 * closing the slowest), the body as it arrives (charged to the budget byte by byte, bounded in
 * size and time), and the count a drain waits for.
 */
export class Exchanges {
  private accepting = true;
  private active = 0;
  private idleWaiters: (() => void)[] = [];
  private readonly receiving: ReceivingSet<Exchange>;
  private readonly sweep: ReturnType<typeof setInterval>;

  constructor(private readonly options: ExchangesOptions) {
    this.receiving = new ReceivingSet<Exchange>(options.receiving, (ex) => options.addressOf(ex.res));
    // uWS closes connections idle for 10 s, but a body trickling in a byte at a time is not
    // idle: every admitted request gets a deadline for its whole body.
    this.sweep = setInterval(
      () => {
        const now = performance.now();
        for (const ex of [...this.receiving.items()]) {
          if (now - ex.startedAt > options.bodyTimeoutMs) this.cutOff(ex, 'request body too slow: connection closed');
        }
      },
      Math.min(1000, options.bodyTimeoutMs),
    );
    this.sweep.unref();
  }

  get inFlight(): number {
    return this.active;
  }

  get isAccepting(): boolean {
    return this.accepting;
  }

  /** False while the memory budget is spent: a new webhook would be refused. */
  hasRoom(): boolean {
    return this.heldBytes() < this.options.memoryBudgetBytes;
  }

  /** Starts an exchange, or answers why not (and returns false). */
  admit(ex: Exchange): boolean {
    const { responder } = this.options;
    if (!this.accepting) {
      responder.refuse(ex, 'SHUTTING_DOWN', 'draining', 'the ingress is shutting down', { close: true });
      return false;
    }
    const unavailable = this.options.publisher.admission();
    if (unavailable) {
      responder.refuse(ex, unavailable.code, unavailable.code.toLowerCase(), unavailable.message);
      return false;
    }
    // Memory is charged for bytes that arrived: a declared length reserves nothing, so headers
    // promising large bodies cannot crowd out requests that deliver.
    if (!this.hasRoom()) {
      responder.refuse(ex, 'QUEUE_FULL', 'memory-budget', 'the ingress is holding too much data; retry later');
      return false;
    }
    const room = this.receiving.makeRoom(ex, performance.now());
    if (room === undefined) {
      responder.refuse(
        ex,
        'QUEUE_FULL',
        'receiving-limit',
        'too many requests are still sending their body; retry later',
      );
      return false;
    }
    for (const slowest of room)
      this.cutOff(slowest, 'the slowest request body was closed to make room for a new request');
    ex.active = true;
    this.active++;
    this.receiving.add(ex, ex.startedAt);
    return true;
  }

  /**
   * One piece of the body: the whole body once the last piece came; undefined while more is
   * due, or when the request was refused (too large, over the budget: answered and closed).
   */
  receive(ex: Exchange, chunk: ArrayBuffer, isLast: boolean): Buffer | undefined {
    const size = chunk.byteLength;
    ex.received += size;
    if (ex.received > this.options.maxBodyBytes) {
      // Only reachable without a content-length (chunked): stop at once, keep nothing.
      this.cutShort(ex, 'BODY_TOO_LARGE', 'body-too-large', `the body exceeds ${this.options.maxBodyBytes} bytes`);
      return undefined;
    }
    // What arrives counts against the budget; the request that passes it is cut off (a lone
    // request always fits: maxBodyBytes bounds it).
    this.receiving.charge(ex, size);
    const held = this.heldBytes();
    if (held > this.options.memoryBudgetBytes && held > ex.received) {
      this.cutShort(ex, 'QUEUE_FULL', 'memory-budget', 'the ingress is holding too much data; retry later');
      return undefined;
    }
    if (isLast && ex.chunks === undefined) {
      // The common case, the whole body in one chunk: one copy, of exactly its size.
      this.receiving.delete(ex);
      return Buffer.from(chunk.slice(0));
    }
    ex.chunks ??= [];
    if (size > 0) ex.chunks.push(Buffer.from(chunk.slice(0)));
    if (!isLast) return undefined;
    const body = ex.chunks.length === 1 ? ex.chunks[0]! : Buffer.concat(ex.chunks, ex.received);
    ex.chunks = undefined;
    this.receiving.delete(ex);
    return body;
  }

  /** The exchange is over (answered or aborted). */
  finish(ex: Exchange): void {
    if (!ex.active) return;
    ex.active = false;
    ex.span?.end();
    this.receiving.delete(ex);
    this.active--;
    if (this.active === 0 && this.idleWaiters.length > 0) {
      const waiters = this.idleWaiters;
      this.idleWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }

  /**
   * From now on new requests are refused (503, connection closed). Bodies still arriving get at
   * most `bodyDeadlineMs` more: a stalled upload must not hold a drain past its grace period.
   */
  stopAccepting(bodyDeadlineMs?: number): void {
    this.accepting = false;
    if (bodyDeadlineMs === undefined || this.receiving.size === 0) return;
    setTimeout(() => {
      for (const ex of [...this.receiving.items()])
        this.cutOff(ex, 'request body still arriving at the end of the drain: connection closed');
    }, bodyDeadlineMs).unref();
  }

  whenIdle(): Promise<void> {
    if (this.active === 0) return Promise.resolve();
    return new Promise<void>((done) => this.idleWaiters.push(done));
  }

  close(): void {
    clearInterval(this.sweep);
  }

  private heldBytes(): number {
    return this.options.publisher.heldBytes() + this.receiving.bytes;
  }

  /** Refuses a request whose body is still arriving: nothing of it is kept, its connection closes. */
  private cutShort(ex: Exchange, code: 'BODY_TOO_LARGE' | 'QUEUE_FULL', reason: string, message: string): void {
    ex.chunks = undefined;
    this.options.responder.refuse(ex, code, reason, message, { close: true });
    ex.span?.setAttribute('http.response.status_code', httpStatusOf(code));
    this.finish(ex);
  }

  /** Closes a connection whose body is still arriving, unanswered (the provider sends it again). */
  private cutOff(ex: Exchange, message: string): void {
    this.receiving.delete(ex);
    this.options.logger.warn(
      { business: ex.businessId, received: ex.received, ageMs: Math.round(performance.now() - ex.startedAt) },
      message,
    );
    ex.chunks = undefined;
    ex.res.close();
  }
}
