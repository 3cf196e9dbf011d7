import { isRecordTooLarge, type RecordToWrite } from '../kafka/port.js';
import type { Logger } from '../platform/logger.js';
import { HEADER } from '../contracts/headers.js';
import { headerText, NOOP_TRACER, startKafkaProcessSpan, startKafkaSendSpan, type TraceSpan, type Tracer } from '../platform/tracing.js';
import type { Admission, CircuitBreaker } from './circuit-breaker.js';
import { decideConversation, fallbackBody, outsideWindowFailure, type ConversationWindowMode } from './conversation-guard.js';
import type { WindowLookup } from './conversation-table.js';
import type { WorkContext, WorkOutcome } from './keyed-runner.js';
import type { SenderMetrics } from './metrics.js';
import type { ProviderClient } from './provider-client.js';
import type { RateLimiter } from './rate-limiter.js';
import type { DlqJob, Job, SendJob } from './requests.js';
import { acceptedResult, expiredResult, failureOf, fitDlqRecord, fromRepeat, rejectedResult, resultHeaders, storedResult, type StoredResult } from './result-records.js';
import { decide, maybeCreated, providerFailing, type AttemptOutcome, type RetryPolicyOptions } from './retry-policy.js';
import type { Semaphore } from './semaphore.js';
import { CompletedResults } from './completed-results.js';
import { sleep } from '../platform/sleep.js';

/**
 * The work of one request (README "Guarantees"): DLQ records are published with the rejected
 * result they owe; send requests pass their expiry, the conversation window guard (README
 * "Conversation window": a text to a closed window is refused or replaced by its fallback
 * template before any call), the business's circuit, its token bucket and a call slot, are
 * sent and retried per the policy, and their one terminal result is published. Returns `done` only once what it owes Kafka is acknowledged, so the runner never
 * commits past an unpublished result.
 *
 * Duplicates: a request whose (business, requestId) this process completed for good
 * (accepted, or rejected for a reason that will not change) is not sent again; its stored
 * result is published again for the new record (same `event-id`). A retriable rejection or an
 * expiry is not remembered, so a resubmission is sent. Completed ids are kept in a bounded LRU
 * (`completedMax`). A duplicate arriving while the first is still in flight waits for it.
 */
export interface ProcessorOptions {
  /** `parent`: the request's span, which the provider call's HTTP client span continues (tracing on). */
  client: Pick<ProviderClient, 'send'>;
  publish: (topic: string, record: RecordToWrite) => Promise<void>;
  /** `try*`: the same answer without a promise when it is immediate (optional, for fakes). */
  limiter: Pick<RateLimiter, 'acquire' | 'slowDown'> & Partial<Pick<RateLimiter, 'tryAcquire'>>;
  circuits: Pick<CircuitBreaker, 'admit' | 'holds' | 'settle' | 'cancel'> & Partial<Pick<CircuitBreaker, 'tryAdmit'>>;
  /** Bounds the provider calls in flight. */
  callSlots: Pick<Semaphore, 'acquire' | 'release'> & Partial<Pick<Semaphore, 'tryAcquire'>>;
  /** business id → API key */
  apiKeys: ReadonlyMap<string, string>;
  topics: { results: string; dlq: string };
  policy: RetryPolicyOptions;
  /** Retry after an attempt that may have created the message (at least once) or reject it (at most once). */
  retryMaybeSent: boolean;
  /** Largest DLQ record (bytes) the DLQ topic takes; bigger copies become references. */
  dlqMaxBytes: number;
  completedMax: number;
  metrics: SenderMetrics;
  logger: Logger;
  random?: () => number;
  /** Wall clock (default Date.now). */
  now?: () => number;
  /** The conversation window guard (README "Conversation window"); absent = `off`. */
  conversations?: ConversationGuardOptions;
  /**
   * OpenTelemetry (src/platform/README.md, "Tracing"; default off): a consumer span per
   * request continuing its `traceparent`, the provider calls as its children, a producer span
   * per result whose `traceparent` the result carries. `requestsTopic` and `groupId` name the
   * consumer side.
   */
  tracing?: { tracer: Tracer; requestsTopic: string; groupId: string };
}

