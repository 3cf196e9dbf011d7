import { Deque } from '../platform/deque.js';
import { onAbort } from '../platform/on-abort.js';

/**
 * At most `permits` holders at once; waiters are served in FIFO order and leave the queue
 * when their signal aborts. The sender bounds its provider calls in flight with it, so that
 * requests waiting for an open circuit or a token hold no call slot.
 */
export class Semaphore {
  private held = 0;
  private readonly waiters = new Deque<{ grant: () => void; cancelled: boolean }>();

  constructor(private readonly permits: number) {
    if (!(permits >= 1)) throw new RangeError('permits must be at least 1');
  }

  get inUse(): number {
    return this.held;
  }

  /** A permit at once when one is free and nobody waits (the hot path, no promise); false = ask `acquire`. */
  tryAcquire(): boolean {
    if (this.held >= this.permits || this.waiters.length > 0) return false;
    this.held += 1;
    return true;
  }

  /** Resolves true with a permit, or false when the signal aborts first. */
  acquire(signal?: AbortSignal): Promise<boolean> {
    if (signal?.aborted) return Promise.resolve(false);
    if (this.held < this.permits && this.waiters.length === 0) {
      this.held += 1;
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const waiter = {
        cancelled: false,
        grant: () => {
          unregister?.();
          resolve(true);
        },
      };
      const unregister = signal
        ? onAbort(signal, () => {
            waiter.cancelled = true;
            resolve(false);
          })
        : undefined;
      this.waiters.push(waiter);
    });
  }

  release(): void {
    for (;;) {
      const next = this.waiters.shift();
      if (!next) break;
      if (next.cancelled) continue;
      next.grant();
      return;
    }
    this.held -= 1;
  }
}
