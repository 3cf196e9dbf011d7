import { performance } from 'node:perf_hooks';
import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from 'uWebSockets.js';
import { MsgbridgeError, type ErrorCode } from '../errors.js';
import { SIGNATURE_HEADER } from '../contracts/headers.js';
import type { PublishCallback, PublishRecord } from '../kafka/batching-publisher.js';
import type { Logger } from '../observability/logger.js';
import { signaturePrefix } from '../observability/logger.js';
import { loadUws } from '../uws.js';
import { isWebhookTopic, type Rejection, type WebhookDecision, type WebhookHandler } from './handle-webhook.js';
import { httpStatusOf, statusLine } from './http-status.js';
import type { IngressMetrics, IngressOutcome } from './metrics.js';
import { framingProblem } from './framing.js';
import { ReceivingSet, type ReceivingLimits } from './receiving.js';

/**
 * The uWebSockets.js adapter: routes, body streaming with its limit, answers. Decisions are
 * made by the framework-free handler; records go to the publisher. uWS rules followed here:
 * the request object is read synchronously (it does not outlive the handler), onAborted is
 * registered before anything asynchronous, every body chunk is copied before the callback
 * returns (uWS neuters it), and every write after the handler returned is corked.
 */

export interface PublisherPort {
  publish(record: PublishRecord, cb: PublishCallback): MsgbridgeError | undefined;
  /** Why a new event would be refused right now, if it would. */
  admission(): MsgbridgeError | undefined;
  /** Bytes of events held (queued or in flight). */
  heldBytes(): number;
  readonly ready: boolean;
}

export interface IngressServerOptions {
  host: string;
  port: number;
  handler: WebhookHandler;
  publisher: PublisherPort;
  metrics: IngressMetrics;
  metricsText: () => Promise<{ contentType: string; body: string }>;
  logger: Logger;
  retryAfterSeconds: number;
  /** A request must deliver its whole body within this time, else its connection is closed. */
  bodyTimeoutMs: number;
  /**
   * Bytes of bodies received so far plus events held by the publisher stay under this many
   * bytes. Only bytes that arrived count, never a length merely declared: a request is refused
   * (503) when the budget is already spent, and cut off as soon as what has arrived passes it.
   */
  memoryBudgetBytes: number;
  /** Bounds on bodies in progress, per remote address and in total (see receiving.ts). */
  receiving: ReceivingLimits;
  /** Accept chunked bodies (their chunk framing cannot be checked here: framing.ts). */
  chunkedBodies: boolean;
}

export interface IngressServer {
  readonly port: number;
  /** Webhook requests admitted and not yet answered (or aborted). */
  readonly inFlight: number;
  /**
   * From now on: new webhook requests get 503 and the connection closes; /readyz is 503.
   * Bodies still arriving get at most `bodyDeadlineMs` more (never more than their own body
   * deadline): a stalled upload must not hold a drain past its grace period. They are cut
   * off unanswered, so the provider sends them again.
   */
  stopAccepting(bodyDeadlineMs?: number): void;
  /** Resolves when every admitted webhook request has been answered or aborted. */
  whenIdle(): Promise<void>;
  /** False while the memory budget is spent: a new webhook would be refused. */
  hasRoom(): boolean;
  /** Closes the listening socket. */
  close(): void;
}

const OUTCOME_OF: Partial<Record<ErrorCode, IngressOutcome>> = {
  SIGNATURE_INVALID: 'forbidden',
  NOT_FOUND: 'not_found',
  METHOD_NOT_ALLOWED: 'method_not_allowed',
  BODY_TOO_LARGE: 'too_large',
  BAD_FRAMING: 'bad_framing',
  UNSUPPORTED_ENCODING: 'unsupported_encoding',
  QUEUE_FULL: 'queue_full',
  PUBLISH_TIMEOUT: 'publish_timeout',
  KAFKA_UNAVAILABLE: 'kafka_unavailable',
  SHUTTING_DOWN: 'shutting_down',
};

const JSON_TYPE = 'application/json';

