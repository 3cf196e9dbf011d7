import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { WorkInterval } from '../../src/platform/work-interval.js';

describe('WorkInterval (an interval only while there is work)', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('ticks every period until a tick answers false, then keeps no timer until started again', () => {
    let work = 3;
    const ticks: number[] = [];
    const interval = new WorkInterval(100, () => {
      ticks.push(work);
      return --work > 0;
    });
    interval.start();
    interval.start(); // a no-op while it runs: one timer
    expect(vi.getTimerCount()).toBe(1);
    vi.advanceTimersByTime(1000);
    expect(ticks).toEqual([3, 2, 1]);
    expect(vi.getTimerCount()).toBe(0);
    work = 1;
    interval.start();
    vi.advanceTimersByTime(100);
    expect(ticks).toEqual([3, 2, 1, 1]);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('stop ends it at once', () => {
    const tick = vi.fn(() => true);
    const interval = new WorkInterval(100, tick);
    interval.start();
    vi.advanceTimersByTime(250);
    interval.stop();
    vi.advanceTimersByTime(1000);
    expect(tick).toHaveBeenCalledTimes(2);
    expect(vi.getTimerCount()).toBe(0);
  });
});
