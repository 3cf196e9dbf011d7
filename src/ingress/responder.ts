import type { HttpResponse } from 'uWebSockets.js';
import type { ErrorCode } from '../platform/errors.js';
import { signaturePrefix, type Logger } from '../platform/logger.js';
import { isWebhookTopic } from './handle-webhook.js';
import { httpStatusOf, statusLine } from './http-status.js';
import type { IngressMetrics, IngressOutcome } from './metrics.js';

/** Anything that can be answered once: a response and whether it is still wanted. */
export interface Answerable {
  res: HttpResponse;
  aborted: boolean;
  answered: boolean;
}

/** What a refusal logs about its request (all of it from the request, so from anyone). */
export interface Refusable extends Answerable {
  businessId: string;
  pathTopic: string | undefined;
  signature: string;
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

/**
 * Writes the ingress's answers: one complete JSON answer per request, corked (a write after the
 * handler returned must be), a no-op once the client went away; a refusal is counted and
 * logged with a bounded business id and never more than a signature's prefix.
 */
export class Responder {
  private readonly retryAfter: string;

  constructor(
    private readonly metrics: IngressMetrics,
    private readonly logger: Logger,
    retryAfterSeconds: number,
  ) {
    this.retryAfter = String(retryAfterSeconds);
  }

  /** A fresh answerable for a response no one else tracks. */
  static of(res: HttpResponse): Answerable {
    return { res, aborted: false, answered: false };
  }

  write(
    ex: Answerable,
    status: number,
    body: string,
    extra?: { retryAfter?: boolean; close?: boolean; allow?: string },
  ): void {
    if (ex.aborted || ex.answered) return;
    ex.answered = true;
    ex.res.cork(() => {
      ex.res.writeStatus(statusLine(status)).writeHeader('content-type', JSON_TYPE);
      if (extra?.retryAfter) ex.res.writeHeader('retry-after', this.retryAfter);
      if (extra?.allow) ex.res.writeHeader('allow', extra.allow);
      ex.res.end(body, extra?.close === true);
    });
  }

  refuse(
    ex: Refusable,
    code: ErrorCode,
    reason: string,
    message: string,
    extra: { close?: boolean; topic?: string; eventId?: string } = {},
  ): void {
    const status = httpStatusOf(code);
    const topic = extra.topic ?? (isWebhookTopic(ex.pathTopic) ? ex.pathTopic : 'unknown');
    this.metrics.request(topic, OUTCOME_OF[code] ?? 'aborted');
    this.logger.warn(
      {
        status,
        code,
        reason,
        business: ex.businessId.length > 128 ? `${ex.businessId.slice(0, 128)}…` : ex.businessId,
        topic,
        eventId: extra.eventId,
        signaturePrefix: signaturePrefix(ex.signature || undefined),
      },
      'webhook not accepted',
    );
    this.write(ex, status, JSON.stringify({ error: { code, message } }), {
      retryAfter: status === 503,
      close: extra.close,
    });
  }
}
