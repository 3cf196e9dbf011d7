import { onAbort } from './on-abort.js';

/** Resolves true after `ms`, or false as soon as the signal aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      unregister?.();
      resolve(true);
    }, ms);
    const unregister = signal
      ? onAbort(signal, () => {
          clearTimeout(timer);
          resolve(false);
        })
      : undefined;
  });
}
