import { Deque } from '../platform/deque.js';
import { onAbort } from '../platform/on-abort.js';

/**
 * A token bucket per key (the business): `ratePerSecond` tokens a second, up to `burst`
 * stored. Callers wait in FIFO order for a token; a waiter whose signal aborts leaves the
 * queue. One timer per bucket, armed only while someone waits, granting the tokens of up to
 * 200 ms at once (the default burst). Pure: the clock is injectable.
 *
 * Adaptive (AIMD): `slowDown(key)` (a 429) halves that key's rate, at most once a second and
 * never below `minRatePerSecond`; the rate then climbs back linearly, by a twentieth of
 * `ratePerSecond` each second, so replicas that share a provider limit settle below it
 * instead of retrying into it.
 */
export interface RateLimiterOptions {
  ratePerSecond: number;
  /** Floor of the adaptive rate (default a twentieth of ratePerSecond, at least 1). */
  minRatePerSecond?: number;
  /** Tokens a bucket can hold (default: a fifth of a second's worth, at least 1). */
  burst?: number;
  /** Milliseconds from a monotonic clock (default performance.now). */
  now?: () => number;
}

/** How long a waiter may wait beyond its token so that several are granted at once. */
const GRANT_TICK_MS = 200;

interface Waiter {
  resolve: () => void;
  reject: (reason: unknown) => void;
  cancelled: boolean;
  cleanup: (() => void) | undefined;
}

interface Bucket {
  rate: number;
  lastSlowDownAt: number;
  tokens: number;
  updatedAt: number;
  waiters: Deque<Waiter>;
  timer: ReturnType<typeof setTimeout> | undefined;
}

export class RateLimiter {
  readonly ratePerSecond: number;
  readonly burst: number;
  readonly minRatePerSecond: number;
  private readonly now: () => number;
  private readonly buckets = new Map<string, Bucket>();

  constructor(options: RateLimiterOptions) {
    if (!(options.ratePerSecond > 0)) throw new RangeError('ratePerSecond must be positive');
    this.ratePerSecond = options.ratePerSecond;
    this.burst = Math.max(1, options.burst ?? Math.ceil((options.ratePerSecond * GRANT_TICK_MS) / 1000));
    this.minRatePerSecond = Math.min(
      this.ratePerSecond,
      options.minRatePerSecond ?? Math.max(1, this.ratePerSecond / 20),
    );
    this.now = options.now ?? (() => performance.now());
  }

  /** Takes a token now if one is free and nobody is waiting. */
  tryAcquire(key: string): boolean {
    const bucket = this.bucket(key);
    this.refill(bucket);
    if (bucket.waiters.length === 0 && bucket.tokens >= 1) {
      bucket.tokens -= 1;
      return true;
    }
    return false;
  }

  /** Resolves when a token is taken; rejects with the signal's reason if it aborts first. */
  acquire(key: string, signal?: AbortSignal): Promise<void> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.tryAcquire(key)) return Promise.resolve();
    const bucket = this.bucket(key);
    return new Promise<void>((resolve, reject) => {
      const waiter: Waiter = { resolve, reject, cancelled: false, cleanup: undefined };
      if (signal) {
        waiter.cleanup = onAbort(signal, () => {
          waiter.cancelled = true;
          reject(signal.reason);
        });
      }
      bucket.waiters.push(waiter);
      this.arm(key, bucket);
    });
  }

  /** A 429 for this key: halve its rate (at most once a second, not below the floor). */
  slowDown(key: string): void {
    const bucket = this.bucket(key);
    this.refill(bucket);
    const now = this.now();
    if (now - bucket.lastSlowDownAt < 1000) return;
    bucket.lastSlowDownAt = now;
    bucket.rate = Math.max(this.minRatePerSecond, bucket.rate / 2);
    bucket.tokens = Math.min(bucket.tokens, 0);
  }

  /** The current rate of a key (tokens a second). */
  rateOf(key: string): number {
    const bucket = this.buckets.get(key);
    if (!bucket) return this.ratePerSecond;
    this.refill(bucket);
    return bucket.rate;
  }

  /** Keys whose rate is below the configured one, with their rate. */
  slowedDown(): Map<string, number> {
    const out = new Map<string, number>();
    for (const key of this.buckets.keys()) {
      const rate = this.rateOf(key);
      if (rate < this.ratePerSecond) out.set(key, rate);
    }
    return out;
  }

  /** Callers waiting for a token, all keys together. */
  waiting(): number {
    let n = 0;
    for (const bucket of this.buckets.values()) for (const w of bucket.waiters) if (!w.cancelled) n += 1;
    return n;
  }

  private bucket(key: string): Bucket {
    let bucket = this.buckets.get(key);
    if (!bucket) {
      bucket = {
        rate: this.ratePerSecond,
        lastSlowDownAt: -Infinity,
        tokens: this.burst,
        updatedAt: this.now(),
        waiters: new Deque(),
        timer: undefined,
      };
      this.buckets.set(key, bucket);
    }
    return bucket;
  }

  private refill(bucket: Bucket): void {
    const now = this.now();
    const elapsed = now - bucket.updatedAt;
    if (elapsed > 0) {
      bucket.tokens = Math.min(this.burst, bucket.tokens + (elapsed * bucket.rate) / 1000);
      if (bucket.rate < this.ratePerSecond)
        bucket.rate = Math.min(this.ratePerSecond, bucket.rate + (elapsed * this.ratePerSecond) / 20_000);
      bucket.updatedAt = now;
    }
  }

  private serve(bucket: Bucket): void {
    this.refill(bucket);
    for (;;) {
      const head = bucket.waiters.peek();
      if (!head) return;
      if (head.cancelled) {
        bucket.waiters.shift();
        continue;
      }
      if (bucket.tokens < 1) return;
      bucket.tokens -= 1;
      bucket.waiters.shift();
      head.cleanup?.();
      head.resolve();
    }
  }

  private arm(key: string, bucket: Bucket): void {
    if (bucket.timer !== undefined) return;
    this.refill(bucket);
    // Waiters are served in groups of what accrues in GRANT_TICK_MS (never more than the burst
    // or the waiters): one timer wakeup, one round of calls and one produce of results per group
    // instead of per token. No burst beyond the bucket's own: after 200 ms of quiet a caller may
    // take the whole burst at once anyway. A group costs CPU of its own, beyond its calls': at
    // 200/s, 20 ms groups cost 0.48 ms per result, 100 ms groups 0.28–0.30, 200 ms groups
    // 0.21–0.24 (docs/benchmarks.md). The price: the busiest second after a quiet moment holds
    // the burst plus the rate (240 calls at 200/s, 220 with 100 ms groups), and a 429 halves
    // the rate.
    const group = Math.max(
      1,
      Math.min(this.burst, bucket.waiters.length, Math.floor((bucket.rate * GRANT_TICK_MS) / 1000)),
    );
    const missing = Math.max(0, group - bucket.tokens);
    const delay = Math.max(1, Math.ceil((missing * 1000) / bucket.rate));
    bucket.timer = setTimeout(() => {
      bucket.timer = undefined;
      this.serve(bucket);
      if (bucket.waiters.length > 0) this.arm(key, bucket);
    }, delay);
  }
}
