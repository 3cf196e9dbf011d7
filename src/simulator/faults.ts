import type { SimulatorFaults } from '../config/schema.js';
import { faultsPatchSchema, NO_FAULTS } from './options.js';

export type FaultsPatchResult =
  { ok: true; faults: SimulatorFaults } | { ok: false; message: string; issues: { path: string; message: string }[] };

/**
 * The faults in force, changed at run time through `/sim/faults`. Decisions are drawn per
 * call from `random` (replaceable so that a test can make them deterministic).
 */
export class Faults {
  private current: SimulatorFaults;
  private readonly buckets = new Map<string, { tokens: number; at: number }>();

  constructor(
    initial: SimulatorFaults,
    private readonly now: () => number = Date.now,
    private readonly random: () => number = Math.random,
  ) {
    this.current = structuredClone(initial);
  }

  get(): SimulatorFaults {
    return structuredClone(this.current);
  }

  /** Merges a partial update; invalid values (or unknown keys) change nothing. */
  patch(input: unknown): FaultsPatchResult {
    const parsed = faultsPatchSchema.safeParse(input);
    if (!parsed.success) {
      const issues = parsed.error.issues.map((i) => ({
        path: i.path.map(String).join('.') || '(body)',
        message: i.message,
      }));
      return {
        ok: false,
        message: `invalid faults: ${issues.map((i) => `${i.path}: ${i.message}`).join('; ')}`,
        issues,
      };
    }
    const patch = Object.fromEntries(
      Object.entries(parsed.data).filter(([, v]) => v !== undefined),
    ) as Partial<SimulatorFaults>;
    this.current = { ...this.current, ...patch };
    if (patch.sendRateLimitPerSecond !== undefined) this.buckets.clear();
    return { ok: true, faults: this.get() };
  }

  reset(): SimulatorFaults {
    this.current = structuredClone(NO_FAULTS);
    this.buckets.clear();
    return this.get();
  }

  sendLatencyMs(): number {
    const { min, max } = this.current.sendLatencyMs;
    return max <= min ? min : min + Math.floor(this.random() * (max - min + 1));
  }

  /**
   * What a send call is answered with before it is processed: a 429 (rate fault or the
   * token bucket), a 5xx, or nothing. `key` names the bucket (business and operation).
   */
  sendFault(
    key: string,
  ): { status: 429; retryAfterSeconds: number | null } | { status: 500 | 502 | 503 | 504 } | undefined {
    const limit = this.current.sendRateLimitPerSecond;
    if (limit !== null && !this.take(key, limit)) return { status: 429, retryAfterSeconds: 1 };
    if (this.roll(this.current.send429Rate))
      return { status: 429, retryAfterSeconds: this.current.send429RetryAfterSeconds };
    if (this.roll(this.current.send5xxRate)) {
      const statuses = [500, 502, 503, 504] as const;
      return { status: statuses[Math.floor(this.random() * statuses.length)] ?? 500 };
    }
    return undefined;
  }

  duplicateDelivery(): boolean {
    return this.roll(this.current.duplicateDeliveryRate);
  }

  badSignature(): boolean {
    return this.roll(this.current.badSignatureRate);
  }

  get reorderDeliveries(): boolean {
    return this.current.reorderDeliveries;
  }

  get deliveryDelayMs(): number {
    return this.current.deliveryDelayMs;
  }

  private roll(rate: number): boolean {
    return rate > 0 && (rate >= 1 || this.random() < rate);
  }

  /** Token bucket with a burst of one second's worth. */
  private take(key: string, perSecond: number): boolean {
    const now = this.now();
    const bucket = this.buckets.get(key) ?? { tokens: perSecond, at: now };
    bucket.tokens = Math.min(perSecond, bucket.tokens + ((now - bucket.at) / 1000) * perSecond);
    bucket.at = now;
    this.buckets.set(key, bucket);
    if (bucket.tokens < 1) return false;
    bucket.tokens -= 1;
    return true;
  }
}
