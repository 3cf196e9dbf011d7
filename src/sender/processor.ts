import type { RecordToWrite } from '../kafka/port.js';
import type { Logger } from '../observability/logger.js';
import type { WorkContext, WorkOutcome } from './keyed-runner.js';
import type { SenderMetrics } from './metrics.js';
import type { ProviderClient } from './provider-client.js';
import type { RateLimiter } from './rate-limiter.js';
import { acceptedResult, failureOf, rejectedResult, resultHeaders, resultRecord, type Job, type SendJob } from './requests.js';
import { decide, type AttemptOutcome, type RetryPolicyOptions } from './retry-policy.js';

/**
 * The work of one request: DLQ records are published; send requests are sent (rate limited,
 * retried per the policy) and their result published. Returns `done` only once the record it
 * owes Kafka is acknowledged, so the runner never commits past an unpublished result.
 *
 * Duplicates: a request whose (business, requestId) this process already completed is not
 * sent again; its stored result is published again for the new record (same value, same
 * `event-id`), so every request record still gets a result. Completed ids are kept in a
 * bounded LRU (`completedMax`). A duplicate arriving while the first is still in flight waits
 * for it.
 */
export interface ProcessorOptions {
  client: Pick<ProviderClient, 'send'>;
  publish: (topic: string, record: RecordToWrite) => Promise<void>;
  limiter: Pick<RateLimiter, 'acquire'>;
  /** business id → API key */
  apiKeys: ReadonlyMap<string, string>;
  topics: { results: string; dlq: string };
  policy: RetryPolicyOptions;
  completedMax: number;
  metrics: SenderMetrics;
  logger: Logger;
  random?: () => number;
}

interface StoredResult {
  key: string;
  value: Buffer;
  businessId: string;
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

export function createProcessor(options: ProcessorOptions): Processor {
  const { client, limiter, metrics, logger, policy } = options;
  const random = options.random ?? Math.random;
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

  /** Publishes until acknowledged; gives up only at the hard deadline. */
  const publishDurably = async (topic: string, record: RecordToWrite, context: WorkContext): Promise<boolean> => {
    for (let attempt = 1; ; attempt++) {
      try {
        await options.publish(topic, record);
        return true;
      } catch (error) {
        metrics.publishError();
        if (context.abort.aborted) return false;
        const delay = Math.min(5000, 100 * 2 ** Math.min(attempt, 6));
        logger.error({ err: error, topic, attempt, retryInMs: delay }, 'publishing to Kafka failed; retrying');
        if (!(await sleep(delay, context.abort))) return false;
      }
    }
  };

  const publishResult = async (stored: StoredResult, job: SendJob, context: WorkContext): Promise<boolean> => {
    const ok = await publishDurably(
      options.topics.results,
      { key: stored.key, value: stored.value, headers: resultHeaders(stored, job.headers, job.receivedAt) },
      context,
    );
    if (ok && job.producedAt !== undefined && Number.isFinite(job.producedAt)) metrics.requestToResult(Math.max(0, Date.now() - job.producedAt) / 1000);
    return ok;
  };

  /** Sends with retries; undefined when told to stop before an outcome worth publishing. */
  const send = async (job: SendJob, context: WorkContext): Promise<StoredResult | undefined> => {
    const apiKey = options.apiKeys.get(job.businessId);
    if (apiKey === undefined) throw new Error(`no API key for business ${job.businessId}`);
    for (let attempt = 1; ; attempt++) {
      if (context.stop.aborted) return undefined;
      try {
        await limiter.acquire(job.businessId, context.stop);
      } catch {
        return undefined;
      }
      metrics.inFlight(1);
      const started = performance.now();
      let outcome: AttemptOutcome;
      try {
        outcome = await client.send(job.operation, job.businessId, apiKey, job.body, context.abort);
      } finally {
        metrics.inFlight(-1);
      }
      metrics.providerCall(job.operation, resultLabel(outcome), (performance.now() - started) / 1000);
      const decision = decide(outcome, attempt, policy, Date.now(), random);
      const log = { requestId: job.request.requestId, businessId: job.businessId, operation: job.operation, attempt };
      if (decision.action === 'succeed' && outcome.kind === 'accepted') {
        const result = acceptedResult(job, outcome.messageId, attempt, new Date());
        logger.debug({ ...log, messageId: outcome.messageId }, 'send accepted');
        metrics.outcome('accepted', job.businessId);
        return { ...resultRecord(result), businessId: job.businessId };
      }
      if (decision.action === 'fail' || decision.action === 'succeed') {
        const retriable = decision.action === 'fail' ? decision.retriable : false;
        const error = failureOf(outcome, retriable);
        const result = rejectedResult(job, error, attempt, new Date());
        logger.warn({ ...log, httpStatus: error.httpStatus, code: error.code, retriable }, 'send rejected');
        metrics.outcome('rejected', job.businessId);
        return { ...resultRecord(result), businessId: job.businessId };
      }
      metrics.retry(decision.reason);
      logger.debug({ ...log, reason: decision.reason, delayMs: decision.delayMs, outcome: outcome.kind }, 'send failed; retrying');
      if (!(await sleep(decision.delayMs, context.stop))) return undefined;
    }
  };

  return {
    get completedCount() {
      return completed.size;
    },

    async work(job, context) {
      if (job.kind === 'dlq') {
        const ok = await publishDurably(options.topics.dlq, job.record, context);
        if (!ok) return 'abandoned';
        logger.warn({ reason: job.reason, partition: context.partition, offset: context.offset }, 'request sent to the DLQ');
        metrics.outcome('dlq', job.record.headers['business-id']?.toString());
        return 'done';
      }

      const id = `${job.businessId}\u0000${job.request.requestId}`;
      for (;;) {
        const stored = completed.get(id);
        if (stored) {
          remember(id, stored);
          logger.info({ requestId: job.request.requestId, businessId: job.businessId }, 'requestId already completed in this process: publishing its result again instead of sending');
          metrics.outcome('duplicate', job.businessId);
          return (await publishResult(stored, job, context)) ? 'done' : 'abandoned';
        }
        const running = inFlight.get(id);
        if (!running) break;
        await running;
      }

      let release!: () => void;
      inFlight.set(id, new Promise<void>((resolve) => (release = resolve)));
      let stored: StoredResult | undefined;
      try {
        stored = await send(job, context);
        if (stored) remember(id, stored);
      } finally {
        inFlight.delete(id);
        release();
      }
      if (!stored) return 'abandoned';
      return (await publishResult(stored, job, context)) ? 'done' : 'abandoned';
    },
  };
}
