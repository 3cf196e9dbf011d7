import { vi } from 'vitest';

/**
 * Watches the intervals of one period started from now on (the period tells the code's timer
 * from any other): how many are live (started, not cleared) and how many were started. Undo with
 * `vi.restoreAllMocks()`.
 */
export function watchIntervals(periodMs: number): { live: () => number; started: () => number } {
  const live = new Set<unknown>();
  let started = 0;
  const realSet = globalThis.setInterval;
  const realClear = globalThis.clearInterval;
  vi.spyOn(globalThis, 'setInterval').mockImplementation(((fn: () => void, ms: number) => {
    const timer = realSet(fn, ms);
    if (ms === periodMs) {
      live.add(timer);
      started++;
    }
    return timer;
  }) as typeof globalThis.setInterval);
  vi.spyOn(globalThis, 'clearInterval').mockImplementation(((timer: NodeJS.Timeout) => {
    live.delete(timer);
    realClear(timer);
  }) as typeof globalThis.clearInterval);
  return { live: () => live.size, started: () => started };
}