export interface ConversationGuardOptions {
  mode: ConversationWindowMode;
  /** `sender.conversationWindowGraceMs`. */
  graceMs: number;
  /** The customer's window, from the conversation table. */
  lookup(businessId: string, customer: string): WindowLookup;
}

export interface Processor {
  work(job: Job, context: WorkContext): Promise<WorkOutcome>;
  /** Request ids remembered as completed. */
  readonly completedCount: number;
}

function resultLabel(outcome: AttemptOutcome): string {
  switch (outcome.kind) {
    case 'accepted':
    case 'invalid-response':
      return '2xx';
    case 'http-error':
      return outcome.status >= 500 ? '5xx' : outcome.status >= 400 ? '4xx' : `${Math.floor(outcome.status / 100)}xx`;
    case 'timeout':
      return 'timeout';
    case 'network':
      return 'network';
  }
}

/** What a send ended with: a result to publish, or nothing when told to stop first. */
type SendEnd = { result: StoredResult; remember: boolean } | undefined;

/** The attempts of one request so far. */
interface Progress {
  attempts: number;
  /** Some attempt may have created a message without the relay learning its id. */
  maybeSent: boolean;
  firstAttemptAt: number | undefined;
  last: AttemptOutcome | undefined;
}

export function createProcessor(options: ProcessorOptions): Processor {
  return new RequestProcessor(options);
}

class RequestProcessor implements Processor {
  private readonly random: () => number;
  private readonly now: () => number;
  /** (business, requestId) → its final result as kept for repeats (`withoutContent`), off the heap. */
  private readonly completed: CompletedResults;
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly tracer: Tracer;

  constructor(private readonly options: ProcessorOptions) {
    this.random = options.random ?? Math.random;
    this.now = options.now ?? Date.now;
    this.tracer = options.tracing?.tracer ?? NOOP_TRACER;
    this.completed = new CompletedResults({ maxEntries: options.completedMax });
  }

  get completedCount(): number {
    return this.completed.size;
  }

  work(job: Job, context: WorkContext): Promise<WorkOutcome> {
    // Off, tracing costs this one test (not even a promise of its own).
    return this.tracer.enabled ? this.tracedWork(job, context) : this.workOn(job, context, undefined);
  }

  private async tracedWork(job: Job, context: WorkContext): Promise<WorkOutcome> {
    const span = this.startProcessSpan(job, context);
    try {
      const outcome = await this.workOn(job, context, span);
      if (outcome === 'abandoned') span.fail('abandoned', 'stopped before its result was published (it will be processed again)');
      return outcome;
    } catch (err) {
      span.fail((err as Error)?.name ?? 'Error', (err as Error)?.message);
      throw err;
    } finally {
      span.end();
    }
  }

  /** The request's consumer span: a child of its record's `traceparent` (src/platform/README.md, "Tracing"). */
  private startProcessSpan(job: Job, context: WorkContext): TraceSpan {
    const tracing = this.options.tracing!;
    const headers = job.kind === 'send' ? job.headers : job.record.headers;
    const span = startKafkaProcessSpan(
      this.tracer,
      { topic: tracing.requestsTopic, partition: Number(context.partition), offset: String(context.offset), traceparent: headerText(headers[HEADER.traceparent]) },
      tracing.groupId,
    );
    if (job.kind === 'send') {
      span.setAttribute('msgbridge.request_id', job.request.requestId);
      span.setAttribute('msgbridge.business_id', job.businessId);
    } else {
      span.setAttribute('msgbridge.dlq_code', job.code);
    }
    return span;
  }

