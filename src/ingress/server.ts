import { performance } from 'node:perf_hooks';
import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from 'uWebSockets.js';
import { MsgbridgeError } from '../platform/errors.js';
import { HEADER, SIGNATURE_HEADER } from '../contracts/headers.js';
import type { PublishCallback, PublishRecord } from '../kafka/batching-publisher.js';
import type { Logger } from '../platform/logger.js';
import { NOOP_TRACER, startKafkaSendSpan, type TraceSpan, type Tracer } from '../platform/tracing.js';
import { loadUws } from '../platform/uws.js';
import { Exchanges, type Exchange } from './exchanges.js';
import { addressOf, FramingGuard } from './framing-guard.js';
import { isWebhookTopic, type WebhookDecision, type WebhookHandler } from './handle-webhook.js';
import { httpStatusOf } from './http-status.js';
import type { IngressMetrics } from './metrics.js';
import type { ReceivingLimits } from './receiving.js';
import { Responder } from './responder.js';

/**
 * The uWebSockets.js adapter: routes, and a webhook's path through the parts of this folder
 * (README.md): framing guard → precheck (handler) → admission (exchanges) → body → decision
 * (handler) → publish → answer (responder). uWS rules followed here: the request object is
 * read synchronously (it does not outlive the handler), onAborted is registered before
 * anything asynchronous, every body chunk is copied before the callback returns (uWS neuters
 * it), and every write after the handler returned is corked.
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
  /** OpenTelemetry (src/platform/README.md, "Tracing"); default off. */
  tracer?: Tracer;
}

export interface IngressServer {
  readonly port: number;
  /** Webhook requests admitted and not yet answered (or aborted). */
  readonly inFlight: number;
  /**
   * From now on: new webhook requests get 503 and the connection closes.
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
  /**
   * Closes the listening socket and every connection, idle keep-alive ones included. A worker
   * thread must before it ends: sockets uWS still holds then abort the whole process.
   */
  closeAll(): void;
}

/** Ends a webhook's server span with its answer's status (a 5xx marks it failed). */
function endWebhookSpan(ex: Exchange, status: number): void {
  const span = ex.span!;
  span.setAttribute('http.response.status_code', status);
  if (status >= 500) span.fail(String(status));
  span.end();
}

function endSendSpans(ex: Exchange, send: TraceSpan, errorCode: string | undefined, status: number): void {
  if (errorCode !== undefined) send.fail(errorCode);
  send.end();
  endWebhookSpan(ex, status);
}

/**
 * The adapter as a class: one instance per listening app. Its parts (responder, guard,
 * exchanges) and the handlers uWS calls are fields and methods, so each step of a webhook's
 * path has a name; startIngressServer is the factory the rest of msgbridge calls.
 */
export function startIngressServer(options: IngressServerOptions): Promise<IngressServer> {
  return new UwsIngressServer(options).listen();
}

class UwsIngressServer {
  private readonly uws = loadUws();
  private readonly handler: WebhookHandler;
  private readonly publisher: PublisherPort;
  private readonly metrics: IngressMetrics;
  private readonly logger: Logger;
  private readonly responder: Responder;
  private readonly guard: FramingGuard;
  private readonly exchanges: Exchanges;
  private readonly app: TemplatedApp;
  private readonly tracer: Tracer;
  private listenSocket: us_listen_socket | undefined;

  constructor(private readonly options: IngressServerOptions) {
    const { handler, publisher, metrics, logger } = options;
    this.handler = handler;
    this.publisher = publisher;
    this.metrics = metrics;
    this.logger = logger;
    this.responder = new Responder(metrics, logger, options.retryAfterSeconds);
    this.guard = new FramingGuard(options.chunkedBodies, this.responder, metrics, logger);
    this.exchanges = new Exchanges({
      publisher,
      memoryBudgetBytes: options.memoryBudgetBytes,
      receiving: options.receiving,
      bodyTimeoutMs: options.bodyTimeoutMs,
      maxBodyBytes: handler.maxBodyBytes,
      responder: this.responder,
      logger,
      addressOf,
    });
    this.tracer = options.tracer ?? NOOP_TRACER;
    this.app = this.uws.App();
    this.routes();
  }

  /**
   * Every route, each behind the framing guard: webhooks only. /healthz, /readyz and /metrics are
   * on the admin port (index.ts): here they are 404 like any other path, so the provider's side
   * of the network learns nothing of the businesses, topics or rates.
   */
  private routes(): void {
    const route = (r: (res: HttpResponse, req: HttpRequest) => void) => this.guard.wrap(r);
    const webhookMethodNotAllowed = this.methodNotAllowed('POST');
    const notFound = (res: HttpResponse, req: HttpRequest) => this.notFound(res, req);
    this.app
      .post(
        '/webhooks/:businessId/:topic',
        route((res, req) => this.onWebhook(res, req, req.getParameter(1))),
      )
      .post(
        '/webhooks/:businessId',
        route((res, req) => this.onWebhook(res, req, undefined)),
      )
      // An address that does not exist is 404 whatever the method, as for POST.
      .any(
        '/webhooks/:businessId/:topic',
        route((res, req) =>
          isWebhookTopic(req.getParameter(1)) ? webhookMethodNotAllowed(res, req) : notFound(res, req),
        ),
      )
      .any('/webhooks/:businessId', route(webhookMethodNotAllowed))
      .any('/*', route(notFound));
  }

