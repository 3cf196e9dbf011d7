import type { TrackedMessage } from '../contracts/message-state.js';
import { RecencyMap } from '../platform/recency-map.js';

/**
 * A bounded LRU of states: the tracker keeps at most `maxEntries` in memory and re-reads an
 * evicted one from the task's local store when its key has news (README "Memory"). get, set and
 * evict are O(1) (a RecencyMap).
 *
 * An optional secondary key (a message's requestId) gets an index that always points at a
 * cached entry: it goes when its entry is evicted, deleted or re-keyed.
 */
export interface StateCacheOptions<V> {
  maxEntries: number;
  /** The value's secondary key, if any (null/undefined: not indexed). */
  secondaryKey?: (value: V) => string | null | undefined;
  /** Called for each entry dropped to stay within `maxEntries` (not for `delete`). */
  onEvict?: (key: string, value: V) => void;
}

export class StateCache<V> {
  private readonly entries = new RecencyMap<string, V>();
  private readonly index = new Map<string, string>();
  private evicted = 0;
  readonly maxEntries: number;

  constructor(private readonly options: StateCacheOptions<V>) {
    if (!Number.isInteger(options.maxEntries) || options.maxEntries < 1)
      throw new RangeError('maxEntries must be a positive integer');
    this.maxEntries = options.maxEntries;
  }

  get size(): number {
    return this.entries.size;
  }

  /** Entries dropped to stay within the bound since creation. */
  get evictions(): number {
    return this.evicted;
  }

  /** The value, marked most recently used. */
  get(key: string): V | undefined {
    return this.entries.get(key);
  }

  /** The value, recency untouched. */
  peek(key: string): V | undefined {
    return this.entries.peek(key);
  }

  has(key: string): boolean {
    return this.entries.has(key);
  }

  /** The key of the entry whose secondary key is `secondary` (the latest set when several share it). */
  keyOf(secondary: string): string | undefined {
    return this.index.get(secondary);
  }

  /** The value by its secondary key, marked most recently used. */
  getBySecondary(secondary: string): V | undefined {
    const key = this.index.get(secondary);
    return key === undefined ? undefined : this.get(key);
  }

  /** Stores `value` as the most recently used entry, evicting the least recently used beyond the bound. */
  set(key: string, value: V): void {
    const previous = this.entries.peek(key);
    if (previous !== undefined) this.unindex(key, previous);
    this.entries.set(key, value);
    const secondary = this.options.secondaryKey?.(value);
    if (secondary !== null && secondary !== undefined) this.index.set(secondary, key);
    while (this.entries.size > this.maxEntries) {
      const oldest = this.entries.oldest() as string;
      const oldestValue = this.entries.oldestValue() as V;
      this.remove(oldest, oldestValue);
      this.evicted += 1;
      this.options.onEvict?.(oldest, oldestValue);
    }
  }

  delete(key: string): boolean {
    const value = this.entries.peek(key);
    if (value === undefined) return false;
    this.remove(key, value);
    return true;
  }

  /** Deletes every entry the predicate selects (a revoked partition's states); returns how many. */
  deleteWhere(predicate: (key: string, value: V) => boolean): number {
    let removed = 0;
    for (const [key, value] of [...this.entries]) {
      if (!predicate(key, value)) continue;
      this.remove(key, value);
      removed += 1;
    }
    return removed;
  }

  clear(): void {
    this.entries.clear();
    this.index.clear();
  }

  /** Least recently used first. */
  *[Symbol.iterator](): IterableIterator<[string, V]> {
    yield* this.entries;
  }

  private remove(key: string, value: V): void {
    this.entries.delete(key);
    this.unindex(key, value);
  }

  private unindex(key: string, value: V): void {
    const secondary = this.options.secondaryKey?.(value);
    if (secondary !== null && secondary !== undefined && this.index.get(secondary) === key)
      this.index.delete(secondary);
  }
}

/** The tracker's cache of message states: keyed by message id, indexed by request id. */
export function messageStateCache(
  maxEntries: number,
  onEvict?: (messageId: string, state: TrackedMessage) => void,
): StateCache<TrackedMessage> {
  return new StateCache<TrackedMessage>({
    maxEntries,
    secondaryKey: (state) => state.requestId,
    ...(onEvict ? { onEvict } : {}),
  });
}
