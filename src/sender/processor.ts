import { isRecordTooLarge, type RecordToWrite } from '../kafka/port.js';
import type { Logger } from '../platform/logger.js';
import { HEADER } from '../contracts/headers.js';
import {
  headerText,
  NOOP_TRACER,
  startKafkaProcessSpan,
  startKafkaSendSpan,
  type TraceSpan,
  type Tracer,
} from '../platform/tracing.js';
import type { CircuitPass, CircuitBreaker } from './circuit-breaker.js';
import {
  decideConversation,
  fallbackBody,
  outsideWindowFailure,
  type ConversationWindowMode,
} from './conversation-guard.js';
import type { WindowLookup } from './conversation-table.js';
import type { WorkContext, WorkOutcome } from './keyed-runner.js';
import type { SenderMetrics } from './metrics.js';
import type { ProviderClient } from './provider-client.js';
import type { RateLimiter } from './rate-limiter.js';
import type { DlqJob, Job, SendJob } from './requests.js';
import {
  acceptedResult,
  expiredResult,
  failureOf,
  fitDlqRecord,
  fromRepeat,
  rejectedResult,
  resultHeaders,
  storedResult,
  type StoredResult,
} from './result-records.js';
import { decide, maybeCreated, providerFailing, type AttemptOutcome, type RetryPolicyOptions } from './retry-policy.js';
import type { Semaphore } from './semaphore.js';
import { ledgerDecision, ledgerKey, type LedgerEntry } from './ledger-records.js';
import { sleep } from '../platform/sleep.js';
import { errorMessage } from '../platform/errors.js';

/**
 * The work of one request (README "Guarantees"): DLQ records are published with the rejected
 * result they owe; send requests pass their expiry, the conversation window guard (README
 * "Conversation window": a text to a closed window is refused or replaced by its fallback
 * template before any call), the business's circuit, its token bucket and a call slot, are
 * sent and retried per the policy, and their one terminal result is published. Returns `done` only once what it owes
 * Kafka is acknowledged, so the runner never commits past an unpublished result.
 *
 * Sent once (README "Sent once"): a `calling` ledger record before each provider call, a `done`
 * record with the terminal result; what the ledger says of a request decides whether it is sent.
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
  /**
   * Bounds the calls made whose outcome is not yet in the ledger (`sender.maxUnrecordedCalls`):
   * the most requests a kill -9 of this process can send twice (README "Sent once"). None = no bound.
   */
  unrecordedSlots?: Pick<Semaphore, 'acquire' | 'release'> & Partial<Pick<Semaphore, 'tryAcquire'>>;
  /** business id → API key */
  apiKeys: ReadonlyMap<string, string>;
  topics: { results: string; dlq: string };
  policy: RetryPolicyOptions;
  /** Retry after an attempt that may have created the message (at least once) or reject it (at most once). */
  retryMaybeSent: boolean;
  /** Largest DLQ record (bytes) the DLQ topic takes; bigger copies become references. */
  dlqMaxBytes: number;
  /** The request ledger (request-ledger.ts) and how this member writes and waits on it. */
  ledger: LedgerPort;
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

