import { describe, expect, it } from 'vitest';
import type { ExpiredSendResult, RejectedSendResult } from '../../src/contracts/send.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { applyOutcome, outcomeEventFrom } from '../../src/tracker/request-outcome-rules.js';

/**
 * The rule that keeps a request's rejected or expired outcome: the latest, whatever the order; a replay changes
 * nothing.
 */
const NOW = new Date('2026-11-26T12:00:00.000Z');
const rejected = (rejectedAt: string | undefined, code = 'c'): RejectedSendResult => ({
  requestId: 'r1',
  businessId: 'biz_1',
  outcome: 'rejected',
  attempts: 3,
  maybeSent: true,
  ...(rejectedAt ? { rejectedAt } : {}),
  error: { httpStatus: 400, type: 't', code, message: 'm', cntTraceId: 'trace', retriable: true },
});
const expired = (expiredAt: string): ExpiredSendResult => ({
  requestId: 'r1',
  businessId: 'biz_1',
  outcome: 'expired',
  type: 'template',
  recipient: '+15550002222',
  attempts: 0,
  maybeSent: false,
  expiresAt: '2026-11-26T09:00:00+01:00',
  expiredBy: 'ttlMs',
  expiredAt,
  content: {
    templateName: 'order_update',
    parameters: Array.from({ length: 25 }, (_, i) => ({ name: `p${i}`, value: 'v' })),
  },
});

describe('request outcomes', () => {
  it('reads a rejected and an expired result (times in UTC; a 0.1.0 rejection without rejectedAt takes the record time; content bounded)', () => {
    expect(outcomeEventFrom(rejected('2026-11-26T10:00:00.000Z'), 0)).toEqual({
      requestId: 'r1',
      businessId: 'biz_1',
      outcome: 'rejected',
      type: null,
      recipient: null,
      attempts: 3,
      maybeSent: true,
      error: rejected(undefined).error,
      expiresAt: null,
      expiredBy: null,
      at: '2026-11-26T10:00:00.000Z',
    });
    expect(outcomeEventFrom(rejected(undefined), Date.parse('2026-11-26T10:00:01Z')).at).toBe(
      '2026-11-26T10:00:01.000Z',
    );
    const e = outcomeEventFrom(expired('2026-11-26T08:00:00.000Z'), 0);
    expect(e).toMatchObject({
      outcome: 'expired',
      error: null,
      expiresAt: '2026-11-26T08:00:00.000Z',
      expiredBy: 'ttlMs',
      type: 'template',
      recipient: '+15550002222',
    });
    expect(e.content).toMatchObject({ templateName: 'order_update', truncated: true });
    expect(e.content!.parameters).toHaveLength(20);
    let thrown: unknown;
    try {
      outcomeEventFrom(rejected('yesterday'), 0);
    } catch (error) {
      thrown = error;
    }
    expect(isMsgbridgeError(thrown) && thrown.code).toBe('INVALID_ARGUMENT');
  });

  it('keeps the latest in any order; the same one again, or an older one, changes nothing', () => {
    const events = [
      outcomeEventFrom(rejected('2026-11-26T10:00:00.000Z', 'first'), 0),
      outcomeEventFrom(expired('2026-11-26T11:00:00.000Z'), 0),
      outcomeEventFrom(rejected('2026-11-26T11:30:00.000Z', 'last'), 0),
    ];
    const orders = [
      [0, 1, 2],
      [2, 1, 0],
      [1, 2, 0],
      [0, 2, 1, 2, 0],
    ];
    for (const order of orders) {
      let kept;
      for (const i of order) kept = applyOutcome(kept, events[i]!, NOW).outcome;
      expect(kept).toMatchObject({
        outcome: 'rejected',
        error: { code: 'last' },
        at: '2026-11-26T11:30:00.000Z',
        updatedAt: NOW.toISOString(),
      });
      expect(applyOutcome(kept, events[2]!, new Date()).changed).toBe(false);
      expect(applyOutcome(kept, events[0]!, new Date())).toEqual({ outcome: kept, changed: false });
    }
  });
});
