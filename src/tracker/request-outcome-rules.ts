import type { RequestOutcome } from '../contracts/request-outcome.js';
import type { ExpiredSendResult, RejectedSendResult } from '../contracts/send.js';
import { boundedContent } from '../contracts/send.js';
import { canonicalIso } from '../contracts/time.js';

/**
 * The pure rule that keeps a request's rejected or expired outcome (contracts/request-outcome.ts;
 * README "Request outcomes"). A request id can end more than once: a retriable rejection or an
 * expiry is not remembered by the sender, so a resubmission ends again. The outcome kept is the
 * latest by its time (`at`, then the outcome's name for a tie), whatever order the results came
 * in; the same result again (a replay, a repeat) changes nothing and publishes nothing.
 */

/** An outcome as read from a result, before the tracker stamps it. */
export type OutcomeEvent = Omit<RequestOutcome, 'updatedAt'>;

/**
 * The outcome a rejected or expired result carries. `recordTimestampMs` stands for `at` when a
 * rejected result of 0.1.0 has no `rejectedAt`. Throws INVALID_ARGUMENT for a time that cannot be read.
 */
export function outcomeEventFrom(
  result: RejectedSendResult | ExpiredSendResult,
  recordTimestampMs: number,
): OutcomeEvent {
  const rejected = result.outcome === 'rejected';
  const at = rejected ? (result.rejectedAt ?? new Date(recordTimestampMs).toISOString()) : result.expiredAt;
  return {
    requestId: result.requestId,
    businessId: result.businessId ?? null,
    outcome: result.outcome,
    type: result.type ?? null,
    recipient: result.recipient ?? null,
    attempts: result.attempts,
    maybeSent: result.maybeSent ?? false,
    error: rejected ? result.error : null,
    expiresAt: rejected ? null : canonicalIso(result.expiresAt, 'expiresAt'),
    expiredBy: rejected ? null : result.expiredBy,
    at: canonicalIso(at, rejected ? 'rejectedAt' : 'expiredAt'),
    // Bounded again: the tracker keeps its own limit whatever a producer of results wrote.
    ...(result.content ? { content: boundedContent(result.content) } : {}),
  };
}

const order = (o: Pick<RequestOutcome, 'at' | 'outcome'>) => `${o.at}\n${o.outcome}`;

/** The outcome to keep: `next` when it is later than `current` (or there is none), else `current` unchanged. */
export function applyOutcome(
  current: RequestOutcome | undefined,
  next: OutcomeEvent,
  now: Date,
): { outcome: RequestOutcome; changed: boolean } {
  if (current && order(next) <= order(current)) return { outcome: current, changed: false };
  return { outcome: { ...next, updatedAt: now.toISOString() }, changed: true };
}
