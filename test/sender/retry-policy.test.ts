import { describe, expect, it } from 'vitest';
import { backoffDelay, classify, decide, type AttemptOutcome } from '../../src/sender/retry-policy.js';

const options = { maxAttempts: 4, backoffInitialMs: 100, backoffMaxMs: 1000 };
const http = (status: number, extra: Partial<Extract<AttemptOutcome, { kind: 'http-error' }>> = {}): AttemptOutcome => ({ kind: 'http-error', status, ...extra });

describe('retry policy', () => {
  it('classifies network errors, timeouts, 408, 429 and 5xx as transient, other 4xx as permanent', () => {
    expect(classify({ kind: 'accepted', status: 200, messageId: 'x' })).toBe('success');
    expect(classify({ kind: 'network', code: 'ECONNRESET', message: 'reset' })).toBe('transient');
    expect(classify({ kind: 'timeout', message: 'slow' })).toBe('transient');
    for (const status of [408, 429, 500, 502, 503, 504]) expect(classify(http(status))).toBe('transient');
    for (const status of [400, 401, 403, 404, 409, 413, 422]) expect(classify(http(status))).toBe('permanent');
    // A provider deadline-exceeded error is worth retrying whatever its status.
    expect(classify(http(400, { error: { message: 'late', type: 'ERROR_TYPE_DEADLINE_EXCEEDED', code: 'ERROR_CODE_X' } }))).toBe('transient');
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
    expect(decide(http(503, { retryAfter: '120' }), 1, options, now, () => 1)).toMatchObject({ action: 'retry', delayMs: 1000, reason: 'server-error' });
    expect(decide(http(429, { retryAfter: '5' }), 1, { ...options, retryAfterMaxMs: 3000 }, now, () => 0)).toMatchObject({ delayMs: 3000 });
    // Absent, zero or garbage: exponential backoff.
    expect(decide(http(429), 2, options, now, () => 1)).toEqual({ action: 'retry', delayMs: 200, reason: 'rate-limited' });
    expect(decide(http(429, { retryAfter: '0' }), 1, options, now, () => 1)).toMatchObject({ delayMs: 100 });
    expect(decide(http(429, { retryAfter: 'later' }), 1, options, now, () => 1)).toMatchObject({ delayMs: 100 });
    expect(decide({ kind: 'timeout', message: 't' }, 1, options, now, () => 1)).toMatchObject({ action: 'retry', reason: 'timeout' });
    expect(decide({ kind: 'network', code: 'ECONNREFUSED', message: 'n' }, 1, options, now, () => 1)).toMatchObject({ reason: 'network' });
  });

  it('stops after the attempt budget (retriable) and at once on permanent errors (not retriable)', () => {
    expect(decide(http(500), 3, options, 0)).toMatchObject({ action: 'retry' });
    expect(decide(http(500), 4, options, 0)).toEqual({ action: 'fail', retriable: true });
    expect(decide({ kind: 'timeout', message: 't' }, 4, options, 0)).toEqual({ action: 'fail', retriable: true });
    expect(decide(http(400), 1, options, 0)).toEqual({ action: 'fail', retriable: false });
    expect(decide(http(401), 1, options, 0)).toEqual({ action: 'fail', retriable: false });
    expect(decide({ kind: 'accepted', status: 201, messageId: 'm' }, 1, options, 0)).toEqual({ action: 'succeed' });
    expect(decide(http(500), 1, { ...options, maxAttempts: 1 }, 0)).toEqual({ action: 'fail', retriable: true });
  });
});
