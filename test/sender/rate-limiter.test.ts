import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { RateLimiter } from '../../src/sender/rate-limiter.js';

describe('RateLimiter (token bucket per business)', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 0 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('lets a burst through, then paces callers at the rate, in FIFO order', async () => {
    const limiter = new RateLimiter({ ratePerSecond: 10, burst: 2, now: () => Date.now() });
    const granted: [number, number][] = [];
    const all = Array.from({ length: 6 }, (_, i) => limiter.acquire('biz').then(() => granted.push([i, Date.now()])));
    await vi.advanceTimersByTimeAsync(0);
    expect(granted).toEqual([
      [0, 0],
      [1, 0],
    ]);
    await vi.advanceTimersByTimeAsync(1000);
    await Promise.all(all);
    expect(granted.map(([i]) => i)).toEqual([0, 1, 2, 3, 4, 5]);
    // A token every 100 ms after the burst, the tokens of 200 ms granted together once several
    // wait: the first alone (it waited alone), then two at 300 ms, then the last one.
    expect(granted.slice(2).map(([, t]) => t)).toEqual([100, 300, 300, 400]);
  });

  it('keeps businesses independent', async () => {
    const limiter = new RateLimiter({ ratePerSecond: 1, burst: 1, now: () => Date.now() });
    expect(limiter.tryAcquire('a')).toBe(true);
    expect(limiter.tryAcquire('a')).toBe(false);
    expect(limiter.tryAcquire('b')).toBe(true);
    vi.advanceTimersByTime(1000);
    expect(limiter.tryAcquire('a')).toBe(true);
  });

  it('never exceeds the rate over a window', async () => {
    const limiter = new RateLimiter({ ratePerSecond: 200, now: () => Date.now() });
    expect(limiter.burst).toBe(40);
    let count = 0;
    const waits = Array.from({ length: 1000 }, () => limiter.acquire('biz').then(() => (count += 1)));
    await vi.advanceTimersByTimeAsync(1000);
    // burst + one second at the rate
    expect(count).toBeLessThanOrEqual(240);
    expect(count).toBeGreaterThanOrEqual(200);
    await vi.advanceTimersByTimeAsync(5000);
    await Promise.all(waits);
    expect(count).toBe(1000);
  });

  it('drops a waiter whose signal aborts, and the next one gets the token', async () => {
    const limiter = new RateLimiter({ ratePerSecond: 10, burst: 1, now: () => Date.now() });
    await limiter.acquire('biz');
    const controller = new AbortController();
    const first = limiter.acquire('biz', controller.signal);
    const second = limiter.acquire('biz');
    expect(limiter.waiting()).toBe(2);
    controller.abort(new Error('revoked'));
    await expect(first).rejects.toThrow('revoked');
    let secondAt = -1;
    void second.then(() => (secondAt = Date.now()));
    await vi.advanceTimersByTimeAsync(100);
    expect(secondAt).toBe(100);
    await expect(limiter.acquire('biz', AbortSignal.abort(new Error('already')))).rejects.toThrow('already');
  });

  it('halves a business rate on a 429 (at most once a second, not below the floor) and climbs back linearly', async () => {
    const limiter = new RateLimiter({ ratePerSecond: 200, now: () => Date.now() });
    limiter.slowDown('biz');
    expect(limiter.rateOf('biz')).toBe(100);
    // A burst of 429s from one window counts once.
    limiter.slowDown('biz');
    expect(limiter.rateOf('biz')).toBe(100);
    expect(limiter.rateOf('other')).toBe(200);
    expect([...limiter.slowedDown()]).toEqual([['biz', 100]]);
    for (let i = 0; i < 10; i++) {
      vi.advanceTimersByTime(1000);
      limiter.slowDown('biz');
    }
    expect(limiter.rateOf('biz')).toBeCloseTo(10, 0);
    // Back up by a twentieth of the configured rate a second: 10 s for another 100/s.
    vi.advanceTimersByTime(10_000);
    expect(limiter.rateOf('biz')).toBeCloseTo(110, 0);
    vi.advanceTimersByTime(60_000);
    expect(limiter.rateOf('biz')).toBe(200);
    expect(limiter.slowedDown().size).toBe(0);
  });

  it('grants the tokens of 200 ms at once (forty at 200/s, its burst), without exceeding the rate', async () => {
    const limiter = new RateLimiter({ ratePerSecond: 200, now: () => Date.now() });
    const granted: number[] = [];
    const waits = Array.from({ length: 160 }, () => limiter.acquire('biz').then(() => granted.push(Date.now())));
    await vi.advanceTimersByTimeAsync(800);
    await Promise.all(waits);
    const start = granted[0]!;
    const byTime = new Map<number, number>();
    for (const t of granted.slice(limiter.burst)) byTime.set(t - start, (byTime.get(t - start) ?? 0) + 1);
    // The first 40 are the burst; then (after the one timer armed while a single waiter waited)
    // groups of 40, 200 ms apart: 200 tokens a second, 4 timer wakeups for 120 tokens instead of 120.
    const groups = [...byTime.values()];
    expect(groups.reduce((a, b) => a + b, 0)).toBe(120);
    expect(Math.max(...groups)).toBe(40);
    expect(groups.slice(1, -1).every((g) => g === 40)).toBe(true);
    expect(groups.length).toBeLessThanOrEqual(4);
    const times = [...byTime.keys()];
    for (let i = 1; i < times.length; i++) expect((times[i]! - times[i - 1]!) / groups[i]!).toBeGreaterThanOrEqual(4.9);
  });

  it('grants smaller groups when the burst is smaller than 200 ms of tokens', async () => {
    const limiter = new RateLimiter({ ratePerSecond: 200, burst: 5, now: () => Date.now() });
    const granted: number[] = [];
    const waits = Array.from({ length: 45 }, () => limiter.acquire('biz').then(() => granted.push(Date.now())));
    await vi.advanceTimersByTimeAsync(250);
    await Promise.all(waits);
    const byTime = new Map<number, number>();
    for (const t of granted.slice(5)) byTime.set(t, (byTime.get(t) ?? 0) + 1);
    expect(Math.max(...byTime.values())).toBe(5);
    expect(granted.length).toBe(45);
  });

  it('paces waiters at the lowered rate', async () => {
    const limiter = new RateLimiter({ ratePerSecond: 100, burst: 1, now: () => Date.now() });
    limiter.slowDown('biz');
    const granted: number[] = [];
    const waits = Array.from({ length: 5 }, () => limiter.acquire('biz').then(() => granted.push(Date.now())));
    await vi.advanceTimersByTimeAsync(1000);
    await Promise.all(waits);
    // 50/s after the 429: a token every 20 ms (the rate creeps up meanwhile, so a little less).
    const gaps = granted.slice(1).map((t, i) => t - granted[i]!);
    for (const gap of gaps) expect(gap).toBeGreaterThanOrEqual(18);
  });
});
