import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { CircuitBreaker, type CircuitState } from '../../src/sender/circuit-breaker.js';
import { Semaphore } from '../../src/sender/semaphore.js';

// random: () => 1 makes each probe delay its full step: 20 ms, then 40 (the cap).
function breaker(threshold = 3) {
  const changes: [string, CircuitState, number][] = [];
  const circuits = new CircuitBreaker({
    failureThreshold: threshold,
    probeInitialMs: 20,
    probeMaxMs: 40,
    random: () => 1,
    onChange: (k, s, f) => changes.push([k, s, f]),
  });
  return { circuits, changes };
}

describe('CircuitBreaker (one per business)', () => {
  beforeEach(() => {
    vi.useFakeTimers({ now: 0 });
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('opens after consecutive failures only; any answer resets the count', async () => {
    const { circuits, changes } = breaker(3);
    for (const failing of [true, true, false, true, true]) circuits.settle((await circuits.admit('a'))!, failing);
    expect(circuits.state('a')).toBe('closed');
    circuits.settle((await circuits.admit('a'))!, true);
    expect(circuits.state('a')).toBe('open');
    expect(changes).toEqual([['a', 'open', 3]]);
    expect(circuits.openKeys()).toEqual(['a']);
    // Other businesses are untouched.
    expect(await circuits.admit('b')).toEqual({ key: 'b', probe: false });
  });

  it('while open: waiters hold, one probe at a time after the backoff; a failed probe backs off again; success releases all', async () => {
    const { circuits, changes } = breaker(1);
    circuits.settle((await circuits.admit('a'))!, true);
    const opened = Date.now();
    const admitted: { probe: boolean; at: number }[] = [];
    const waiters = Array.from({ length: 5 }, () =>
      circuits.admit('a').then((a) => {
        admitted.push({ probe: a!.probe, at: Date.now() });
        return a!;
      }),
    );
    await vi.advanceTimersByTimeAsync(19);
    expect(admitted).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(admitted).toEqual([{ probe: true, at: opened + 20 }]);
    // Nobody else goes while the probe is out, however long it takes.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(admitted).toHaveLength(1);
    circuits.settle({ key: 'a', probe: true }, true);
    const failedAt = Date.now();
    await vi.advanceTimersByTimeAsync(39);
    expect(admitted).toHaveLength(1);
    await vi.advanceTimersByTimeAsync(1);
    expect(admitted[1]).toEqual({ probe: true, at: failedAt + 40 });
    // The second probe succeeds: the circuit closes and every waiter goes at once.
    circuits.settle({ key: 'a', probe: true }, false);
    const all = await Promise.all(waiters);
    expect(all.filter((a) => a.probe)).toHaveLength(2);
    expect(all.filter((a) => !a.probe)).toHaveLength(3);
    expect(admitted.map((a) => a.at)).toEqual([
      opened + 20,
      failedAt + 40,
      failedAt + 40,
      failedAt + 40,
      failedAt + 40,
    ]);
    expect(circuits.state('a')).toBe('closed');
    expect(changes.map(([, s]) => s)).toEqual(['open', 'closed']);
  });

  it('gives up waiting when the signal aborts or the deadline comes, and a cancelled probe frees the slot', async () => {
    const { circuits } = breaker(1);
    circuits.settle((await circuits.admit('a'))!, true);
    const stop = new AbortController();
    const waiting = circuits.admit('a', stop.signal);
    stop.abort();
    expect(await waiting).toBeUndefined();
    const beforeProbe = circuits.admit('a', undefined, Date.now() + 5);
    await vi.advanceTimersByTimeAsync(5);
    expect(await beforeProbe).toBeUndefined();
    const first = circuits.admit('a');
    await vi.advanceTimersByTimeAsync(15);
    const probe = (await first)!;
    expect(probe.probe).toBe(true);
    const next = circuits.admit('a');
    circuits.cancel(probe);
    expect(await next).toEqual({ key: 'a', probe: true });
  });
});

describe('Semaphore', () => {
  it('bounds holders, serves waiters in order, and drops aborted waiters', async () => {
    const slots = new Semaphore(2);
    expect(await slots.acquire()).toBe(true);
    expect(await slots.acquire()).toBe(true);
    const order: number[] = [];
    const stop = new AbortController();
    const third = slots.acquire().then((ok) => order.push(3) && ok);
    const aborted = slots.acquire(stop.signal);
    const fifth = slots.acquire().then((ok) => order.push(5) && ok);
    stop.abort();
    expect(await aborted).toBe(false);
    slots.release();
    slots.release();
    expect(await third).toBe(true);
    expect(await fifth).toBe(true);
    expect(order).toEqual([3, 5]);
    expect(slots.inUse).toBe(2);
  });
});
