import { describe, expect, it } from 'vitest';
import { CircuitBreaker } from '../../src/sender/circuit-breaker.js';
import { Semaphore } from '../../src/sender/semaphore.js';

describe('call slots and circuit: the immediate answers without a promise', () => {
  it('tryAcquire takes a free slot, never one a waiter is queued for, and none past the bound', async () => {
    const slots = new Semaphore(1);
    expect(slots.tryAcquire()).toBe(true);
    expect(slots.tryAcquire()).toBe(false);
    const waiting = slots.acquire();
    slots.release();
    // The freed slot went to the waiter, in order: a newcomer does not jump the queue.
    expect(await waiting).toBe(true);
    expect(slots.tryAcquire()).toBe(false);
    slots.release();
    expect(slots.tryAcquire()).toBe(true);
    expect(slots.inUse).toBe(1);
  });

  it('tryAdmit admits while the circuit is closed and defers to admit once it opened', () => {
    const circuits = new CircuitBreaker({ failureThreshold: 1, probeInitialMs: 10_000, probeMaxMs: 10_000 });
    const first = circuits.tryAdmit('biz');
    expect(first).toEqual({ key: 'biz', probe: false });
    circuits.settle(first!, true);
    expect(circuits.tryAdmit('biz')).toBeUndefined();
    expect(circuits.tryAdmit('other')).toEqual({ key: 'other', probe: false });
  });
});