  private async workOn(job: Job, context: WorkContext, span: TraceSpan | undefined): Promise<WorkOutcome> {
    if (job.kind === 'dlq') return this.dead(job, context, span);
    const { logger, metrics } = this.options;
    const id = `${job.businessId}\u0000${job.request.requestId}`;
    for (;;) {
      const kept = this.completed.get(id);
      if (kept !== undefined) {
        this.completed.keep(id, kept);
        const stored = fromRepeat(kept);
        logger.info({ requestId: job.request.requestId, businessId: job.businessId }, 'requestId already completed in this process: publishing its result again instead of sending');
        metrics.outcome('duplicate', job.businessId);
        span?.addEvent('requestId already completed in this process: its result is published again');
        return (await this.publishSendResult(stored, job, context, span)) ? 'done' : 'abandoned';
      }
      const running = this.inFlight.get(id);
      if (!running) break;
      await running;
    }

    let release!: () => void;
    this.inFlight.set(id, new Promise<void>((resolve) => (release = resolve)));
    let end: SendEnd;
    try {
      end = await this.send(job, context, span);
      if (end?.remember) this.completed.keep(id, end.result.withoutContent);
    } finally {
      this.inFlight.delete(id);
      release();
    }
    if (!end) return 'abandoned';
    return (await this.publishSendResult(end.result, job, context, span)) ? 'done' : 'abandoned';
  }

  /** The DLQ copy and, when the request id was readable, its rejected result. */
  private async dead(job: DlqJob, context: WorkContext, span: TraceSpan | undefined): Promise<WorkOutcome> {
    const { options } = this;
    const record = fitDlqRecord(job.record, options.dlqMaxBytes);
    const writes = [this.publishDurably(options.topics.dlq, record, context, (r) => fitDlqRecord(r, 0))];
    if (job.result) writes.push(this.publishResult(job.result, job.record.headers, job.receivedAt, context, span));
    if (!(await Promise.all(writes)).every(Boolean)) return 'abandoned';
    options.logger.warn({ reason: job.reason, code: job.code, requestId: job.requestId, partition: context.partition, offset: context.offset }, 'request sent to the DLQ');
    options.metrics.outcome('dlq', job.record.headers['business-id']?.toString());
    return 'done';
  }

  /** Sends with retries until a terminal result, or undefined when told to stop first. */
  private async send(requested: SendJob, context: WorkContext, span: TraceSpan | undefined): Promise<SendEnd> {
    const { options, now } = this;
    const apiKey = options.apiKeys.get(requested.businessId);
    if (apiKey === undefined) throw new Error(`no API key for business ${requested.businessId}`);
    const progress: Progress = { attempts: 0, maybeSent: false, firstAttemptAt: undefined, last: undefined };
    const guarded = await this.guard(requested, progress, context);
    if ('end' in guarded) return guarded.end;
    const { job } = guarded;
    for (;;) {
      if (context.stop.aborted) return undefined;
      if (now() >= job.expiry.at) return this.expire(job, progress);
      const budgetEnd = progress.firstAttemptAt === undefined ? Infinity : progress.firstAttemptAt + options.policy.budgetMs;
      if (progress.last && now() >= budgetEnd) return this.reject(job, progress, progress.last, true);
      const startedAt = now();
      const outcome = await this.attempt(job, apiKey, context, Math.min(job.expiry.at, budgetEnd), span);
      if (!outcome) continue;
      progress.attempts += 1;
      progress.firstAttemptAt ??= startedAt;
      progress.last = outcome;
      const uncertain = maybeCreated(outcome);
      progress.maybeSent ||= uncertain;
      const decision = decide(outcome, progress.attempts, progress.firstAttemptAt, options.policy, now(), this.random);
      if (decision.action === 'succeed' && outcome.kind === 'accepted') return this.accept(job, progress, outcome.messageId);
      if (decision.action !== 'retry') return this.reject(job, progress, outcome, decision.action === 'fail' && decision.retriable);
      // The provider has no idempotency key: after a lost answer, only resend when configured to.
      if (uncertain && !options.retryMaybeSent) return this.reject(job, progress, outcome, false);
      options.metrics.retry(decision.reason);
      options.logger.debug({ requestId: job.request.requestId, attempts: progress.attempts, reason: decision.reason, delayMs: decision.delayMs, outcome: outcome.kind }, 'send failed; retrying');
      if (!(await sleep(Math.max(0, Math.min(decision.delayMs, job.expiry.at - now())), context.stop))) return undefined;
    }
  }

