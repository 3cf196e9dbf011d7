/**
 * The least recently inserted key of a Map, for a bounded Map to evict, in amortized O(1).
 *
 * `map.keys().next()` is not O(1) here. V8's ordered hash table keeps deleted entries in place
 * until it is rehashed, and a new iterator starts at the table's first slot. So once a bounded
 * Map is full and evicts on every insert, each new iterator steps over every entry deleted since
 * the last rehash, tens of thousands of them: 20–90 µs per insert instead of under 1
 * (docs/benchmarks.md, "Bounded Maps once full").
 *
 * This keeps one iterator and resumes it. V8 carries an iterator across rehashes, and Map
 * iteration visits keys inserted after it began.
 *
 * The contract: the caller deletes each key it is given before it asks again. Then no key of the
 * map is behind the cursor, because a key inserted again goes to the end.
 */
export class EvictionCursor<K> {
  private keys: Iterator<K>;

  constructor(private readonly map: Map<K, unknown>) {
    this.keys = map.keys();
  }

  /** The least recently inserted key (undefined when the map is empty); the caller deletes it. */
  next(): K | undefined {
    if (this.map.size === 0) return undefined;
    let step = this.keys.next();
    if (step.done) {
      // Only when a key it gave was kept: an iterator that ended stays ended, so start again.
      this.keys = this.map.keys();
      step = this.keys.next();
    }
    return step.done ? undefined : step.value;
  }
}
