/**
 * The requests whose body is still arriving, with what each has received: the ingress charges
 * memory for bytes received (never for a length merely promised) and bounds how many bodies
 * may be in progress, per remote address and in total. When a bound is reached, room is made
 * by closing the slowest receiver (fewest bytes per second so far) that has had its grace
 * period, so idle or trickling senders lose their place to traffic that delivers. Pure: the
 * caller passes the clock and closes what it is told to.
 */
export interface ReceivingLimits {
  /** Bodies in progress at once, all addresses together. */
  maxTotal: number;
  /** Bodies in progress at once from one remote address. */
  maxPerAddress: number;
  /** A receiver younger than this is never closed to make room (ms). */
  graceMs: number;
}

interface Entry {
  /** Resolved only when a per-address bound could be reached (reading an address costs). */
  address: string | undefined;
  startedAt: number;
  bytes: number;
}

export class ReceivingSet<T> {
  private readonly entries = new Map<T, Entry>();
  /** Receivers per resolved address. */
  private readonly perAddress = new Map<string, number>();
  private total = 0;

  /** `addressOf` reads a receiver's remote address; it is asked only while the set is that large. */
  constructor(
    private readonly limits: ReceivingLimits,
    private readonly addressOf: (item: T) => string,
  ) {
    if (!(limits.maxTotal >= 1) || !(limits.maxPerAddress >= 1))
      throw new RangeError('the receiving limits must be at least 1');
  }

  /** Bodies in progress. */
  get size(): number {
    return this.entries.size;
  }

  /** Bytes received so far by the bodies in progress. */
  get bytes(): number {
    return this.total;
  }

  has(item: T): boolean {
    return this.entries.has(item);
  }

  items(): IterableIterator<T> {
    return this.entries.keys();
  }

  /**
   * What must be closed so that one more body, `item`, fits: an empty list when it fits
   * as is, the receivers to close (already removed from the set), or undefined when no room
   * can be made (every candidate is still within its grace period).
   */
  makeRoom(item: T, now: number): T[] | undefined {
    const victims: T[] = [];
    // Fewer receivers than the per-address bound: no address can be at it.
    const address = this.entries.size >= this.limits.maxPerAddress ? this.resolveAll(item) : undefined;
    if (address !== undefined && (this.perAddress.get(address) ?? 0) >= this.limits.maxPerAddress) {
      const victim = this.slowest(now, address, victims);
      if (victim === undefined) return undefined;
      victims.push(victim);
    }
    // Closing one of the address's own receivers also frees a place in the total.
    if (this.entries.size - victims.length >= this.limits.maxTotal) {
      const victim = this.slowest(now, undefined, victims);
      if (victim === undefined) return undefined;
      victims.push(victim);
    }
    for (const victim of victims) this.delete(victim);
    return victims;
  }

  add(item: T, now: number): void {
    if (this.entries.has(item)) return;
    this.entries.set(item, { address: undefined, startedAt: now, bytes: 0 });
    if (this.entries.size >= this.limits.maxPerAddress) this.resolveAll(item);
  }

  /** Counts bytes that arrived for a body in progress. */
  charge(item: T, bytes: number): void {
    const entry = this.entries.get(item);
    if (!entry) return;
    entry.bytes += bytes;
    this.total += bytes;
  }

  /** The body is complete or abandoned: its bytes no longer count here. Returns whether it was in the set. */
  delete(item: T): boolean {
    const entry = this.entries.get(item);
    if (!entry) return false;
    this.entries.delete(item);
    this.total -= entry.bytes;
    if (entry.address !== undefined) {
      const left = (this.perAddress.get(entry.address) ?? 1) - 1;
      if (left === 0) this.perAddress.delete(entry.address);
      else this.perAddress.set(entry.address, left);
    }
    return true;
  }

  /** Resolves the address of every receiver not resolved yet (counting them), and returns `item`'s. */
  private resolveAll(item: T): string {
    for (const [receiver, entry] of this.entries) {
      if (entry.address !== undefined) continue;
      entry.address = this.addressOf(receiver);
      this.perAddress.set(entry.address, (this.perAddress.get(entry.address) ?? 0) + 1);
    }
    return this.entries.get(item)?.address ?? this.addressOf(item);
  }

  /** The receiver with the lowest rate so far among those past their grace period (of one address, if given). */
  private slowest(now: number, address: string | undefined, exclude: readonly T[]): T | undefined {
    let best: T | undefined;
    let bestRate = Infinity;
    for (const [item, entry] of this.entries) {
      if ((address !== undefined && entry.address !== address) || exclude.includes(item)) continue;
      const age = now - entry.startedAt;
      if (age < this.limits.graceMs) continue;
      const rate = entry.bytes / Math.max(age, 1);
      if (rate < bestRate) {
        best = item;
        bestRate = rate;
      }
    }
    return best;
  }
}
