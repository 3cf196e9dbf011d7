/**
 * A Map whose entries are kept in the order they were last set or touched, the least recent
 * first: what every bounded LRU in the code evicts from. README.md "Bounded maps" says why a
 * Map's own insertion order is not used for this (its oldest key is not O(1) to find, and an
 * iterator kept to find it pins every table the Map has outgrown).
 *
 * The order is a doubly linked list of slots in typed arrays, the keys and values in plain
 * arrays beside them, and a Map from key to slot: no object per entry, nothing for the
 * collector to trace but the keys and values themselves. Every operation is O(1).
 */
export class RecencyMap<K, V> {
  private readonly slotOf = new Map<K, number>();
  private keyAt: (K | undefined)[] = [];
  private valueAt: (V | undefined)[] = [];
  /** Per slot: the slot set before it and after it (-1: none). A free slot's `newer` is the next free one. */
  private older = new Int32Array(16);
  private newer = new Int32Array(16);
  private oldestSlot = -1;
  private newestSlot = -1;
  private freeSlot = -1;
  /** Bumped by every change of the order: an iteration that sees it move throws. */
  private changes = 0;

  get size(): number {
    return this.slotOf.size;
  }

  has(key: K): boolean {
    return this.slotOf.has(key);
  }

  /** The value, its place untouched. */
  peek(key: K): V | undefined {
    const slot = this.slotOf.get(key);
    return slot === undefined ? undefined : this.valueAt[slot];
  }

  /** The value, made the most recent. */
  get(key: K): V | undefined {
    const slot = this.slotOf.get(key);
    if (slot === undefined) return undefined;
    this.moveToNewest(slot);
    return this.valueAt[slot];
  }

  /** Sets the value and makes it the most recent. */
  set(key: K, value: V): void {
    let slot = this.slotOf.get(key);
    if (slot === undefined) {
      slot = this.allocate();
      this.changes += 1;
      this.keyAt[slot] = key;
      this.slotOf.set(key, slot);
      this.append(slot);
    } else {
      this.moveToNewest(slot);
    }
    this.valueAt[slot] = value;
  }

  delete(key: K): boolean {
    const slot = this.slotOf.get(key);
    if (slot === undefined) return false;
    this.changes += 1;
    this.slotOf.delete(key);
    this.unlink(slot);
    this.keyAt[slot] = undefined;
    this.valueAt[slot] = undefined;
    this.newer[slot] = this.freeSlot;
    this.freeSlot = slot;
    return true;
  }

  /** The least recent key (undefined when empty); nothing is moved. */
  oldest(): K | undefined {
    return this.oldestSlot < 0 ? undefined : this.keyAt[this.oldestSlot];
  }

  /** The least recent key's value (undefined when empty), without a lookup by key; nothing is moved. */
  oldestValue(): V | undefined {
    return this.oldestSlot < 0 ? undefined : this.valueAt[this.oldestSlot];
  }

  clear(): void {
    this.changes += 1;
    this.slotOf.clear();
    this.keyAt = [];
    this.valueAt = [];
    this.older = new Int32Array(16);
    this.newer = new Int32Array(16);
    this.oldestSlot = this.newestSlot = this.freeSlot = -1;
  }

  /**
   * Least recent first. Unlike a Map's, an iteration throws once the map is changed (a set, a
   * get that moves, a delete, a clear): copy the entries first to change it while going through them.
   */
  *entries(): IterableIterator<[K, V]> {
    for (const slot of this.slots()) yield [this.keyAt[slot] as K, this.valueAt[slot] as V];
  }

  *values(): IterableIterator<V> {
    for (const slot of this.slots()) yield this.valueAt[slot] as V;
  }

  [Symbol.iterator](): IterableIterator<[K, V]> {
    return this.entries();
  }

  private *slots(): IterableIterator<number> {
    const changes = this.changes;
    for (let slot = this.oldestSlot; slot >= 0; slot = this.newer[slot]!) {
      yield slot;
      if (this.changes !== changes) throw new Error('RecencyMap changed while it was being iterated');
    }
  }

  private allocate(): number {
    if (this.freeSlot >= 0) {
      const slot = this.freeSlot;
      this.freeSlot = this.newer[slot]!;
      return slot;
    }
    const slot = this.keyAt.length;
    if (slot === this.older.length) {
      this.older = grown(this.older);
      this.newer = grown(this.newer);
    }
    return slot;
  }

  private moveToNewest(slot: number): void {
    if (slot === this.newestSlot) return;
    this.changes += 1;
    this.unlink(slot);
    this.append(slot);
  }

  private append(slot: number): void {
    this.older[slot] = this.newestSlot;
    this.newer[slot] = -1;
    if (this.newestSlot >= 0) this.newer[this.newestSlot] = slot;
    else this.oldestSlot = slot;
    this.newestSlot = slot;
  }

  private unlink(slot: number): void {
    const older = this.older[slot]!;
    const newer = this.newer[slot]!;
    if (older >= 0) this.newer[older] = newer;
    else this.oldestSlot = newer;
    if (newer >= 0) this.older[newer] = older;
    else this.newestSlot = older;
  }
}

function grown(links: Int32Array<ArrayBuffer>): Int32Array<ArrayBuffer> {
  const bigger = new Int32Array(links.length * 2);
  bigger.set(links);
  return bigger;
}
