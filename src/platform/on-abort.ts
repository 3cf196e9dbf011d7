/**
 * `onAbort(signal, callback)`: runs `callback` once when `signal` aborts; the returned function
 * unregisters it. One 'abort' listener per signal, however many callbacks wait on it, and O(1)
 * to add and remove: `EventTarget.addEventListener` walks all of a signal's listeners on every
 * add (its duplicate check), and the sender parks up to its whole window (2,000 requests) on one
 * partition's signal, where that walk was 12 µs per request (docs/benchmarks.md).
 * Callers check `signal.aborted` first, as they would before adding a listener.
 */
const callbacksBySignal = new WeakMap<AbortSignal, Set<() => void>>();

export function onAbort(signal: AbortSignal, callback: () => void): () => void {
  const callbacks = callbacksBySignal.get(signal) ?? listen(signal);
  callbacks.add(callback);
  return () => void callbacks.delete(callback);
}

/** The signal's one listener, running the callbacks registered when it aborts. */
function listen(signal: AbortSignal): Set<() => void> {
  const callbacks = new Set<() => void>();
  callbacksBySignal.set(signal, callbacks);
  signal.addEventListener(
    'abort',
    () => {
      callbacksBySignal.delete(signal);
      for (const run of callbacks) run();
      callbacks.clear();
    },
    { once: true },
  );
  return callbacks;
}