  private onWebhook(res: HttpResponse, req: HttpRequest, pathTopic: string | undefined): void {
    const { exchanges, responder, metrics, logger } = this;
    // Everything from the request is read now: it does not survive this call.
    const ex: Exchange = {
      res,
      businessId: req.getParameter(0),
      pathTopic,
      signature: req.getHeader(SIGNATURE_HEADER),
      contentType: req.getHeader('content-type'),
      contentEncoding: req.getHeader('content-encoding'),
      traceparent: req.getHeader('traceparent'),
      receivedAt: Date.now(),
      startedAt: performance.now(),
      chunks: undefined,
      received: 0,
      aborted: false,
      answered: false,
      active: false,
      span: undefined,
    };
    // Off, tracing costs this one test: the traceparent above passes through as it came.
    if (this.tracer.enabled) this.startWebhookSpan(ex, req);
    const early = this.handler.precheck({
      businessId: ex.businessId,
      pathTopic,
      contentLength: req.getHeader('content-length'),
      contentEncoding: ex.contentEncoding,
    });
    if (early) {
      // Answered before the body is read; uWS discards the rest of a body it was told the
      // length of. An oversized body closes the connection so that none of it is buffered.
      responder.refuse(ex, early.code, early.reason, early.message, { close: early.code === 'BODY_TOO_LARGE' });
      if (ex.span) endWebhookSpan(ex, httpStatusOf(early.code));
      return;
    }
    if (!exchanges.admit(ex)) {
      // Every refusal of admission is a 503 (draining, Kafka, memory, room).
      if (ex.span) endWebhookSpan(ex, 503);
      return;
    }
    res.onAborted(() => {
      ex.aborted = true;
      if (ex.span && !ex.answered) {
        ex.span.fail('aborted', 'the client went away before the answer');
        ex.span.end();
      }
      if (!ex.answered) metrics.request(ex.pathTopic ?? 'unknown', 'aborted');
      exchanges.finish(ex);
    });
    res.onData((chunk, isLast) => {
      if (ex.answered || ex.aborted) return;
      const body = exchanges.receive(ex, chunk, isLast);
      if (body === undefined) return;
      try {
        this.decide(ex, body);
      } catch (err) {
        // A bug must cost one request, not the process (uWS would not survive a throw).
        logger.error({ err, business: ex.businessId }, 'webhook handling failed');
        responder.write(ex, 500, '{"error":{"code":"INTERNAL","message":"internal error"}}');
        if (ex.span) endWebhookSpan(ex, 500);
        exchanges.finish(ex);
      }
    });
  }

  /** The whole body is in: the handler's decision, then publish (or refuse). */
  private decide(ex: Exchange, body: Buffer): void {
    const { exchanges, responder } = this;
    const decision: WebhookDecision = this.handler.handle({
      businessId: ex.businessId,
      pathTopic: ex.pathTopic,
      body,
      signature: ex.signature === '' ? undefined : ex.signature,
      contentType: ex.contentType === '' ? undefined : ex.contentType,
      contentEncoding: ex.contentEncoding,
      traceparent: ex.traceparent === '' ? undefined : ex.traceparent,
      receivedAt: ex.receivedAt,
    });
    if (decision.kind === 'reject') {
      responder.refuse(ex, decision.code, decision.reason, decision.message);
      if (ex.span) {
        ex.span.setAttribute('msgbridge.refusal', decision.reason);
        endWebhookSpan(ex, httpStatusOf(decision.code));
      }
      exchanges.finish(ex);
      return;
    }
    const topic = decision.webhookTopic ?? 'unknown';
    const send = ex.span ? this.startSendSpan(ex, decision) : undefined;
    const refused = this.publisher.publish(decision.record, (err) => {
      if (err)
        responder.refuse(ex, err.code, err.code.toLowerCase(), err.message, { topic, eventId: decision.eventId });
      else this.acknowledge(ex, decision, topic);
      if (send) endSendSpans(ex, send, err?.code, err ? httpStatusOf(err.code) : 200);
      exchanges.finish(ex);
    });
    if (refused) {
      responder.refuse(ex, refused.code, refused.code.toLowerCase(), refused.message, {
        topic,
        eventId: decision.eventId,
      });
      if (send) endSendSpans(ex, send, refused.code, httpStatusOf(refused.code));
      exchanges.finish(ex);
    }
  }

