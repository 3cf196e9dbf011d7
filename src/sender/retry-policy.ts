/**
 * What to do after one attempt of a provider call: the classification of outcomes
 * (transient: network errors, timeouts, 408, 429, 5xx; permanent: other 4xx), capped
 * exponential backoff with jitter, `Retry-After` (seconds or an HTTP date) honoured up to a
 * cap, and an attempt budget. Pure: time and randomness come in as arguments.
 */

import { parseRetryAfter } from '../retry-after.js';

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
  | { kind: 'http-error'; status: number; retryAfter?: string | undefined; error?: ProviderErrorBody | undefined; bodySnippet?: string | undefined }
  /** A 2xx whose body is not `{id}`: the message may exist, so it is never retried blindly. */
  | { kind: 'invalid-response'; status: number; bodySnippet?: string | undefined }
  | { kind: 'timeout'; message: string }
  | { kind: 'network'; code: string; message: string };

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

export interface RetryPolicyOptions {
  /** Attempts in total, the first included. */
  maxAttempts: number;
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
export function backoffDelay(retryNumber: number, options: Pick<RetryPolicyOptions, 'backoffInitialMs' | 'backoffMaxMs'>, random: () => number = Math.random): number {
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
 * The decision after attempt number `attempt` (1-based) ended with `outcome`.
 * A Retry-After (on any transient answer) sets the wait, capped at `retryAfterMaxMs`, with a
 * little jitter on top so that callers told the same instant do not return together.
 */
export function decide(outcome: AttemptOutcome, attempt: number, options: RetryPolicyOptions, nowMs: number, random: () => number = Math.random): RetryDecision {
  const classification = classify(outcome);
  if (classification === 'success') return { action: 'succeed' };
  if (classification === 'permanent') return { action: 'fail', retriable: false };
  if (attempt >= options.maxAttempts) return { action: 'fail', retriable: true };
  const reason = retryReason(outcome);
  const retryAfterMs = outcome.kind === 'http-error' ? parseRetryAfter(outcome.retryAfter, nowMs) : undefined;
  if (retryAfterMs !== undefined && retryAfterMs > 0) {
    const cap = options.retryAfterMaxMs ?? options.backoffMaxMs;
    const base = Math.min(retryAfterMs, cap);
    const jitter = Math.min(cap - base, Math.round(random() * Math.min(1000, base * 0.1)));
    return { action: 'retry', delayMs: base + jitter, reason, retryAfterMs };
  }
  return { action: 'retry', delayMs: backoffDelay(attempt, options, random), reason };
}
