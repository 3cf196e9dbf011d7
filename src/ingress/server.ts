import { performance } from 'node:perf_hooks';
import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from 'uWebSockets.js';
import { MsgbridgeError } from '../platform/errors.js';
import { SIGNATURE_HEADER } from '../contracts/headers.js';
import type { PublishCallback, PublishRecord } from '../kafka/batching-publisher.js';
import type { Logger } from '../platform/logger.js';
import { loadUws } from '../platform/uws.js';
import { Exchanges, type Exchange } from './exchanges.js';
import { addressOf, FramingGuard } from './framing-guard.js';
import { isWebhookTopic, type WebhookDecision, type WebhookHandler } from './handle-webhook.js';
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
  /** With worker threads (workers.ts): /readyz is 200 only when this says the other workers are ready too. */
  othersReady?: () => boolean;
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
  /**
   * Closes the listening socket and every connection, idle keep-alive ones included. A worker
   * thread must before it ends: sockets uWS still holds then abort the whole process.
   */
  closeAll(): void;
}

export function startIngressServer(options: IngressServerOptions): Promise<IngressServer> {
  const uws = loadUws();
  const { handler, publisher, metrics, logger } = options;
  const responder = new Responder(metrics, logger, options.retryAfterSeconds);
  const guard = new FramingGuard(options.chunkedBodies, responder, metrics, logger);
  const exchanges = new Exchanges({
    publisher,
    memoryBudgetBytes: options.memoryBudgetBytes,
    receiving: options.receiving,
    bodyTimeoutMs: options.bodyTimeoutMs,
    maxBodyBytes: handler.maxBodyBytes,
    responder,
    logger,
    addressOf,
  });

  const onWebhook = (res: HttpResponse, req: HttpRequest, pathTopic: string | undefined) => {
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
    };
    const early = handler.precheck({ businessId: ex.businessId, pathTopic, contentLength: req.getHeader('content-length'), contentEncoding: ex.contentEncoding });
    if (early) {
      // Answered before the body is read; uWS discards the rest of a body it was told the
      // length of. An oversized body closes the connection so that none of it is buffered.
      responder.refuse(ex, early.code, early.reason, early.message, { close: early.code === 'BODY_TOO_LARGE' });
      return;
    }
    if (!exchanges.admit(ex)) return;
    res.onAborted(() => {
      ex.aborted = true;
      if (!ex.answered) metrics.request(ex.pathTopic ?? 'unknown', 'aborted');
      exchanges.finish(ex);
    });
    res.onData((chunk, isLast) => {
      if (ex.answered || ex.aborted) return;
      const body = exchanges.receive(ex, chunk, isLast);
      if (body === undefined) return;
      try {
        decide(ex, body);
      } catch (err) {
        // A bug must cost one request, not the process (uWS would not survive a throw).
        logger.error({ err, business: ex.businessId }, 'webhook handling failed');
        responder.write(ex, 500, '{"error":{"code":"INTERNAL","message":"internal error"}}');
        exchanges.finish(ex);
      }
    });
  };

  const decide = (ex: Exchange, body: Buffer) => {
    const decision: WebhookDecision = handler.handle({
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
      exchanges.finish(ex);
      return;
    }
    const topic = decision.webhookTopic ?? 'unknown';
    const refused = publisher.publish(decision.record, (err) => {
      if (err) responder.refuse(ex, err.code, err.code.toLowerCase(), err.message, { topic, eventId: decision.eventId });
      else acknowledge(ex, decision, topic);
      exchanges.finish(ex);
    });
    if (refused) {
      responder.refuse(ex, refused.code, refused.code.toLowerCase(), refused.message, { topic, eventId: decision.eventId });
      exchanges.finish(ex);
    }
  };

  /** Kafka holds it: 200. */
  const acknowledge = (ex: Exchange, decision: Extract<WebhookDecision, { kind: 'publish' }>, topic: string) => {
    metrics.publishLatency(decision.destination, (performance.now() - ex.startedAt) / 1000);
    if (decision.destination === 'dlq') {
      metrics.request(topic, 'dead_lettered');
      metrics.deadLetter(decision.deadLetter!.reason);
      logger.info({ business: ex.businessId, topic, eventId: decision.eventId, reason: decision.deadLetter!.detail }, 'authentic webhook dead-lettered');
      responder.write(ex, 200, JSON.stringify({ status: 'dead-lettered', eventId: decision.eventId, reason: decision.deadLetter!.reason }));
    } else {
      metrics.request(topic, 'published');
      responder.write(ex, 200, `{"status":"accepted","eventId":"${decision.eventId}"}`);
    }
  };

  const methodNotAllowed = (allow: string) => (res: HttpResponse, req: HttpRequest) => {
    logger.warn({ status: 405, method: req.getMethod(), path: req.getUrl() }, 'method not allowed');
    metrics.request('unknown', 'method_not_allowed');
    responder.write(Responder.of(res), 405, JSON.stringify({ error: { code: 'METHOD_NOT_ALLOWED', message: `use ${allow}` } }), { allow });
  };
  const webhookMethodNotAllowed = methodNotAllowed('POST');
  const notFound = (res: HttpResponse, req: HttpRequest) => {
    logger.warn({ status: 404, method: req.getMethod(), path: req.getUrl() }, 'no such route');
    metrics.request('unknown', 'not_found');
    responder.write(Responder.of(res), 404, '{"error":{"code":"NOT_FOUND","message":"no such route"}}');
  };
  const metricsRoute = (res: HttpResponse) => {
    const ex = Responder.of(res);
    res.onAborted(() => (ex.aborted = true));
    options.metricsText().then(
      ({ contentType, body }) => {
        if (ex.aborted) return;
        ex.answered = true;
        res.cork(() => res.writeStatus('200 OK').writeHeader('content-type', contentType).end(body));
      },
      (err: unknown) => {
        logger.error({ err }, 'metrics collection failed');
        responder.write(ex, 500, '{"error":{"code":"INTERNAL","message":"metrics collection failed"}}');
      },
    );
  };

  const app: TemplatedApp = uws.App();
  const route = (r: (res: HttpResponse, req: HttpRequest) => void) => guard.wrap(r);
  app
    .post('/webhooks/:businessId/:topic', route((res, req) => onWebhook(res, req, req.getParameter(1))))
    .post('/webhooks/:businessId', route((res, req) => onWebhook(res, req, undefined)))
    // An address that does not exist is 404 whatever the method, as for POST.
    .any('/webhooks/:businessId/:topic', route((res, req) => (isWebhookTopic(req.getParameter(1)) ? webhookMethodNotAllowed(res, req) : notFound(res, req))))
    .any('/webhooks/:businessId', route(webhookMethodNotAllowed))
    .get('/healthz', route((res) => responder.write(Responder.of(res), 200, '{"status":"alive"}')))
    .get(
      '/readyz',
      route((res) => {
        const ready = exchanges.isAccepting && publisher.ready && exchanges.hasRoom() && (options.othersReady?.() ?? true);
        if (!ready) logger.debug({ status: 503 }, 'not ready');
        responder.write(Responder.of(res), ready ? 200 : 503, ready ? '{"ready":true}' : '{"ready":false}', { retryAfter: !ready });
      }),
    )
    .get('/metrics', route(metricsRoute))
    .any('/healthz', route(methodNotAllowed('GET')))
    .any('/readyz', route(methodNotAllowed('GET')))
    .any('/metrics', route(methodNotAllowed('GET')))
    .any('/*', route(notFound));

  return new Promise((resolve, reject) => {
    app.listen(options.host, options.port, (socket: us_listen_socket | false) => {
      if (!socket) {
        exchanges.close();
        reject(new MsgbridgeError('INVALID_ARGUMENT', `the ingress cannot listen on ${options.host}:${options.port} (in use, or not an address of this host)`));
        return;
      }
      const port = uws.us_socket_local_port(socket as never);
      let listenSocket: us_listen_socket | undefined = socket;
      const close = () => {
        exchanges.close();
        if (listenSocket) uws.us_listen_socket_close(listenSocket);
        listenSocket = undefined;
      };
      resolve({
        port,
        get inFlight() {
          return exchanges.inFlight;
        },
        stopAccepting: (bodyDeadlineMs) => exchanges.stopAccepting(bodyDeadlineMs),
        whenIdle: () => exchanges.whenIdle(),
        hasRoom: () => exchanges.hasRoom(),
        close,
        closeAll() {
          close();
          // App.close() is in every build msgbridge loads (src/uws.ts), not in every build's types.
          (app as TemplatedApp & { close?: () => void }).close?.();
        },
      });
    });
  });
}
