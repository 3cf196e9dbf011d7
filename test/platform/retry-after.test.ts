import { describe, expect, it } from 'vitest';
import { parseRetryAfter } from '../../src/platform/retry-after.js';

describe('Retry-After', () => {
  const now = Date.parse('2025-01-01T00:00:00Z');

  it('reads delay-seconds, with or without a fraction', () => {
    expect(parseRetryAfter('3', now)).toBe(3000);
    expect(parseRetryAfter(' 0 ', now)).toBe(0);
    expect(parseRetryAfter('1.5', now)).toBe(1500);
    expect(parseRetryAfter('120', now)).toBe(120_000);
  });

  it('reads the three HTTP-date forms, as UTC, relative to now and never negative', () => {
    expect(parseRetryAfter('Wed, 01 Jan 2025 00:00:07 GMT', now)).toBe(7000);
    expect(parseRetryAfter('Wednesday, 01-Jan-25 00:00:07 GMT', now)).toBe(7000);
    expect(parseRetryAfter('Wed Jan  1 00:00:07 2025', now)).toBe(7000);
    expect(parseRetryAfter(new Date(now + 10_000).toUTCString(), now + 4000)).toBe(6000);
    expect(parseRetryAfter('Tue, 31 Dec 2024 23:59:00 GMT', now)).toBe(0);
  });

  it('takes the first of repeated headers', () => {
    expect(parseRetryAfter(['2', '9'], now)).toBe(2000);
  });

  it('is undefined when absent or unreadable, rather than "retry at once"', () => {
    for (const value of [
      undefined,
      '',
      '   ',
      'soon',
      '-1',
      '5 ms',
      '1e3',
      '2025-01-01T00:00:07Z',
      'Wed, 01 Jan 2025 00:00:07',
    ] as const) {
      expect(parseRetryAfter(value, now), JSON.stringify(value)).toBeUndefined();
    }
    expect(parseRetryAfter([], now)).toBeUndefined();
  });
});
