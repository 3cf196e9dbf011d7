/** A FIFO with O(1) amortised push, shift and peek (an array with a moving head). */
export class Deque<T> {
  private items: (T | undefined)[] = [];
  private head = 0;

  get length(): number {
    return this.items.length - this.head;
  }

  /** The item `index` places from the front (undefined past the end). */
  at(index: number): T | undefined {
    return index >= 0 && index < this.length ? this.items[this.head + index] : undefined;
  }

  push(item: T): void {
    this.items.push(item);
  }

  peek(): T | undefined {
    return this.head < this.items.length ? this.items[this.head] : undefined;
  }

  shift(): T | undefined {
    if (this.head >= this.items.length) return undefined;
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head += 1;
    // Compact once the dead prefix dominates, so memory follows the live size.
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return item;
  }

  /** Keeps only the items for which `keep` returns true, in order. */
  retain(keep: (item: T) => boolean): void {
    const kept: T[] = [];
    for (let i = this.head; i < this.items.length; i++) {
      const item = this.items[i] as T;
      if (keep(item)) kept.push(item);
    }
    this.items = kept;
    this.head = 0;
  }

  *[Symbol.iterator](): IterableIterator<T> {
    for (let i = this.head; i < this.items.length; i++) yield this.items[i] as T;
  }
}
