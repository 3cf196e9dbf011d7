import { isRecordTooLarge, type RecordToWrite } from '../kafka/port.js';
import type { Logger } from '../observability/logger.js';
import type { Admission, CircuitBreaker } from './circuit-breaker.js';
import type { WorkContext, WorkOutcome } from './keyed-runner.js';
import type { SenderMetrics } from './metrics.js';
import type { ProviderClient } from './provider-client.js';
import type { RateLimiter } from './rate-limiter.js';
import {
  acceptedResult,
  expiredResult,
  failureOf,
  fitDlqRecord,
  rejectedResult,
  resultHeaders,
  storedResult,
  type DlqJob,
  type Job,
  type SendJob,
  type StoredResult,
} from './requests.js';
import { decide, maybeCreated, providerFailing, type AttemptOutcome, type RetryPolicyOptions } from './retry-policy.js';
import type { Semaphore } from './semaphore.js';

/**
 * The work of one request (README "Guarantees"): DLQ records are published with the rejected
 * result they owe; send requests pass their expiry, the business's circuit, its token bucket
 * and a call slot, are sent and retried per the policy, and their one terminal result is
 * published. Returns `done` only once what it owes Kafka is acknowledged, so the runner never
 * commits past an unpublished result.
 *
 * Duplicates: a request whose (business, requestId) this process completed for good
 * (accepted, or rejected for a reason that will not change) is not sent again; its stored
 * result is published again for the new record (same `event-id`). A retriable rejection or an
 * expiry is not remembered, so a resubmission is sent. Completed ids are kept in a bounded LRU
 * (`completedMax`). A duplicate arriving while the first is still in flight waits for it.
 */
export interface ProcessorOptions {
  client: Pick<ProviderClient, 'send'>;
  publish: (topic: string, record: RecordToWrite) => Promise<void>;
  limiter: Pick<RateLimiter, 'acquire' | 'slowDown'>;
  circuits: Pick<CircuitBreaker, 'admit' | 'settle' | 'cancel'>;
  /** Bounds the provider calls in flight. */
  callSlots: Pick<Semaphore, 'acquire' | 'release'>;
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
}

export interface Processor {
  work(job: Job, context: WorkContext): Promise<WorkOutcome>;
  /** Request ids remembered as completed. */
  readonly completedCount: number;
}