/** One webhook request in progress. */
interface Exchange {
  res: HttpResponse;
  businessId: string;
  pathTopic: string | undefined;
  signature: string;
  /** The peer's address, as uWS reports it (a proxy's when one fronts the ingress). */
  address: string;
  contentType: string;
  contentEncoding: string;
  traceparent: string;
  receivedAt: number;
  startedAt: number;
  chunks: Buffer[] | undefined;
  body: Buffer | undefined;
  received: number;
  aborted: boolean;
  answered: boolean;
  /** Admitted and not yet finished: counted in `inFlight`. */
  active: boolean;
}

export function startIngressServer(options: IngressServerOptions): Promise<IngressServer> {
  const uws = loadUws();
  const { handler, publisher, metrics, logger } = options;
  const retryAfter = String(options.retryAfterSeconds);
  let accepting = true;
  let inFlight = 0;
  let idleWaiters: (() => void)[] = [];
  const receiving = new ReceivingSet<Exchange>(options.receiving);
  const stopReceiving = (ex: Exchange) => receiving.delete(ex);
  const heldBytes = () => publisher.heldBytes() + receiving.bytes;
  const hasRoom = () => heldBytes() < options.memoryBudgetBytes;

  const app: TemplatedApp = uws.App();

  const finishExchange = (ex: Exchange) => {
    if (!ex.active) return;
    ex.active = false;
    stopReceiving(ex);
    inFlight--;
    if (inFlight === 0 && idleWaiters.length > 0) {
      const waiters = idleWaiters;
      idleWaiters = [];
      for (const resolve of waiters) resolve();
    }
  };

  /** Writes a complete answer; a no-op once the client went away. */
  const write = (ex: Pick<Exchange, 'res' | 'aborted' | 'answered'>, status: number, body: string, extra?: { retryAfter?: boolean; close?: boolean; allow?: string }) => {
    if (ex.aborted || ex.answered) return;
    ex.answered = true;
    ex.res.cork(() => {
      ex.res.writeStatus(statusLine(status)).writeHeader('content-type', JSON_TYPE);
      if (extra?.retryAfter) ex.res.writeHeader('retry-after', retryAfter);
      if (extra?.allow) ex.res.writeHeader('allow', extra.allow);
      ex.res.end(body, extra?.close === true);
    });
  };

  const refuse = (
    ex: Pick<Exchange, 'res' | 'aborted' | 'answered' | 'businessId' | 'pathTopic' | 'signature'>,
    code: ErrorCode,
    reason: string,
    message: string,
    extra: { close?: boolean; topic?: string; eventId?: string } = {},
  ) => {
    const status = httpStatusOf(code);
    const topic = extra.topic ?? (isWebhookTopic(ex.pathTopic) ? ex.pathTopic : 'unknown');
    metrics.request(topic, OUTCOME_OF[code] ?? 'aborted');
    logger.warn(
      {
        status,
        code,
        reason,
        // From the URL, so from anyone: bounded before it reaches a log.
        business: ex.businessId.length > 128 ? `${ex.businessId.slice(0, 128)}…` : ex.businessId,
        topic,
        eventId: extra.eventId,
        signaturePrefix: signaturePrefix(ex.signature || undefined),
      },
      'webhook not accepted',
    );
    write(ex, status, JSON.stringify({ error: { code, message } }), { retryAfter: status === 503, close: extra.close });
  };

  /** Why this request's framing is ambiguous, if it is (read now: the request does not outlive the handler). */
  const ambiguousFraming = (req: HttpRequest): string | undefined => {
    const lines: [string, string][] = [];
    req.forEach((name, value) => lines.push([name, value]));
    return framingProblem(lines, options.chunkedBodies);
  };

  /**
   * After a framing refusal, the address it came from, until the current batch of socket reads
   * is done: uWS has already parsed the bytes behind the refused request and dispatches any
   * request among them right after (a smuggled one) even though the connection is to close.
   * Those are refused the same way (closing the socket at once would also drop the 400 still
   * corked for it). A request of another connection of the same address read in the same batch
   * is refused too (its client retries): the price of not knowing which socket a request is on.
   */
  let framingTaint: string | undefined;
  const addressOf = (res: HttpResponse) => Buffer.from(res.getRemoteAddressAsText()).toString();

  /**
   * Any route: ambiguous framing is answered 400 and the connection closed before anything of
   * the request is read, so nothing a proxy might frame differently is acted on.
   */
  const framed = (route: (res: HttpResponse, req: HttpRequest) => void) => (res: HttpResponse, req: HttpRequest) => {
    const problem = framingTaint !== undefined && addressOf(res) === framingTaint ? 'a request read behind an ambiguously framed one' : ambiguousFraming(req);
    if (problem === undefined) return route(res, req);
    logger.warn({ status: 400, method: req.getMethod(), path: req.getUrl().slice(0, 200), problem }, 'ambiguous HTTP framing: refused, connection closed');
    metrics.request('unknown', 'bad_framing');
    if (framingTaint === undefined) setImmediate(() => (framingTaint = undefined));
    framingTaint = addressOf(res);
    write({ res, aborted: false, answered: false }, 400, JSON.stringify({ error: { code: 'BAD_FRAMING', message: `ambiguous HTTP framing: ${problem}` } }), { close: true });
  };

  const onWebhook = (res: HttpResponse, req: HttpRequest, pathTopic: string | undefined) => {
    // Everything from the request is read now: it does not survive this call.
    const ex: Exchange = {
      res,
      businessId: req.getParameter(0),
      pathTopic,
      signature: req.getHeader(SIGNATURE_HEADER),
      address: addressOf(res),
      contentType: req.getHeader('content-type'),
      contentEncoding: req.getHeader('content-encoding'),
      traceparent: req.getHeader('traceparent'),
      receivedAt: Date.now(),
      startedAt: performance.now(),
      chunks: undefined,
      body: undefined,
      received: 0,
      aborted: false,
      answered: false,
      active: false,
    };
    const contentLength = req.getHeader('content-length');

    const early: Rejection | undefined = handler.precheck({ businessId: ex.businessId, pathTopic, contentLength, contentEncoding: ex.contentEncoding });
    if (early) {
      // Answered before the body is read; uWS discards the rest of a body it was told the
      // length of. An oversized body closes the connection so that none of it is buffered.
      refuse(ex, early.code, early.reason, early.message, { close: early.code === 'BODY_TOO_LARGE' });
      return;
    }
    if (!accepting) {
      refuse(ex, 'SHUTTING_DOWN', 'draining', 'the ingress is shutting down', { close: true });
      return;
    }
    const unavailable = publisher.admission();
    if (unavailable) {
      refuse(ex, unavailable.code, unavailable.code.toLowerCase(), unavailable.message);
      return;
    }
    // Memory is charged for bytes that arrived: a declared length reserves nothing, so headers
    // promising large bodies cannot crowd out requests that deliver.
    if (!hasRoom()) {
      refuse(ex, 'QUEUE_FULL', 'memory-budget', 'the ingress is holding too much data; retry later');
      return;
    }
    const room = receiving.makeRoom(ex.address, performance.now());
    if (room === undefined) {
      refuse(ex, 'QUEUE_FULL', 'receiving-limit', 'too many requests are still sending their body; retry later');
      return;
    }
    for (const slowest of room) cutOffBody(slowest, 'the slowest request body was closed to make room for a new request');

    ex.active = true;
    inFlight++;
    receiving.add(ex, ex.address, ex.startedAt);
    res.onAborted(() => {
      ex.aborted = true;
      if (!ex.answered) metrics.request(ex.pathTopic ?? 'unknown', 'aborted');
      finishExchange(ex);
    });

    res.onData((chunk, isLast) => {
      if (ex.answered || ex.aborted) return;
      const size = chunk.byteLength;
      ex.received += size;
      if (ex.received > handler.maxBodyBytes) {
        // Only reachable without a content-length (chunked): stop at once, keep nothing.
        cutShort(ex, 'BODY_TOO_LARGE', 'body-too-large', `the body exceeds ${handler.maxBodyBytes} bytes`);
        return;
      }
      // What arrives counts against the budget; the request that passes it is cut off (a lone
      // request always fits: maxBodyBytes bounds it).
      receiving.charge(ex, size);
      if (heldBytes() > options.memoryBudgetBytes && heldBytes() > ex.received) {
        cutShort(ex, 'QUEUE_FULL', 'memory-budget', 'the ingress is holding too much data; retry later');
        return;
      }
      if (isLast && ex.chunks === undefined) {
        // The common case, the whole body in one chunk: one copy, of exactly its size.
        ex.body = Buffer.from(chunk.slice(0));
      } else {
        if (ex.chunks === undefined) ex.chunks = [];
        if (size > 0) ex.chunks.push(Buffer.from(chunk.slice(0)));
        if (isLast) ex.body = ex.chunks.length === 1 ? ex.chunks[0]! : Buffer.concat(ex.chunks, ex.received);
      }
      if (isLast) {
        ex.chunks = undefined;
        stopReceiving(ex);
        try {
          decide(ex);
        } catch (err) {
          // A bug must cost one request, not the process (uWS would not survive a throw).
          logger.error({ err, business: ex.businessId }, 'webhook handling failed');
          write(ex, 500, '{"error":{"code":"INTERNAL","message":"internal error"}}');
          finishExchange(ex);
        }
      }
    });
  };

  /** Refuses a request whose body is still arriving: nothing of it is kept, its connection closes. */
  const cutShort = (ex: Exchange, code: ErrorCode, reason: string, message: string) => {
    ex.chunks = undefined;
    refuse(ex, code, reason, message, { close: true });
    finishExchange(ex);
  };

  const decide = (ex: Exchange) => {
    const decision: WebhookDecision = handler.handle({
      businessId: ex.businessId,
      pathTopic: ex.pathTopic,
      body: ex.body!,
      signature: ex.signature === '' ? undefined : ex.signature,
      contentType: ex.contentType === '' ? undefined : ex.contentType,
      contentEncoding: ex.contentEncoding,
      traceparent: ex.traceparent === '' ? undefined : ex.traceparent,
      receivedAt: ex.receivedAt,
    });
    ex.body = undefined;
    if (decision.kind === 'reject') {
      refuse(ex, decision.code, decision.reason, decision.message);
      finishExchange(ex);
      return;
    }
    const topic = decision.webhookTopic ?? 'unknown';
    const refused = publisher.publish(decision.record, (err) => {
      if (err) {
        refuse(ex, err.code, err.code.toLowerCase(), err.message, { topic, eventId: decision.eventId });
      } else {
        metrics.publishLatency(decision.destination, (performance.now() - ex.startedAt) / 1000);
        if (decision.destination === 'dlq') {
          metrics.request(topic, 'dead_lettered');
          metrics.deadLetter(decision.deadLetter!.reason);
          logger.info(
            { business: ex.businessId, topic, eventId: decision.eventId, reason: decision.deadLetter!.detail },
            'authentic webhook dead-lettered',
          );
          write(ex, 200, JSON.stringify({ status: 'dead-lettered', eventId: decision.eventId, reason: decision.deadLetter!.reason }));
        } else {
          metrics.request(topic, 'published');
          write(ex, 200, `{"status":"accepted","eventId":"${decision.eventId}"}`);
        }
      }
      finishExchange(ex);
    });
    if (refused) {
      refuse(ex, refused.code, refused.code.toLowerCase(), refused.message, { topic, eventId: decision.eventId });
      finishExchange(ex);
    }
  };

  const methodNotAllowed = (allow: string) => (res: HttpResponse, req: HttpRequest) => {
    const ex = { res, aborted: false, answered: false, businessId: '', pathTopic: undefined, signature: '' };
    logger.warn({ status: 405, method: req.getMethod(), path: req.getUrl() }, 'method not allowed');
    metrics.request('unknown', 'method_not_allowed');
    write(ex, 405, JSON.stringify({ error: { code: 'METHOD_NOT_ALLOWED', message: `use ${allow}` } }), { allow });
  };

  const webhookMethodNotAllowed = methodNotAllowed('POST');
  const notFound = (res: HttpResponse, req: HttpRequest) => {
    logger.warn({ status: 404, method: req.getMethod(), path: req.getUrl() }, 'no such route');
    metrics.request('unknown', 'not_found');
    write({ res, aborted: false, answered: false }, 404, '{"error":{"code":"NOT_FOUND","message":"no such route"}}');
  };

  app
    .post('/webhooks/:businessId/:topic', framed((res, req) => onWebhook(res, req, req.getParameter(1))))
    .post('/webhooks/:businessId', framed((res, req) => onWebhook(res, req, undefined)))
    // An address that does not exist is 404 whatever the method, as for POST.
    .any('/webhooks/:businessId/:topic', framed((res, req) => (isWebhookTopic(req.getParameter(1)) ? webhookMethodNotAllowed(res, req) : notFound(res, req))))
    .any('/webhooks/:businessId', framed(webhookMethodNotAllowed))
    .get('/healthz', framed((res) => {
      write({ res, aborted: false, answered: false }, 200, '{"status":"alive"}');
    }))
    .get('/readyz', framed((res) => {
      const ready = accepting && publisher.ready && hasRoom();
      if (!ready) logger.debug({ status: 503 }, 'not ready');
      write({ res, aborted: false, answered: false }, ready ? 200 : 503, ready ? '{"ready":true}' : '{"ready":false}', { retryAfter: !ready });
    }))
    .get('/metrics', framed((res) => {
      const ex = { res, aborted: false, answered: false };
      res.onAborted(() => (ex.aborted = true));
      options.metricsText().then(
        ({ contentType, body }) => {
          if (ex.aborted) return;
          ex.answered = true;
          res.cork(() => res.writeStatus('200 OK').writeHeader('content-type', contentType).end(body));
        },
        (err: unknown) => {
          logger.error({ err }, 'metrics collection failed');
          write(ex, 500, '{"error":{"code":"INTERNAL","message":"metrics collection failed"}}');
        },
      );
    }))
    .any('/healthz', framed(methodNotAllowed('GET')))
    .any('/readyz', framed(methodNotAllowed('GET')))
    .any('/metrics', framed(methodNotAllowed('GET')))
    .any('/*', framed(notFound));

  // Slow bodies: uWS closes connections idle for 10 s, but a body trickling in a byte at a
  // time is not idle. Every admitted request gets a deadline for its whole body; a drain
  // shortens it (stopAccepting).
  function cutOffBody(ex: Exchange, message: string): void {
    stopReceiving(ex);
    logger.warn({ business: ex.businessId, received: ex.received, ageMs: Math.round(performance.now() - ex.startedAt) }, message);
    ex.chunks = undefined;
    ex.res.close();
  }
  const bodySweep = setInterval(() => {
    const now = performance.now();
    for (const ex of [...receiving.items()]) {
      if (now - ex.startedAt > options.bodyTimeoutMs) cutOffBody(ex, 'request body too slow: connection closed');
    }
  }, Math.min(1000, options.bodyTimeoutMs));
  bodySweep.unref();

  return new Promise((resolve, reject) => {
    app.listen(options.host, options.port, (socket: us_listen_socket | false) => {
      if (!socket) {
        clearInterval(bodySweep);
        reject(new MsgbridgeError('INVALID_ARGUMENT', `the ingress cannot listen on ${options.host}:${options.port} (in use, or not an address of this host)`));
        return;
      }
      const port = uws.us_socket_local_port(socket as never);
      let listenSocket: us_listen_socket | undefined = socket;
      resolve({
        port,
        get inFlight() {
          return inFlight;
        },
        stopAccepting(bodyDeadlineMs) {
          accepting = false;
          if (bodyDeadlineMs === undefined || receiving.size === 0) return;
          setTimeout(() => {
            for (const ex of [...receiving.items()]) cutOffBody(ex, 'request body still arriving at the end of the drain: connection closed');
          }, bodyDeadlineMs).unref();
        },
        whenIdle() {
          if (inFlight === 0) return Promise.resolve();
          return new Promise<void>((done) => idleWaiters.push(done));
        },
        hasRoom,
        close() {
          clearInterval(bodySweep);
          if (listenSocket) uws.us_listen_socket_close(listenSocket);
          listenSocket = undefined;
        },
      });
    });
  });
}