  /**
   * The conversation window guard, before the first attempt: the request as it is, its fallback
   * template, or its end (refused, expired, or undefined when told to stop while it waited for
   * a window that may be opening).
   */
  private async guard(job: SendJob, progress: Progress, context: WorkContext): Promise<{ job: SendJob } | { end: SendEnd }> {
    const { conversations, metrics, logger } = this.options;
    if (!conversations || conversations.mode === 'off') return { job };
    const requestTime = job.producedAt ?? job.receivedAt;
    for (;;) {
      if (context.stop.aborted) return { end: undefined };
      const now = this.now();
      if (now >= job.expiry.at) return { end: this.expire(job, progress) };
      const decision = decideConversation({
        mode: conversations.mode,
        request: job.request,
        lookup: () => conversations.lookup(job.businessId, job.recipient),
        now,
        requestTime,
        graceMs: conversations.graceMs,
      });
      switch (decision.action) {
        case 'send':
          if (decision.why !== 'template' && decision.why !== 'off') metrics.conversation(decision.why, job.businessId);
          return { job };
        case 'wait':
          // Polled: a lookup is a map read, and the wait ends at most graceMs after the request was produced.
          if (!(await sleep(Math.max(1, Math.min(100, decision.untilMs - now, job.expiry.at - now)), context.stop))) return { end: undefined };
          continue;
        case 'fallback': {
          metrics.conversation('fallback', job.businessId);
          logger.info(
            {
              requestId: job.request.requestId,
              businessId: job.businessId,
              templateName: decision.template.templateName,
              windowOpenUntil: decision.window.openUntil && new Date(decision.window.openUntil).toISOString(),
            },
            'conversation window closed: sending the fallback template instead of the text',
          );
          return { job: { ...job, operation: 'template', body: fallbackBody(job.body, job.recipient, decision.template), sentAs: 'template' } };
        }
        case 'reject': {
          metrics.conversation('rejected', job.businessId);
          metrics.outcome('rejected', job.businessId);
          const error = outsideWindowFailure(decision.window);
          logger.info(
            { requestId: job.request.requestId, businessId: job.businessId, code: error.code, windowOpenUntil: error.details.windowOpenUntil },
            'text refused without a provider call: the conversation window is closed',
          );
          // Not remembered: once the customer writes, the same requestId may be sent.
          return { end: { result: storedResult(rejectedResult(job, error, 0, false, new Date(now))), remember: false } };
        }
      }
    }
  }

  /**
   * One attempt through the circuit, the token bucket and a call slot; undefined when stopped,
   * out of time, or the circuit opened while it waited for a token (the caller loops back).
   */
  private async attempt(job: SendJob, apiKey: string, context: WorkContext, untilMs: number, span: TraceSpan | undefined): Promise<AttemptOutcome | undefined> {
    const { client, limiter, circuits, callSlots, metrics } = this.options;
    // Each step answers at once in the common case (closed circuit, a token, a free slot): no promise then.
    if (context.stop.aborted) return undefined;
    const admission: Admission | undefined = circuits.tryAdmit?.(job.businessId) ?? (await circuits.admit(job.businessId, context.stop, untilMs));
    if (!admission) return undefined;
    let settled = false;
    try {
      if (context.stop.aborted) return undefined;
      if (!limiter.tryAcquire?.(job.businessId)) {
        try {
          await limiter.acquire(job.businessId, context.stop);
        } catch {
          return undefined;
        }
      }
      if (context.stop.aborted || !(callSlots.tryAcquire?.() || (await callSlots.acquire(context.stop)))) return undefined;
      try {
        if (this.now() >= untilMs || !circuits.holds(admission)) return undefined;
        metrics.inFlight(1);
        const started = performance.now();
        let outcome: AttemptOutcome;
        try {
          outcome = await client.send(job.operation, job.businessId, apiKey, job.body, context.abort, span);
        } finally {
          metrics.inFlight(-1);
        }
        metrics.providerCall(job.operation, resultLabel(outcome), (performance.now() - started) / 1000);
        circuits.settle(admission, providerFailing(outcome));
        settled = true;
        if (outcome.kind === 'http-error' && outcome.status === 429) limiter.slowDown(job.businessId);
        return outcome;
      } finally {
        callSlots.release();
      }
    } finally {
      if (!settled) circuits.cancel(admission);
    }
  }

