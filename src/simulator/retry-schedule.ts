/**
 * When to try a webhook delivery again. Exponential from `initialMs`, capped at `maxMs`, with
 * ±10% jitter (small enough that each wait stays longer than the one before it until the cap).
 * A `Retry-After` from the receiver lengthens the wait, never beyond the cap.
 */
export function retryDelayMs(
  failedAttempt: number,
  policy: { initialMs: number; maxMs: number },
  options: { retryAfterMs?: number | undefined; random?: () => number } = {},
): number {
  const random = options.random ?? Math.random;
  const base = Math.min(policy.maxMs, policy.initialMs * 2 ** Math.max(0, failedAttempt - 1));
  let delay = Math.min(policy.maxMs, Math.round(base * (0.9 + 0.2 * random())));
  if (options.retryAfterMs !== undefined && options.retryAfterMs > delay)
    delay = Math.min(policy.maxMs, options.retryAfterMs);
  return delay;
}

/** Whether another attempt fits the budget: attempts made so far and time since the first one. */
export function withinBudget(
  attemptsMade: number,
  firstAttemptAt: number,
  nextAttemptAt: number,
  budget: { maxAttempts: number; maxRetryWindowMs: number },
): boolean {
  return attemptsMade < budget.maxAttempts && nextAttemptAt - firstAttemptAt <= budget.maxRetryWindowMs;
}