/** Resolves true after `ms`, or false as soon as the signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
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

export function createProcessor(options: ProcessorOptions): Processor {
  const { client, limiter, circuits, callSlots, metrics, logger, policy } = options;
  const random = options.random ?? Math.random;
  const now = options.now ?? Date.now;
  const completed = new Map<string, StoredResult>();
  const inFlight = new Map<string, Promise<void>>();

  const remember = (id: string, stored: StoredResult) => {
    completed.delete(id);
    completed.set(id, stored);
    while (completed.size > options.completedMax) {
      const oldest = completed.keys().next().value as string;
      completed.delete(oldest);
    }
  };

  /**
   * Publishes until acknowledged; gives up only at the hard deadline. A record the topic
   * refuses as too large is handed to `shrink` (once), never retried as it is.
   */
  const publishDurably = async (topic: string, record: RecordToWrite, context: WorkContext, shrink?: (r: RecordToWrite) => RecordToWrite): Promise<boolean> => {
    let current = record;
    for (let attempt = 1; ; attempt++) {
      try {
        await options.publish(topic, current);
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
  };

  const publishResult = async (stored: StoredResult, headers: SendJob['headers'], receivedAt: number, context: WorkContext): Promise<boolean> =>
    publishDurably(options.topics.results, { key: stored.key, value: stored.value, headers: resultHeaders(stored, headers, receivedAt) }, context);

  const publishSendResult = async (stored: StoredResult, job: SendJob, context: WorkContext): Promise<boolean> => {
    const ok = await publishResult(stored, job.headers, job.receivedAt, context);
    if (ok && job.producedAt !== undefined) metrics.requestToResult(Math.max(0, now() - job.producedAt) / 1000);
    return ok;
  };

  const dead = async (job: DlqJob, context: WorkContext): Promise<WorkOutcome> => {
    const record = fitDlqRecord(job.record, options.dlqMaxBytes);
    const writes = [publishDurably(options.topics.dlq, record, context, (r) => fitDlqRecord(r, 0))];
    if (job.result) writes.push(publishResult(job.result, job.record.headers, job.receivedAt, context));
    if (!(await Promise.all(writes)).every(Boolean)) return 'abandoned';
    logger.warn({ reason: job.reason, code: job.code, requestId: job.requestId, partition: context.partition, offset: context.offset }, 'request sent to the DLQ');
    metrics.outcome('dlq', job.record.headers['business-id']?.toString());
    return 'done';
  };

  /** One attempt through the circuit, the token bucket and a call slot; undefined when stopped or out of time first. */
  const attempt = async (job: SendJob, apiKey: string, context: WorkContext, untilMs: number): Promise<AttemptOutcome | undefined> => {
    const admission: Admission | undefined = await circuits.admit(job.businessId, context.stop, untilMs);
    if (!admission) return undefined;
    let settled = false;
    try {
      try {
        await limiter.acquire(job.businessId, context.stop);
      } catch {
        return undefined;
      }
      if (!(await callSlots.acquire(context.stop))) return undefined;
      try {
        if (now() >= untilMs) return undefined;
        metrics.inFlight(1);
        const started = performance.now();
        let outcome: AttemptOutcome;
        try {
          outcome = await client.send(job.operation, job.businessId, apiKey, job.body, context.abort);
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
  };

  /** Sends with retries until a terminal result, or undefined when told to stop first. */
  const send = async (job: SendJob, context: WorkContext): Promise<SendEnd> => {
    const apiKey = options.apiKeys.get(job.businessId);
    if (apiKey === undefined) throw new Error(`no API key for business ${job.businessId}`);
    const log = { requestId: job.request.requestId, businessId: job.businessId, operation: job.operation };
    let attempts = 0;
    let maybeSent = false;
    let firstAttemptAt: number | undefined;
    let last: AttemptOutcome | undefined;
    const reject = (outcome: AttemptOutcome, retriable: boolean): SendEnd => {
      const error = failureOf(outcome, retriable);
      logger.warn({ ...log, attempts, httpStatus: error.httpStatus, code: error.code, retriable, maybeSent }, 'send rejected');
      metrics.outcome('rejected', job.businessId);
      return { result: storedResult(rejectedResult(job, error, attempts, maybeSent, new Date(now()))), remember: !retriable };
    };
    for (;;) {
      if (context.stop.aborted) return undefined;
      const budgetEnd = firstAttemptAt === undefined ? Infinity : firstAttemptAt + policy.budgetMs;
      if (now() >= job.expiry.at) {
        logger.info({ ...log, attempts, expiredBy: job.expiry.by, maybeSent }, 'request expired: it will not be sent');
        metrics.outcome('expired', job.businessId);
        return { result: storedResult(expiredResult(job, attempts, maybeSent, new Date(now()))), remember: false };
      }
      if (last && now() >= budgetEnd) return reject(last, true);
      const startedAt = now();
      const outcome = await attempt(job, apiKey, context, Math.min(job.expiry.at, budgetEnd));
      if (!outcome) continue;
      attempts += 1;
      firstAttemptAt ??= startedAt;
      last = outcome;
      const uncertain = maybeCreated(outcome);
      maybeSent ||= uncertain;
      const decision = decide(outcome, attempts, firstAttemptAt, policy, now(), random);
      if (decision.action === 'succeed' && outcome.kind === 'accepted') {
        logger.debug({ ...log, attempts, messageId: outcome.messageId }, 'send accepted');
        metrics.outcome('accepted', job.businessId);
        return { result: storedResult(acceptedResult(job, outcome.messageId, attempts, maybeSent, new Date(now()))), remember: true };
      }
      if (decision.action !== 'retry') return reject(outcome, decision.action === 'fail' && decision.retriable);
      // The provider has no idempotency key: after a lost answer, only resend when configured to.
      if (uncertain && !options.retryMaybeSent) return reject(outcome, false);
      metrics.retry(decision.reason);
      logger.debug({ ...log, attempts, reason: decision.reason, delayMs: decision.delayMs, outcome: outcome.kind }, 'send failed; retrying');
      if (!(await sleep(Math.max(0, Math.min(decision.delayMs, job.expiry.at - now())), context.stop))) return undefined;
    }
  };

  return {
    get completedCount() {
      return completed.size;
    },

    async work(job, context) {
      if (job.kind === 'dlq') return dead(job, context);

      const id = `${job.businessId}\u0000${job.request.requestId}`;
      for (;;) {
        const stored = completed.get(id);
        if (stored) {
          remember(id, stored);
          logger.info({ requestId: job.request.requestId, businessId: job.businessId }, 'requestId already completed in this process: publishing its result again instead of sending');
          metrics.outcome('duplicate', job.businessId);
          return (await publishSendResult(stored, job, context)) ? 'done' : 'abandoned';
        }
        const running = inFlight.get(id);
        if (!running) break;
        await running;
      }

      let release!: () => void;
      inFlight.set(id, new Promise<void>((resolve) => (release = resolve)));
      let end: SendEnd;
      try {
        end = await send(job, context);
        if (end?.remember) remember(id, end.result);
      } finally {
        inFlight.delete(id);
        release();
      }
      if (!end) return 'abandoned';
      return (await publishSendResult(end.result, job, context)) ? 'done' : 'abandoned';
    },
  };
}
