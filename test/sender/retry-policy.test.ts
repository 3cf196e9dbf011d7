import { describe, expect, it } from 'vitest';
import {
  backoffDelay,
  classify,
  decide as decideAt,
  maybeCreated,
  providerFailing,
  type AttemptOutcome,
  type RetryPolicyOptions,
} from '../../src/sender/retry-policy.js';

const options = { budgetMs: 60_000, backoffInitialMs: 100, backoffMaxMs: 1000 };
/** The decision for a request first attempted at 0. */
const decide = (
  outcome: AttemptOutcome,
  attempt: number,
  opts: RetryPolicyOptions,
  now: number,
  random?: () => number,
) => decideAt(outcome, attempt, 0, opts, now, random);
const http = (
  status: number,
  extra: Partial<Extract<AttemptOutcome, { kind: 'http-error' }>> = {},
): AttemptOutcome => ({ kind: 'http-error', status, ...extra });

describe('retry policy', () => {
  it('classifies network errors, timeouts, 408, 429 and 5xx as transient, other 4xx as permanent', () => {
    expect(classify({ kind: 'accepted', status: 200, messageId: 'x' })).toBe('success');
    expect(classify({ kind: 'network', code: 'ECONNRESET', message: 'reset', requestWritten: true })).toBe('transient');
    expect(classify({ kind: 'timeout', message: 'slow', requestWritten: true })).toBe('transient');
    for (const status of [408, 429, 500, 502, 503, 504]) expect(classify(http(status))).toBe('transient');
    for (const status of [400, 401, 403, 404, 409, 413, 422]) expect(classify(http(status))).toBe('permanent');
    // A provider deadline-exceeded error is worth retrying whatever its status.
    expect(
      classify(http(400, { error: { message: 'late', type: 'ERROR_TYPE_DEADLINE_EXCEEDED', code: 'ERROR_CODE_X' } })),
    ).toBe('transient');
    // A 2xx without an id may have created a message: never retried blindly.
    expect(classify({ kind: 'invalid-response', status: 200 })).toBe('permanent');
  });

  it('backs off exponentially with jitter, capped', () => {
    expect(backoffDelay(1, options, () => 0)).toBe(50);
    expect(backoffDelay(1, options, () => 1)).toBe(100);
    expect(backoffDelay(2, options, () => 1)).toBe(200);
    expect(backoffDelay(3, options, () => 0.5)).toBe(300);
    expect(backoffDelay(10, options, () => 1)).toBe(1000);
    expect(backoffDelay(10, options, () => 0)).toBe(500);
    expect(backoffDelay(1000, options, () => 1)).toBe(1000);
    const samples = Array.from({ length: 200 }, () => backoffDelay(2, options));
    expect(Math.min(...samples)).toBeGreaterThanOrEqual(100);
    expect(Math.max(...samples)).toBeLessThanOrEqual(200);
    expect(new Set(samples).size).toBeGreaterThan(10);
  });

  it('honours Retry-After up to the cap, falls back to backoff without it', () => {
    const now = 0;
    expect(decide(http(429, { retryAfter: '2' }), 1, { ...options, backoffMaxMs: 30_000 }, now, () => 0)).toEqual({
      action: 'retry',
      delayMs: 2000,
      reason: 'rate-limited',
      retryAfterMs: 2000,
    });
    const jittered = decide(http(429, { retryAfter: '2' }), 1, { ...options, backoffMaxMs: 30_000 }, now, () => 1);
    expect(jittered).toMatchObject({ delayMs: 2200 });
    // Capped.
    expect(decide(http(503, { retryAfter: '120' }), 1, options, now, () => 1)).toMatchObject({
      action: 'retry',
      delayMs: 1000,
      reason: 'server-error',
    });
    expect(
      decide(http(429, { retryAfter: '5' }), 1, { ...options, retryAfterMaxMs: 3000 }, now, () => 0),
    ).toMatchObject({ delayMs: 3000 });
    // Absent, zero or garbage: exponential backoff.
    expect(decide(http(429), 2, options, now, () => 1)).toEqual({
      action: 'retry',
      delayMs: 200,
      reason: 'rate-limited',
    });
    expect(decide(http(429, { retryAfter: '0' }), 1, options, now, () => 1)).toMatchObject({ delayMs: 100 });
    expect(decide(http(429, { retryAfter: 'later' }), 1, options, now, () => 1)).toMatchObject({ delayMs: 100 });
    expect(decide({ kind: 'timeout', message: 't', requestWritten: true }, 1, options, now, () => 1)).toMatchObject({
      action: 'retry',
      reason: 'timeout',
    });
    expect(
      decide({ kind: 'network', code: 'ECONNREFUSED', message: 'n', requestWritten: false }, 1, options, now, () => 1),
    ).toMatchObject({ reason: 'network' });
  });

  it('retries for as long as the time budget lasts, however many attempts (retriable), and stops at once on permanent errors', () => {
    // Attempt 500 within the budget still retries: the budget is time, not a count.
    expect(decide(http(500), 500, options, 59_000)).toMatchObject({ action: 'retry' });
    // No wait goes past the end of the budget.
    expect(decide(http(503), 10, options, 59_900, () => 1)).toMatchObject({ action: 'retry', delayMs: 100 });
    expect(decide(http(500), 3, options, 60_000)).toEqual({ action: 'fail', retriable: true });
    expect(decide({ kind: 'timeout', message: 't', requestWritten: true }, 2, options, 61_000)).toEqual({
      action: 'fail',
      retriable: true,
    });
    // The budget runs from the first attempt.
    expect(decideAt(http(500), 3, 30_000, options, 61_000)).toMatchObject({ action: 'retry' });
    expect(decide(http(400), 1, options, 0)).toEqual({ action: 'fail', retriable: false });
    expect(decide(http(401), 1, options, 0)).toEqual({ action: 'fail', retriable: false });
    expect(decide({ kind: 'accepted', status: 201, messageId: 'm' }, 1, options, 0)).toEqual({ action: 'succeed' });
  });

  it('tells which failures may have created a message and which show a failing provider', () => {
    expect(maybeCreated({ kind: 'network', code: 'UND_ERR_SOCKET', message: 'closed', requestWritten: true })).toBe(
      true,
    );
    expect(maybeCreated({ kind: 'network', code: 'ECONNREFUSED', message: 'refused', requestWritten: false })).toBe(
      false,
    );
    expect(maybeCreated({ kind: 'timeout', message: 't', requestWritten: true })).toBe(true);
    expect(maybeCreated({ kind: 'timeout', message: 'connect', requestWritten: false })).toBe(false);
    expect(maybeCreated({ kind: 'invalid-response', status: 200 })).toBe(true);
    expect(maybeCreated(http(504))).toBe(true);
    for (const status of [400, 429, 500, 503]) expect(maybeCreated(http(status))).toBe(false);
    for (const status of [408, 500, 502, 503, 504]) expect(providerFailing(http(status))).toBe(true);
    expect(providerFailing({ kind: 'network', code: 'ECONNREFUSED', message: 'r', requestWritten: false })).toBe(true);
    expect(providerFailing({ kind: 'timeout', message: 't', requestWritten: true })).toBe(true);
    // An answer, even a refusal or a 429, shows a provider that works.
    for (const status of [400, 401, 429]) expect(providerFailing(http(status))).toBe(false);
    expect(providerFailing({ kind: 'accepted', status: 200, messageId: 'm' })).toBe(false);
  });
});
