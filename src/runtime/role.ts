import type { Registry } from 'prom-client';

/**
 * The one shape of a running role (ingress, sender, tracker): what the foreground runner and
 * `msgbridge dev` need, the same for every role.
 */
export interface Role {
  /** Resolves once the role serves; rejects when it cannot (a start that failed after returning). */
  readonly ready: Promise<void>;
  /** What /readyz answers now. */
  isReady(): boolean;
  /** Its Prometheus registry (served on /metrics). */
  readonly metrics: Registry;
  /** Its public HTTP address (webhooks, or queries and console); undefined when it serves none. */
  readonly address: string | undefined;
  /** Where /healthz, /readyz and /metrics are served (its private admin port); undefined when not served. */
  readonly adminAddress: string | undefined;
  /**
   * Stops taking work and finishes what is in progress, once: every call returns the same
   * promise. True when everything finished within the role's grace period.
   */
  drain(): Promise<boolean>;
}

/** `work` runs at the first call only; every call answers its one promise. */
export function once<T>(work: () => Promise<T>): () => Promise<T> {
  let running: Promise<T> | undefined;
  return () => (running ??= work());
}

/** Whether `work` settles within `graceMs` (false on timeout or failure, after `onError`). */
export async function withinGrace(
  work: Promise<unknown>,
  graceMs: number,
  onError?: (error: unknown) => void,
): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), graceMs);
    timer.unref();
  });
  const finished = work.then(
    (ok) => ok !== false,
    (error: unknown) => {
      onError?.(error);
      return false;
    },
  );
  try {
    return await Promise.race([finished, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

/** A role's drain: `steps` once, bounded by its grace period (a step answering false counts as unfinished). */
export function drainOnce(
  graceMs: number,
  steps: () => Promise<boolean | void>,
  onError?: (error: unknown) => void,
): () => Promise<boolean> {
  return once(() => withinGrace(steps(), graceMs, onError));
}