  /**
   * The webhook's server span (src/platform/README.md, "Tracing"): a child of the provider's
   * `traceparent` when it sent a valid one, else the root of a new trace.
   */
  private startWebhookSpan(ex: Exchange, req: HttpRequest): void {
    const tracestate = req.getHeader('tracestate');
    const route = ex.pathTopic === undefined ? '/webhooks/{businessId}' : '/webhooks/{businessId}/{topic}';
    ex.span = this.tracer.startSpan(`POST ${route}`, 'server', {
      parent: ex.traceparent === '' ? undefined : ex.traceparent,
      tracestate: tracestate === '' ? undefined : tracestate,
      attributes: {
        'http.request.method': 'POST',
        'http.route': route,
        'url.scheme': 'http',
        'msgbridge.business_id': ex.businessId.length > 128 ? `${ex.businessId.slice(0, 128)}…` : ex.businessId,
      },
    });
  }

  /**
   * The record's producer span, a child of the webhook's: its `traceparent` replaces the one the
   * decision copied from the request, so the record continues this trace (the provider's one,
   * or the new one).
   */
  private startSendSpan(ex: Exchange, decision: Extract<WebhookDecision, { kind: 'publish' }>): TraceSpan {
    const span = ex.span!;
    span.addEvent(decision.destination === 'dlq' ? 'signature verified; dead-lettered' : 'signature verified');
    if (decision.webhookTopic) span.setAttribute('msgbridge.webhook_topic', decision.webhookTopic);
    span.setAttribute('msgbridge.event_id', decision.eventId);
    const send = startKafkaSendSpan(this.tracer, span, decision.record.topic, decision.record.key);
    decision.record.headers[HEADER.traceparent] = send.traceparent;
    return send;
  }

  /** Kafka holds it: 200. */
  private acknowledge(ex: Exchange, decision: Extract<WebhookDecision, { kind: 'publish' }>, topic: string): void {
    const { metrics, responder } = this;
    metrics.publishLatency(decision.destination, (performance.now() - ex.startedAt) / 1000);
    if (decision.destination === 'dlq') {
      metrics.request(topic, 'dead_lettered');
      metrics.deadLetter(decision.deadLetter!.reason);
      this.logger.info(
        { business: ex.businessId, topic, eventId: decision.eventId, reason: decision.deadLetter!.detail },
        'authentic webhook dead-lettered',
      );
      responder.write(
        ex,
        200,
        JSON.stringify({ status: 'dead-lettered', eventId: decision.eventId, reason: decision.deadLetter!.reason }),
      );
    } else {
      metrics.request(topic, 'published');
      responder.write(ex, 200, `{"status":"accepted","eventId":"${decision.eventId}"}`);
    }
  }

  private methodNotAllowed(allow: string): (res: HttpResponse, req: HttpRequest) => void {
    return (res, req) => {
      this.logger.warn({ status: 405, method: req.getMethod(), path: req.getUrl() }, 'method not allowed');
      this.metrics.request('unknown', 'method_not_allowed');
      this.responder.write(
        Responder.of(res),
        405,
        JSON.stringify({ error: { code: 'METHOD_NOT_ALLOWED', message: `use ${allow}` } }),
        { allow },
      );
    };
  }

  private notFound(res: HttpResponse, req: HttpRequest): void {
    this.logger.warn({ status: 404, method: req.getMethod(), path: req.getUrl() }, 'no such route');
    this.metrics.request('unknown', 'not_found');
    this.responder.write(Responder.of(res), 404, '{"error":{"code":"NOT_FOUND","message":"no such route"}}');
  }

  /** Resolves once the app listens, with the IngressServer the rest of the ingress drives. */
  listen(): Promise<IngressServer> {
    const { host, port } = this.options;
    return new Promise((resolve, reject) => {
      this.app.listen(host, port, (socket: us_listen_socket | false) => {
        if (!socket) {
          this.exchanges.close();
          reject(
            new MsgbridgeError(
              'INVALID_ARGUMENT',
              `the ingress cannot listen on ${host}:${port} (in use, or not an address of this host)`,
            ),
          );
          return;
        }
        this.listenSocket = socket;
        resolve(this.view(this.uws.us_socket_local_port(socket as never)));
      });
    });
  }

  private close(): void {
    this.exchanges.close();
    if (this.listenSocket) this.uws.us_listen_socket_close(this.listenSocket);
    this.listenSocket = undefined;
  }

  private closeAll(): void {
    this.close();
    // App.close() is in every build msgbridge loads (src/uws.ts), not in every build's types.
    (this.app as TemplatedApp & { close?: () => void }).close?.();
  }

  /** What the caller drives: a plain object whose functions need no `this`. */
  private view(port: number): IngressServer {
    const { exchanges } = this;
    return {
      port,
      get inFlight() {
        return exchanges.inFlight;
      },
      stopAccepting: (bodyDeadlineMs) => exchanges.stopAccepting(bodyDeadlineMs),
      whenIdle: () => exchanges.whenIdle(),
      hasRoom: () => exchanges.hasRoom(),
      close: () => this.close(),
      closeAll: () => this.closeAll(),
    };
  }
}