/** What the processor needs of the request ledger (request-ledger.ts implements it). */
export interface LedgerPort {
  topic: string;
  /** Names this process in its `calling` records (for people reading the ledger). */
  owner: string;
  /**
   * How long after a `calling` record its writer may still record the outcome: a call's
   * deadline plus time to publish. Past it, a new owner takes the writer for dead.
   */
  graceMs: number;
  hold(partition: number): boolean;
  release(partition: number): void;
  lookup(partition: number, key: string): LedgerEntry | undefined;
  write(
    partition: number,
    key: string,
    entry: LedgerEntry,
    publish: (record: RecordToWrite) => Promise<boolean>,
  ): Promise<boolean>;
  /** What the changelog holds now for `key` (records another member wrote since the restore). */
  refresh(partition: number, key: string, signal?: AbortSignal): Promise<LedgerEntry | undefined>;
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
  /**
   * Holds every new provider call (the member is about to rejoin its group) and resolves once no
   * call is unsettled (made, and its outcome not yet in the ledger), or after `timeoutMs`.
   */
  pauseCalls(timeoutMs: number): Promise<boolean>;
  resumeCalls(): void;
  /** Calls made whose outcome is not yet in the ledger. */
  readonly unsettledCalls: number;
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

/** A `calling` record older than this when its call is about to start is written again (README "Sent once"). */
const CALLING_FRESH_MS = 1000;

/** The last attempt of a request whose previous owner called and recorded nothing (it died mid-call). */
const PREVIOUS_OWNER_LOST: AttemptOutcome = {
  kind: 'network',
  code: 'OWNER_LOST',
  message: 'the member that called for this request stopped before recording the outcome; the message may exist',
  requestWritten: true,
};

/** What a send ended with: a result to publish, or nothing when told to stop first. */
type SendEnd = { result: StoredResult; remember: boolean } | undefined;

/**
 * A rejoin passed while the request waited, and the ledger holds a record of it that is not this
 * process's open `calling` one: what the ledger says decides again (`workOnHeld`).
 */
const SUPERSEDED = Symbol('superseded');

/** The attempts of one request so far. */
interface Progress {
  attempts: number;
  /** Some attempt may have created a message without the relay learning its id. */
  maybeSent: boolean;
  firstAttemptAt: number | undefined;
  last: AttemptOutcome | undefined;
  /** A `calling` record of this process is in the ledger with no outcome after it. */
  calling: boolean;
  /** A call of this request is made and its outcome not yet in the ledger (see `pauseCalls`). */
  unsettled: boolean;
  /** Holds one of `unrecordedSlots` (from before its call until its outcome is recorded or it waits to retry). */
  unrecordedSlot: boolean;
  /** `rejoins` when the ledger was last read for this request. */
  rejoins: number;
}

/** Where a request is recorded in the ledger. */
interface LedgerPlace {
  partition: number;
  offset: number;
  key: string;
}

export function createProcessor(options: ProcessorOptions): Processor {
  return new RequestProcessor(options);
}

class RequestProcessor implements Processor {
  private readonly random: () => number;
  private readonly now: () => number;
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly tracer: Tracer;
  /** Set while calls are held (`pauseCalls`): new calls wait for it. */
  private callsPaused: { resume: Promise<void>; open: () => void } | undefined;
  private unsettled = 0;
  private settledWaiters: (() => void)[] = [];
  /** Rejoins begun (`pauseCalls`): a request that waited across one reads the ledger again before calling. */
  private rejoins = 0;

  constructor(private readonly options: ProcessorOptions) {
    this.random = options.random ?? Math.random;
    this.now = options.now ?? Date.now;
    this.tracer = options.tracing?.tracer ?? NOOP_TRACER;
  }

  get unsettledCalls(): number {
    return this.unsettled;
  }

  async pauseCalls(timeoutMs: number): Promise<boolean> {
    if (!this.callsPaused) {
      this.rejoins++;
      let open!: () => void;
      const resume = new Promise<void>((resolve) => (open = resolve));
      this.callsPaused = { resume, open };
    }
    if (this.unsettled === 0) return true;
    return Promise.race([
      new Promise<boolean>((resolve) => this.settledWaiters.push(() => resolve(true))),
      sleep(timeoutMs).then(() => false),
    ]);
  }

  resumeCalls(): void {
    const paused = this.callsPaused;
    this.callsPaused = undefined;
    paused?.open();
  }

  private settle(progress: Progress): void {
    if (progress.unrecordedSlot) {
      progress.unrecordedSlot = false;
      this.options.unrecordedSlots?.release();
    }
    if (!progress.unsettled) return;
    progress.unsettled = false;
    this.unsettled--;
    if (this.unsettled === 0) for (const resolve of this.settledWaiters.splice(0)) resolve();
  }

  work(job: Job, context: WorkContext): Promise<WorkOutcome> {
    // Off, tracing costs this one test (not even a promise of its own).
    return this.tracer.enabled ? this.tracedWork(job, context) : this.workOn(job, context, undefined);
  }