  private accept(job: SendJob, progress: Progress, messageId: string): SendEnd {
    this.options.logger.debug({ requestId: job.request.requestId, attempts: progress.attempts, messageId }, 'send accepted');
    this.options.metrics.outcome('accepted', job.businessId);
    return { result: storedResult(acceptedResult(job, messageId, progress.attempts, progress.maybeSent, new Date(this.now()))), remember: true };
  }

  private reject(job: SendJob, progress: Progress, outcome: AttemptOutcome, retriable: boolean): SendEnd {
    const error = failureOf(outcome, retriable);
    const { attempts, maybeSent } = progress;
    // A rejection is an ordinary outcome (the producer reads it on send-results); one that may
    // have created a message anyway is worth an operator's attention.
    const log = maybeSent ? this.options.logger.warn.bind(this.options.logger) : this.options.logger.info.bind(this.options.logger);
    log({ requestId: job.request.requestId, businessId: job.businessId, attempts, httpStatus: error.httpStatus, code: error.code, retriable, maybeSent }, 'send rejected');
    this.options.metrics.outcome('rejected', job.businessId);
    return { result: storedResult(rejectedResult(job, error, attempts, maybeSent, new Date(this.now()))), remember: !retriable };
  }

  private expire(job: SendJob, progress: Progress): SendEnd {
    const { attempts, maybeSent } = progress;
    this.options.logger.info({ requestId: job.request.requestId, businessId: job.businessId, attempts, expiredBy: job.expiry.by, maybeSent }, 'request expired: it will not be sent');
    this.options.metrics.outcome('expired', job.businessId);
    return { result: storedResult(expiredResult(job, attempts, maybeSent, new Date(this.now()))), remember: false };
  }

  /**
   * Publishes until acknowledged; gives up only at the hard deadline. A record the topic
   * refuses as too large is handed to `shrink` (once), never retried as it is.
   */
  private async publishDurably(topic: string, record: RecordToWrite, context: WorkContext, shrink?: (r: RecordToWrite) => RecordToWrite): Promise<boolean> {
    const { metrics, logger } = this.options;
    let current = record;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.options.publish(topic, current);
        return true;
      } catch (error) {
        metrics.publishError();
        if (context.abort.aborted) return false;
        if (shrink && isRecordTooLarge(error)) {
          current = shrink(current);
          shrink = undefined;
          logger.warn({ topic, partition: context.partition, offset: context.offset }, 'the DLQ topic refused the record as too large: publishing a reference to the source record instead');
          continue;
        }
        const delay = Math.min(5000, 100 * 2 ** Math.min(attempt, 6));
        // The publisher logs the failure once; one line per record would flood the log.
        logger.debug({ err: (error as Error)?.message ?? String(error), topic, attempt, retryInMs: delay }, 'publishing to Kafka failed; retrying');
        if (!(await sleep(delay, context.abort))) return false;
      }
    }
  }

  private async publishResult(stored: StoredResult, headers: SendJob['headers'], receivedAt: number, context: WorkContext, span?: TraceSpan): Promise<boolean> {
    const topic = this.options.topics.results;
    const record = { key: stored.key, value: stored.value, headers: resultHeaders(stored, headers, receivedAt) };
    if (!span) return this.publishDurably(topic, record, context);
    // The result continues the request's trace: its traceparent is its producer span's, not the request's.
    const send = startKafkaSendSpan(this.tracer, span, topic, stored.key);
    record.headers[HEADER.traceparent] = send.traceparent;
    const ok = await this.publishDurably(topic, record, context);
    if (!ok) send.fail('abandoned');
    send.end();
    return ok;
  }

  private async publishSendResult(stored: StoredResult, job: SendJob, context: WorkContext, span: TraceSpan | undefined): Promise<boolean> {
    const ok = await this.publishResult(stored, job.headers, job.receivedAt, context, span);
    if (ok && job.producedAt !== undefined) this.options.metrics.requestToResult(Math.max(0, this.now() - job.producedAt) / 1000);
    return ok;
  }
}
