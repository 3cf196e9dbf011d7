/**
 * What to do after one attempt of a provider call: the classification of outcomes
 * (transient: network errors, timeouts, 408, 429, 5xx; permanent: other 4xx), capped
 * exponential backoff with jitter, `Retry-After` (seconds or an HTTP date) honoured up to a
 * cap, and a retry budget in time (not a count: an outage of a minute must not use it up).
 * Pure: time and randomness come in as arguments.
 */

import { parseRetryAfter } from '../platform/retry-after.js';

/** The error object of the provider's HTTP error answers (and of `statusUpdate.error`). */
export interface ProviderErrorBody {
  message: string;
  type: string;
  code: string;
  userTitle?: string;
  userMessage?: string;
  cntTraceId?: string;
  details?: Record<string, unknown> | null;
  [extra: string]: unknown;
}

/** The outcome of one HTTP attempt, as the provider client reports it. */
export type AttemptOutcome =
  | { kind: 'accepted'; status: number; messageId: string }
  /** An HTTP answer that is not a success: the provider's error object when the body was one. */
  | {
      kind: 'http-error';
      status: number;
      retryAfter?: string | undefined;
      error?: ProviderErrorBody | undefined;
      bodySnippet?: string | undefined;
    }
  /** A 2xx whose body is not `{id}`: the message may exist, so it is never retried blindly. */
  | { kind: 'invalid-response'; status: number; bodySnippet?: string | undefined }
  /** `requestWritten`: the request reached a connected socket, so the provider may have acted on it. */
  | { kind: 'timeout'; message: string; requestWritten: boolean }
  | { kind: 'network'; code: string; message: string; requestWritten: boolean };

export type Classification = 'success' | 'transient' | 'permanent';

/** Provider error types that mean "try again later" whatever the HTTP status. */
const TRANSIENT_ERROR_TYPES = new Set(['ERROR_TYPE_DEADLINE_EXCEEDED']);

export function classify(outcome: AttemptOutcome): Classification {
  switch (outcome.kind) {
    case 'accepted':
      return 'success';
    case 'timeout':
    case 'network':
      return 'transient';
    case 'invalid-response':
      return 'permanent';
    case 'http-error': {
      const { status } = outcome;
      if (status === 408 || status === 429 || status >= 500) return 'transient';
      if (outcome.error && TRANSIENT_ERROR_TYPES.has(outcome.error.type)) return 'transient';
      return 'permanent';
    }
  }
}

/**
 * Whether the provider may have created a message although the attempt has no success answer:
 * a request written without an answer (lost response, timeout), a 2xx without an id, or a 504
 * (a gateway gave up waiting for the provider, which may still have acted).
 */
export function maybeCreated(outcome: AttemptOutcome): boolean {
  switch (outcome.kind) {
    case 'accepted':
      return false;
    case 'invalid-response':
      return true;
    case 'timeout':
    case 'network':
      return outcome.requestWritten;
    case 'http-error':
      return outcome.status === 504;
  }
}

/**
 * Whether the attempt says the provider is failing (the circuit counts these): no answer, or a
 * 408/5xx. Any other answer, 4xx and 429 included, shows a provider that works.
 */
export function providerFailing(outcome: AttemptOutcome): boolean {
  if (outcome.kind === 'timeout' || outcome.kind === 'network') return true;
  if (outcome.kind === 'http-error') return outcome.status === 408 || outcome.status >= 500;
  return false;
}

export interface RetryPolicyOptions {
  /** How long transient failures are retried, from the first attempt (ms). */
  budgetMs: number;
  backoffInitialMs: number;
  backoffMaxMs: number;
  /** Longest wait a Retry-After may impose (default backoffMaxMs). */
  retryAfterMaxMs?: number;
}

/**
 * Capped exponential backoff with "equal jitter": half of the exponential step is fixed,
 * half is random, so retries spread out without ever collapsing to zero.
 * `retryNumber` counts from 1 (the wait before the second attempt).
 */
export function backoffDelay(
  retryNumber: number,
  options: Pick<RetryPolicyOptions, 'backoffInitialMs' | 'backoffMaxMs'>,
  random: () => number = Math.random,
): number {
  const exponent = Math.min(Math.max(retryNumber - 1, 0), 30);
  const step = Math.min(options.backoffMaxMs, options.backoffInitialMs * 2 ** exponent);
  return Math.round(step / 2 + random() * (step / 2));
}

export type RetryDecision =
  | { action: 'succeed' }
  | { action: 'retry'; delayMs: number; reason: RetryReason; retryAfterMs?: number }
  /** Stop: `retriable` says whether trying later could succeed (budget exhausted vs permanent). */
  | { action: 'fail'; retriable: boolean };

export type RetryReason = 'rate-limited' | 'server-error' | 'timeout' | 'network' | 'other';

export function retryReason(outcome: AttemptOutcome): RetryReason {
  if (outcome.kind === 'timeout') return 'timeout';
  if (outcome.kind === 'network') return 'network';
  if (outcome.kind === 'http-error') {
    if (outcome.status === 429) return 'rate-limited';
    if (outcome.status >= 500) return 'server-error';
  }
  return 'other';
}

/**
 * The decision after attempt number `attempt` (1-based), which ended with `outcome`, of a
 * request first attempted at `firstAttemptAtMs`. A Retry-After (on any transient answer) sets
 * the wait, capped at `retryAfterMaxMs`, with a little jitter on top so that callers told the
 * same instant do not return together. No wait goes past the end of the budget; once the
 * budget is spent the request fails as retriable.
 */
export function decide(
  outcome: AttemptOutcome,
  attempt: number,
  firstAttemptAtMs: number,
  options: RetryPolicyOptions,
  nowMs: number,
  random: () => number = Math.random,
): RetryDecision {
  const classification = classify(outcome);
  if (classification === 'success') return { action: 'succeed' };
  if (classification === 'permanent') return { action: 'fail', retriable: false };
  const budgetLeft = firstAttemptAtMs + options.budgetMs - nowMs;
  if (budgetLeft <= 0) return { action: 'fail', retriable: true };
  const reason = retryReason(outcome);
  const retryAfterMs = outcome.kind === 'http-error' ? parseRetryAfter(outcome.retryAfter, nowMs) : undefined;
  let delayMs: number;
  if (retryAfterMs !== undefined && retryAfterMs > 0) {
    const cap = options.retryAfterMaxMs ?? options.backoffMaxMs;
    const base = Math.min(retryAfterMs, cap);
    delayMs = base + Math.min(cap - base, Math.round(random() * Math.min(1000, base * 0.1)));
  } else {
    delayMs = backoffDelay(attempt, options, random);
  }
  const decision: RetryDecision = { action: 'retry', delayMs: Math.min(delayMs, budgetLeft), reason };
  if (retryAfterMs !== undefined && retryAfterMs > 0) decision.retryAfterMs = retryAfterMs;
  return decision;
}
