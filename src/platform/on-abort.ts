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
  let callbacks = callbacksBySignal.get(signal);
  if (!callbacks) {
    const registered = new Set<() => void>();
    callbacks = registered;
    callbacksBySignal.set(signal, registered);
    signal.addEventListener(
      'abort',
      () => {
        callbacksBySignal.delete(signal);
        for (const run of registered) run();
        registered.clear();
      },
      { once: true },
    );
  }
  const set = callbacks;
  set.add(callback);
  return () => void set.delete(callback);
}
