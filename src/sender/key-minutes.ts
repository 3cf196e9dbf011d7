/**
 * Which minute each request key's ledger entry is stored under, in memory (README "Sent once",
 * "The store's layout"): the store's keys start with their minute, so that a restore writes in
 * time order rather than all over the key space, and a lookup by request key asks this table
 * first.
 *
 * An open-addressing table (linear probing) of a 32-bit fingerprint and a minute per entry: 8
 * bytes a slot, at most three quarters full, about 11–21 bytes an entry. A fingerprint is not
 * the key: keys that share one share a probe run, a lookup gets every minute stored under that
 * fingerprint, and the store reads each until one holds the key. So a slot is one stored entry,
 * not one key: two keys with the same fingerprint and minute have two equal slots, and removing
 * the entry of either removes one of them.
 */
export class KeyMinutes {
  /** 0: an empty slot (a fingerprint is never 0). */
  private fingerprints: Uint32Array;
  private minutes: Uint32Array;
  private mask: number;
  private used = 0;

  constructor(capacity = 1024) {
    let size = 16;
    while (size * 0.75 < capacity) size *= 2;
    this.fingerprints = new Uint32Array(size);
    this.minutes = new Uint32Array(size);
    this.mask = size - 1;
  }

  /**
   * A key's fingerprint: FNV-1a over its UTF-16 code units (from `from` on: a key inside a longer
   * string, with no copy of it), then mixed (murmur3's finaliser) so every bit places it.
   */
  static fingerprint(key: string, from = 0): number {
    let h = 0x811c9dc5;
    for (let i = from; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    return h >>> 0 || 1;
  }

  /** The table as bytes (`fromBytes` reads it back): a closed store keeps it for its next open. */
  toBytes(): Buffer {
    const bytes = Buffer.alloc(8 + this.fingerprints.length * 8);
    bytes.writeUInt32LE(this.used, 0);
    bytes.writeUInt32LE(this.fingerprints.length, 4);
    Buffer.from(this.fingerprints.buffer).copy(bytes, 8);
    Buffer.from(this.minutes.buffer).copy(bytes, 8 + this.fingerprints.length * 4);
    return bytes;
  }

  /** A table from `toBytes`; undefined when the bytes are not one. */
  static fromBytes(bytes: Buffer): KeyMinutes | undefined {
    if (bytes.length < 8) return undefined;
    const used = bytes.readUInt32LE(0);
    const size = bytes.readUInt32LE(4);
    if (size < 16 || (size & (size - 1)) !== 0 || bytes.length !== 8 + size * 8 || used * 4 > size * 3)
      return undefined;
    const table = new KeyMinutes(0);
    table.fingerprints = new Uint32Array(size);
    table.minutes = new Uint32Array(size);
    Buffer.from(table.fingerprints.buffer).set(bytes.subarray(8, 8 + size * 4));
    Buffer.from(table.minutes.buffer).set(bytes.subarray(8 + size * 4));
    table.mask = size - 1;
    table.used = used;
    let filled = 0;
    for (let i = 0; i < size; i++) if (table.fingerprints[i] !== 0) filled++;
    return filled === used ? table : undefined;
  }

  /** Entries held. */
  get size(): number {
    return this.used;
  }

  /** Whether any entry is stored under `fingerprint`. */
  has(fingerprint: number): boolean {
    for (let i = fingerprint & this.mask; this.fingerprints[i] !== 0; i = (i + 1) & this.mask)
      if (this.fingerprints[i] === fingerprint) return true;
    return false;
  }

  /** The minutes of the entries stored under `fingerprint`, newest first (usually one, or none). */
  minutesOf(fingerprint: number): number[] {
    const found: number[] = [];
    for (let i = fingerprint & this.mask; this.fingerprints[i] !== 0; i = (i + 1) & this.mask)
      if (this.fingerprints[i] === fingerprint) found.push(this.minutes[i]!);
    return found.length > 1 ? found.sort((a, b) => b - a) : found;
  }

  /** One more entry, stored under `minute`. */
  add(fingerprint: number, minute: number): void {
    if ((this.used + 1) * 4 > this.fingerprints.length * 3) this.grow();
    let i = fingerprint & this.mask;
    while (this.fingerprints[i] !== 0) i = (i + 1) & this.mask;
    this.fingerprints[i] = fingerprint;
    this.minutes[i] = minute;
    this.used++;
  }

  /** One entry fewer (one slot of this fingerprint and minute); answers whether there was one. */
  remove(fingerprint: number, minute: number): boolean {
    let i = fingerprint & this.mask;
    for (; this.fingerprints[i] !== 0; i = (i + 1) & this.mask)
      if (this.fingerprints[i] === fingerprint && this.minutes[i] === minute) break;
    if (this.fingerprints[i] === 0) return false;
    // Backward-shift deletion: every later slot of the run that may move into the gap does, so
    // no probe run is cut short and no tombstone is needed.
    let gap = i;
    for (let j = (gap + 1) & this.mask; this.fingerprints[j] !== 0; j = (j + 1) & this.mask) {
      const home = this.fingerprints[j]! & this.mask;
      // The slot at j may fill the gap unless its home lies (cyclically) in (gap, j].
      const stays = gap <= j ? home > gap && home <= j : home > gap || home <= j;
      if (stays) continue;
      this.fingerprints[gap] = this.fingerprints[j]!;
      this.minutes[gap] = this.minutes[j]!;
      gap = j;
    }
    this.fingerprints[gap] = 0;
    this.used--;
    return true;
  }

  /**
   * Drops every slot of a minute before `minute`; answers how many. The store calls it once no
   * entry is kept before that minute: what remains there stands for entries that are gone (a
   * journal replayed after a kill -9 may name them).
   */
  dropBefore(minute: number): number {
    const fingerprints = this.fingerprints;
    const minutes = this.minutes;
    this.fingerprints = new Uint32Array(fingerprints.length);
    this.minutes = new Uint32Array(fingerprints.length);
    const before = this.used;
    this.used = 0;
    for (let i = 0; i < fingerprints.length; i++)
      if (fingerprints[i] !== 0 && minutes[i]! >= minute) this.add(fingerprints[i]!, minutes[i]!);
    return before - this.used;
  }

  private grow(): void {
    const fingerprints = this.fingerprints;
    const minutes = this.minutes;
    this.fingerprints = new Uint32Array(fingerprints.length * 2);
    this.minutes = new Uint32Array(fingerprints.length * 2);
    this.mask = this.fingerprints.length - 1;
    this.used = 0;
    for (let i = 0; i < fingerprints.length; i++) if (fingerprints[i] !== 0) this.add(fingerprints[i]!, minutes[i]!);
  }
}