  private async tracedWork(job: Job, context: WorkContext): Promise<WorkOutcome> {
    const span = this.startProcessSpan(job, context);
    try {
      const outcome = await this.workOn(job, context, span);
      if (outcome === 'abandoned')
        span.fail('abandoned', 'stopped before its result was published (it will be processed again)');
      return outcome;
    } catch (err) {
      span.fail((err as Error)?.name ?? 'Error', errorMessage(err));
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
      {
        topic: tracing.requestsTopic,
        partition: Number(context.partition),
        offset: String(context.offset),
        traceparent: headerText(headers[HEADER.traceparent]),
      },
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
    const { ledger } = this.options;
    const partition = Number(context.partition);
    // The partition's ledger is open while it is owned; a request taken after it closed runs at the next owner.
    if (!ledger.hold(partition)) return 'abandoned';
    try {
      return await this.workOnHeld(job, context, span, {
        partition,
        offset: context.offset,
        key: ledgerKey(job.businessId, job.request.requestId),
      });
    } finally {
      ledger.release(partition);
    }
  }

  /**
   * What the ledger says of the request decides (repeat, wait, send); a send that a rejoin
   * superseded decides again, carrying what this process already tried.
   */
  private async workOnHeld(
    job: SendJob,
    context: WorkContext,
    span: TraceSpan | undefined,
    place: LedgerPlace,
  ): Promise<WorkOutcome> {
    let tried: Pick<Progress, 'attempts' | 'maybeSent' | 'firstAttemptAt'> | undefined;
    for (;;) {
      const outcome = await this.decideAndWork(job, context, span, place, tried);
      if (typeof outcome === 'string') return outcome;
      tried = outcome.tried;
    }
  }

  private async decideAndWork(
    job: SendJob,
    context: WorkContext,
    span: TraceSpan | undefined,
    place: LedgerPlace,
    tried: Pick<Progress, 'attempts' | 'maybeSent' | 'firstAttemptAt'> | undefined,
  ): Promise<WorkOutcome | { tried: Pick<Progress, 'attempts' | 'maybeSent' | 'firstAttemptAt'> }> {
    const { logger, metrics, ledger } = this.options;
    let carried: Pick<Progress, 'attempts' | 'maybeSent' | 'firstAttemptAt'> | undefined = tried;
    let waitingLogged = false;
    for (;;) {
      const running = this.inFlight.get(place.key);
      if (running) {
        await running;
        continue;
      }
      const decision = ledgerDecision(
        ledger.lookup(place.partition, place.key),
        place.offset,
        this.now(),
        ledger.graceMs,
      );
      if (decision.action === 'repeat') {
        const stored = fromRepeat(decision.result);
        logger.info(
          { requestId: job.request.requestId, businessId: job.businessId },
          'requestId already completed: publishing its result again instead of sending',
        );
        metrics.outcome('duplicate', job.businessId);
        span?.addEvent('requestId already completed: its result is published again');
        return (await this.publishSendResult(stored, job, context, span)) ? 'done' : 'abandoned';
      }
      if (decision.action === 'send') {
        if (decision.carried)
          carried = mergeTried(carried, {
            ...decision.carried,
            firstAttemptAt: decision.carried.firstAttemptAt ?? undefined,
          });
        break;
      }
      // Another member may still be calling for it: its outcome, or its release, comes within the call's deadline.
      if (!waitingLogged) {
        waitingLogged = true;
        logger.info(
          {
            requestId: job.request.requestId,
            businessId: job.businessId,
            partition: place.partition,
            untilMs: decision.until - this.now(),
          },
          'another member may still be calling for this request: waiting for its outcome before sending',
        );
      }
      await ledger.refresh(place.partition, place.key, context.stop);
      if (context.stop.aborted) return 'abandoned';
    }
    if (carried?.maybeSent)
      logger.warn(
        { requestId: job.request.requestId, businessId: job.businessId, attempts: carried.attempts },
        'a previous owner called for this request and recorded no outcome: it may have been sent; carrying on with maybeSent',
      );

    let release!: () => void;
    this.inFlight.set(place.key, new Promise<void>((resolve) => (release = resolve)));
    const progress: Progress = {
      attempts: carried?.attempts ?? 0,
      maybeSent: carried?.maybeSent ?? false,
      firstAttemptAt: carried?.firstAttemptAt,
      last: undefined,
      calling: false,
      unsettled: false,
      unrecordedSlot: false,
      rejoins: this.rejoins,
    };
    try {
      // At most once: what a previous owner may have sent is never sent again.
      const end =
        carried?.maybeSent && !this.options.retryMaybeSent
          ? this.reject(job, progress, PREVIOUS_OWNER_LOST, false)
          : await this.send(job, context, span, progress, place);
      if (end === SUPERSEDED) {
        // Another member's record (or this process's `released`) replaced its `calling` one.
        progress.calling = false;
        return {
          tried: {
            attempts: progress.attempts,
            maybeSent: progress.maybeSent,
            firstAttemptAt: progress.firstAttemptAt,
          },
        };
      }
      if (!end) {
        await this.releaseCall(job, progress, place);
        return 'abandoned';
      }
      // The calls are over: the recipient's next request may be sent while this one's outcome is
      // published (order per recipient is the order of the calls). That keeps a round trip to
      // Kafka out of each recipient's sequence of calls.
      context.releaseKey();
      // The result and its ledger record go together; the offset is committed only once both are in Kafka.
      const [published, recorded] = await Promise.all([
        this.publishSendResult(end.result, job, context, span),
        progress.calling || end.remember
          ? ledger
              .write(
                place.partition,
                place.key,
                {
                  state: 'done',
                  offset: place.offset,
                  at: this.now(),
                  remember: end.remember,
                  result: end.result.withoutContent,
                },
                (record) => this.publishDurably(ledger.topic, record, context),
              )
              .then((ok) => {
                // The outcome is in the ledger: the call is settled, whenever its result lands.
                if (ok) {
                  progress.calling = false;
                  this.settle(progress);
                }
                return ok;
              })
          : Promise.resolve(true),
      ]);
      return published && recorded ? 'done' : 'abandoned';
    } finally {
      this.settle(progress);
      this.inFlight.delete(place.key);
      release();
    }
  }

  /**
   * A request left without an outcome after this process called for it (its partition moved, a
   * drain ran out of time): a `released` record tells the next owner how far it got, so that it
   * neither waits for an outcome that will not come nor forgets an attempt that may have sent.
   * One try, whatever the abort: the next owner's wait covers a failure.
   */
  private async releaseCall(job: SendJob, progress: Progress, place: LedgerPlace): Promise<void> {
    if (!progress.calling) return;
    const { ledger, logger } = this.options;
    const entry: LedgerEntry = {
      state: 'released',
      offset: place.offset,
      at: this.now(),
      owner: ledger.owner,
      attempts: progress.attempts,
      maybeSent: progress.maybeSent,
      firstAttemptAt: progress.firstAttemptAt ?? null,
    };
    const ok = await ledger.write(place.partition, place.key, entry, (record) =>
      this.options.publish(ledger.topic, record).then(
        () => true,
        () => false,
      ),
    );
    if (ok) progress.calling = false;
    else
      logger.debug(
        { requestId: job.request.requestId, partition: place.partition },
        'could not record the release of a request: its next owner waits for the call deadline',
      );
  }

  /** The DLQ copy and, when the request id was readable, its rejected result. */
  private async dead(job: DlqJob, context: WorkContext, span: TraceSpan | undefined): Promise<WorkOutcome> {
    const { options } = this;
    const record = fitDlqRecord(job.record, options.dlqMaxBytes);
    const writes = [this.publishDurably(options.topics.dlq, record, context, (r) => fitDlqRecord(r, 0))];
    if (job.result) writes.push(this.publishResult(job.result, job.record.headers, job.receivedAt, context, span));
    if (!(await Promise.all(writes)).every(Boolean)) return 'abandoned';
    options.logger.warn(
      {
        reason: job.reason,
        code: job.code,
        requestId: job.requestId,
        partition: context.partition,
        offset: context.offset,
      },
      'request sent to the DLQ',
    );
    options.metrics.outcome('dlq', job.record.headers['business-id']?.toString());
    return 'done';
  }

  /** Sends with retries until a terminal result, or undefined when told to stop first. */
  private async send(
    requested: SendJob,
    context: WorkContext,
    span: TraceSpan | undefined,
    progress: Progress,
    place: LedgerPlace,
  ): Promise<SendEnd | typeof SUPERSEDED> {
    const { options, now } = this;
    const apiKey = options.apiKeys.get(requested.businessId);
    if (apiKey === undefined) throw new Error(`no API key for business ${requested.businessId}`);
    const guarded = await this.guard(requested, progress, context);
    if ('end' in guarded) return guarded.end;
    const { job } = guarded;
    for (;;) {
      // Stopped, or past the hard deadline (nothing can be recorded any more, so nothing is called).
      if (context.stop.aborted || context.abort.aborted) return undefined;
      if (now() >= job.expiry.at) return this.expire(job, progress);
      const budgetEnd =
        progress.firstAttemptAt === undefined ? Infinity : progress.firstAttemptAt + options.policy.budgetMs;
      if (progress.last && now() >= budgetEnd) return this.reject(job, progress, progress.last, true);
      const startedAt = now();
      const outcome = await this.attempt(
        job,
        apiKey,
        context,
        Math.min(job.expiry.at, budgetEnd),
        span,
        progress,
        place,
      );
      if (outcome === SUPERSEDED) return SUPERSEDED;
      if (!outcome) continue;
      progress.attempts += 1;
      progress.firstAttemptAt ??= startedAt;
      progress.last = outcome;
      const uncertain = maybeCreated(outcome);
      progress.maybeSent ||= uncertain;
      const decision = decide(outcome, progress.attempts, progress.firstAttemptAt, options.policy, now(), this.random);
      if (decision.action === 'succeed' && outcome.kind === 'accepted')
        return this.accept(job, progress, outcome.messageId);
      if (decision.action !== 'retry')
        return this.reject(job, progress, outcome, decision.action === 'fail' && decision.retriable);
      // The provider has no idempotency key: after a lost answer, only resend when configured to.
      if (uncertain && !options.retryMaybeSent) return this.reject(job, progress, outcome, false);
      options.metrics.retry(decision.reason);
      options.logger.debug(
        {
          requestId: job.request.requestId,
          attempts: progress.attempts,
          reason: decision.reason,
          delayMs: decision.delayMs,
          outcome: outcome.kind,
        },
        'send failed; retrying',
      );
      // Waiting for a retry is not a call: a rejoin need not wait for it (its next attempt writes a new `calling`).
      this.settle(progress);
      if (!(await sleep(Math.max(0, Math.min(decision.delayMs, job.expiry.at - now())), context.stop)))
        return undefined;
    }
  }

  /**
   * The conversation window guard, before the first attempt: the request as it is, its fallback
   * template, or its end (refused, expired, or undefined when told to stop while it waited for
   * a window that may be opening).
   */
  private async guard(
    job: SendJob,
    progress: Progress,
    context: WorkContext,
  ): Promise<{ job: SendJob } | { end: SendEnd }> {
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
          if (!(await sleep(Math.max(1, Math.min(100, decision.untilMs - now, job.expiry.at - now)), context.stop)))
            return { end: undefined };
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
          return {
            job: {
              ...job,
              operation: 'template',
              body: fallbackBody(job.body, job.recipient, decision.template),
              sentAs: 'template',
            },
          };
        }
        case 'reject': {
          metrics.conversation('rejected', job.businessId);
          metrics.outcome('rejected', job.businessId);
          const error = outsideWindowFailure(decision.window);
          logger.info(
            {
              requestId: job.request.requestId,
              businessId: job.businessId,
              code: error.code,
              windowOpenUntil: error.details.windowOpenUntil,
            },
            'text refused without a provider call: the conversation window is closed',
          );
          // Not remembered: once the customer writes, the same requestId may be sent.
          return {
            end: { result: storedResult(rejectedResult(job, error, 0, false, new Date(now))), remember: false },
          };
        }
      }
    }
  }

  /**
   * One attempt through the circuit, the token bucket and a call slot; undefined when stopped,
   * out of time, or the circuit opened while it waited for a token (the caller loops back).
   */
  private async attempt(
    job: SendJob,
    apiKey: string,
    context: WorkContext,
    untilMs: number,
    span: TraceSpan | undefined,
    progress: Progress,
    place: LedgerPlace,
  ): Promise<AttemptOutcome | undefined | typeof SUPERSEDED> {
    const { client, limiter, circuits, callSlots, metrics } = this.options;
    // Each step answers at once in the common case (closed circuit, a token, a free slot): no promise then.
    if (context.stop.aborted) return undefined;
    const admission: CircuitPass | undefined =
      circuits.tryAdmit?.(job.businessId) ?? (await circuits.admit(job.businessId, context.stop, untilMs));
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
      let recordedAt: number;
      for (;;) {
        // A rejoin in progress: no new call until the member knows which partitions it keeps.
        while (this.callsPaused && !context.stop.aborted)
          await Promise.race([this.callsPaused.resume, sleep(100, context.stop)]);
        if (context.stop.aborted || this.now() >= untilMs || !circuits.holds(admission)) return undefined;
        if (progress.rejoins !== this.rejoins) {
          // A rejoin passed while this request waited. If it outlasted the group's patience (its
          // pause ran out with calls unrecorded), the group may have given the partition to
          // another member meanwhile and back: from here it looks kept, but that member may
          // have sent the request. The changelog says what happened.
          progress.rejoins = this.rejoins;
          if (await this.superseded(place, context)) return SUPERSEDED;
          if (context.stop.aborted) return undefined;
        }
        // The `calling` record before the call slot: a slot is held for the call alone, not for a
        // produce round trip as well (that cost a third of the throughput at 128 in flight).
        if (!(await this.recordCalling(job, context, progress, place))) return undefined;
        recordedAt = this.now();
        // Held until the outcome is in the ledger: what a kill -9 can send twice stays bounded even
        // while Kafka is slow to take the outcomes (a broker just lost), or calls come in a burst.
        const unrecorded = this.options.unrecordedSlots;
        if (unrecorded && !progress.unrecordedSlot) {
          if (context.stop.aborted || !(unrecorded.tryAcquire?.() || (await unrecorded.acquire(context.stop))))
            return undefined;
          progress.unrecordedSlot = true;
        }
        if (context.stop.aborted || !(callSlots.tryAcquire?.() || (await callSlots.acquire(context.stop))))
          return undefined;
        if (!this.callsPaused && progress.rejoins === this.rejoins) break;
        callSlots.release();
        if (!this.callsPaused) continue; // a rejoin came and went while it waited: read the ledger first
        // The rejoin began while this request waited for a slot: it does not call now, and says so
        // in the ledger (`released`), so that neither the rejoin nor a next owner waits for it.
        await this.releaseCall(job, progress, place);
        this.settle(progress);
      }
      try {
        if (this.now() >= untilMs || !circuits.holds(admission)) return undefined;
        // A long wait for a slot (a slow provider): the record a next owner measures its wait from is written again.
        if (this.now() - recordedAt > CALLING_FRESH_MS && !(await this.recordCalling(job, context, progress, place)))
          return undefined;
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

  /**
   * Whether the changelog holds, for this request, a record other than this process's open
   * `calling` one: another member's outcome, `calling` or `released`, or this process's
   * `released`. Read from Kafka (`refresh`), not from the local store, which a delta restore
   * after the rejoin may not have brought up to date yet.
   */
  private async superseded(place: LedgerPlace, context: WorkContext): Promise<boolean> {
    const { ledger } = this.options;
    const latest = await ledger.refresh(place.partition, place.key, context.stop);
    return latest !== undefined && !(latest.state === 'calling' && latest.owner === ledger.owner);
  }

  /**
   * The `calling` record, in Kafka before the call (each attempt writes its own: a next owner
   * measures its wait from the latest). From here until the outcome is recorded, or the request
   * waits for a retry, the call is unsettled (`pauseCalls`).
   */
  private async recordCalling(
    job: SendJob,
    context: WorkContext,
    progress: Progress,
    place: LedgerPlace,
  ): Promise<boolean> {
    const { ledger } = this.options;
    if (!progress.unsettled) {
      progress.unsettled = true;
      this.unsettled++;
    }
    const entry: LedgerEntry = { state: 'calling', offset: place.offset, at: this.now(), owner: ledger.owner };
    progress.calling = true;
    const ok = await ledger.write(place.partition, place.key, entry, (record) =>
      this.publishDurably(ledger.topic, record, context),
    );
    if (!ok || context.stop.aborted) {
      this.settle(progress);
      return false;
    }
    return true;
  }

  private accept(job: SendJob, progress: Progress, messageId: string): SendEnd {
    this.options.logger.debug(
      { requestId: job.request.requestId, attempts: progress.attempts, messageId },
      'send accepted',
    );
    this.options.metrics.outcome('accepted', job.businessId);
    return {
      result: storedResult(acceptedResult(job, messageId, progress.attempts, progress.maybeSent, new Date(this.now()))),
      remember: true,
    };
  }

  private reject(job: SendJob, progress: Progress, outcome: AttemptOutcome, retriable: boolean): SendEnd {
    const error = failureOf(outcome, retriable);
    const { attempts, maybeSent } = progress;
    // A rejection is an ordinary outcome (the producer reads it on send-results); one that may
    // have created a message anyway is worth an operator's attention.
    const log = maybeSent
      ? this.options.logger.warn.bind(this.options.logger)
      : this.options.logger.info.bind(this.options.logger);
    log(
      {
        requestId: job.request.requestId,
        businessId: job.businessId,
        attempts,
        httpStatus: error.httpStatus,
        code: error.code,
        retriable,
        maybeSent,
      },
      'send rejected',
    );
    this.options.metrics.outcome('rejected', job.businessId);
    return {
      result: storedResult(rejectedResult(job, error, attempts, maybeSent, new Date(this.now()))),
      remember: !retriable,
    };
  }

  private expire(job: SendJob, progress: Progress): SendEnd {
    const { attempts, maybeSent } = progress;
    this.options.logger.info(
      { requestId: job.request.requestId, businessId: job.businessId, attempts, expiredBy: job.expiry.by, maybeSent },
      'request expired: it will not be sent',
    );
    this.options.metrics.outcome('expired', job.businessId);
    return { result: storedResult(expiredResult(job, attempts, maybeSent, new Date(this.now()))), remember: false };
  }

  /**
   * Publishes until acknowledged; gives up only at the hard deadline. A record the topic
   * refuses as too large is handed to `shrink` (once), never retried as it is.
   */
  private async publishDurably(
    topic: string,
    record: RecordToWrite,
    context: WorkContext,
    shrink?: (r: RecordToWrite) => RecordToWrite,
  ): Promise<boolean> {
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
          logger.warn(
            { topic, partition: context.partition, offset: context.offset },
            'the DLQ topic refused the record as too large: publishing a reference to the source record instead',
          );
          continue;
        }
        const delay = Math.min(5000, 100 * 2 ** Math.min(attempt, 6));
        // The publisher logs the failure once; one line per record would flood the log.
        logger.debug(
          { err: errorMessage(error), topic, attempt, retryInMs: delay },
          'publishing to Kafka failed; retrying',
        );
        if (!(await sleep(delay, context.abort))) return false;
      }
    }
  }

  private async publishResult(
    stored: StoredResult,
    headers: SendJob['headers'],
    receivedAt: number,
    context: WorkContext,
    span?: TraceSpan,
  ): Promise<boolean> {
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

  private async publishSendResult(
    stored: StoredResult,
    job: SendJob,
    context: WorkContext,
    span: TraceSpan | undefined,
  ): Promise<boolean> {
    const ok = await this.publishResult(stored, job.headers, job.receivedAt, context, span);
    if (ok && job.producedAt !== undefined)
      this.options.metrics.requestToResult(Math.max(0, this.now() - job.producedAt) / 1000);
    return ok;
  }
}

/** What two tries of the same request amount to: the most attempts, any maybe, the first start. */
function mergeTried(
  a: Pick<Progress, 'attempts' | 'maybeSent' | 'firstAttemptAt'> | undefined,
  b: Pick<Progress, 'attempts' | 'maybeSent' | 'firstAttemptAt'>,
): Pick<Progress, 'attempts' | 'maybeSent' | 'firstAttemptAt'> {
  if (!a) return b;
  const starts = [a.firstAttemptAt, b.firstAttemptAt].filter((t): t is number => t !== undefined);
  return {
    attempts: Math.max(a.attempts, b.attempts),
    maybeSent: a.maybeSent || b.maybeSent,
    firstAttemptAt: starts.length > 0 ? Math.min(...starts) : undefined,
  };
}
