import { backoffDelay } from './retry-policy.js';
import { onAbort } from '../platform/on-abort.js';

/**
 * A circuit per business (README "Provider outages"). Closed: every attempt goes. After
 * `failureThreshold` consecutive failures (no answer, 408, 5xx) it opens: new attempts wait,
 * and one at a time is let through as a probe, the probes spaced by a capped exponential
 * backoff. Any answer that shows a working provider closes it and releases every waiter.
 * Waiting never counts as an attempt, so an outage spends no request's attempts.
 * Pure: the clock and randomness are injectable; timers only wake waiters.
 */
export type CircuitState = 'closed' | 'open';

export interface CircuitOptions {
  failureThreshold: number;
  probeInitialMs: number;
  probeMaxMs: number;
  /** Milliseconds on the wall clock (default Date.now). */
  now?: () => number;
  random?: () => number;
  /** Called once per change of state, with the failures that opened it. */
  onChange?: (key: string, state: CircuitState, consecutiveFailures: number) => void;
}

/** What `admit` hands out, a pass through the circuit: report its outcome exactly once with `settle`. */
export interface CircuitPass {
  readonly key: string;
  readonly probe: boolean;
}

interface Circuit {
  state: CircuitState;
  failures: number;
  /** Probes that failed in a row while open: the backoff step. */
  probeFailures: number;
  nextProbeAt: number;
  probing: boolean;
  waiters: Set<() => void>;
}

export class CircuitBreaker {
  private readonly circuits = new Map<string, Circuit>();
  private readonly now: () => number;
  private readonly random: () => number;

  constructor(private readonly options: CircuitOptions) {
    if (!(options.failureThreshold >= 1)) throw new RangeError('failureThreshold must be at least 1');
    this.now = options.now ?? Date.now;
    this.random = options.random ?? Math.random;
  }

  state(key: string): CircuitState {
    return this.circuits.get(key)?.state ?? 'closed';
  }

  /** Keys whose circuit is open. */
  openKeys(): string[] {
    return [...this.circuits].filter(([, c]) => c.state === 'open').map(([key]) => key);
  }

  /** The admission of a closed circuit, without a promise (the hot path); undefined = ask `admit`. */
  tryAdmit(key: string): CircuitPass | undefined {
    const circuit = this.circuits.get(key);
    return !circuit || circuit.state === 'closed' ? { key, probe: false } : undefined;
  }

  /**
   * Resolves with an admission once an attempt for `key` may start: at once while closed,
   * as the next probe while open. Resolves undefined when `signal` aborts or `untilMs` (wall
   * clock) comes first.
   */
  async admit(key: string, signal?: AbortSignal, untilMs = Infinity): Promise<CircuitPass | undefined> {
    for (;;) {
      if (signal?.aborted) return undefined;
      const circuit = this.circuits.get(key);
      if (!circuit || circuit.state === 'closed') return { key, probe: false };
      const now = this.now();
      if (!circuit.probing && now >= circuit.nextProbeAt) {
        circuit.probing = true;
        return { key, probe: true };
      }
      if (now >= untilMs) return undefined;
      const wakeAt = circuit.probing ? untilMs : Math.min(untilMs, circuit.nextProbeAt);
      await this.waitForChange(circuit, wakeAt - now, signal);
    }
  }

  /** Reports how an admitted attempt went: `failing` when it showed the provider failing. */
  settle(admission: CircuitPass, failing: boolean): void {
    const circuit = this.circuit(admission.key);
    if (admission.probe) circuit.probing = false;
    if (!failing) {
      circuit.failures = 0;
      circuit.probeFailures = 0;
      if (circuit.state === 'open') this.change(admission.key, circuit, 'closed');
      this.wake(circuit);
      return;
    }
    circuit.failures += 1;
    if (circuit.state === 'closed') {
      if (circuit.failures < this.options.failureThreshold) return;
      circuit.nextProbeAt = this.now() + this.probeDelay(circuit);
      this.change(admission.key, circuit, 'open');
    } else if (admission.probe) {
      circuit.probeFailures += 1;
      circuit.nextProbeAt = this.now() + this.probeDelay(circuit);
    }
    this.wake(circuit);
  }

  /**
   * Whether an admission still holds: a request admitted while the circuit was closed may have
   * waited for a token since, and must not call once the circuit opened (the probe still may).
   */
  holds(admission: CircuitPass): boolean {
    return admission.probe || this.state(admission.key) === 'closed';
  }

  /** An admitted attempt that never reached the provider (stopped while waiting, or no longer held). */
  cancel(admission: CircuitPass): void {
    if (!admission.probe) return;
    const circuit = this.circuit(admission.key);
    circuit.probing = false;
    this.wake(circuit);
  }

  private probeDelay(circuit: Circuit): number {
    return backoffDelay(
      circuit.probeFailures + 1,
      { backoffInitialMs: this.options.probeInitialMs, backoffMaxMs: this.options.probeMaxMs },
      this.random,
    );
  }

  private circuit(key: string): Circuit {
    let circuit = this.circuits.get(key);
    if (!circuit) {
      circuit = { state: 'closed', failures: 0, probeFailures: 0, nextProbeAt: 0, probing: false, waiters: new Set() };
      this.circuits.set(key, circuit);
    }
    return circuit;
  }

  private change(key: string, circuit: Circuit, state: CircuitState): void {
    const failures = circuit.failures;
    circuit.state = state;
    this.options.onChange?.(key, state, failures);
  }

  private wake(circuit: Circuit): void {
    const waiters = [...circuit.waiters];
    circuit.waiters.clear();
    for (const wake of waiters) wake();
  }

  private waitForChange(circuit: Circuit, ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        circuit.waiters.delete(done);
        unregister?.();
        resolve();
      };
      const timer = setTimeout(done, Math.max(1, Math.min(ms, 2 ** 31 - 1)));
      circuit.waiters.add(done);
      const unregister = signal && !signal.aborted ? onAbort(signal, done) : undefined;
    });
  }
}
