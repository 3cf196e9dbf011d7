/**
 * Where each request key's ledger entry is stored, in memory (README "Sent once", "The store's
 * layout"): the store keys its entries by place (their minute, then a number in that minute), so
 * that a restore appends, in time order, rather than writing all over the key space; a lookup by
 * request key asks this table for the places to read.
 *
 * An open-addressing table (linear probing) of a 32-bit fingerprint and a place (an integer below
 * 2^53) per entry: 12 bytes a slot, at most three quarters full, about 16–32 bytes an entry. A
 * fingerprint is not the key: keys that share one share a probe run, a lookup gets every place
 * stored under that fingerprint, and the store reads each until one holds the key. A slot is one
 * stored entry: removing an entry removes the slot of its fingerprint and place.
 */
export class KeyPlaces {
  /** 0: an empty slot (a fingerprint is never 0). */
  private fingerprints: Uint32Array;
  private places: Float64Array;
  private mask: number;
  private used = 0;

  constructor(capacity = 1024) {
    let size = 16;
    while (size * 0.75 < capacity) size *= 2;
    this.fingerprints = new Uint32Array(size);
    this.places = new Float64Array(size);
    this.mask = size - 1;
  }

  /**
   * A key's fingerprint: FNV-1a over its UTF-16 code units, then mixed (murmur3's finaliser) so
   * every bit places it.
   */
  static fingerprint(key: string): number {
    let h = 0x811c9dc5;
    for (let i = 0; i < key.length; i++) h = Math.imul(h ^ key.charCodeAt(i), 0x01000193);
    h ^= h >>> 16;
    h = Math.imul(h, 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
    return h >>> 0 || 1;
  }

  /** The table as bytes (`fromBytes` reads it back): a closed store keeps it for its next open. */
  toBytes(): Buffer {
    const size = this.fingerprints.length;
    const bytes = Buffer.alloc(8 + size * 12);
    bytes.writeUInt32LE(this.used, 0);
    bytes.writeUInt32LE(size, 4);
    Buffer.from(this.places.buffer).copy(bytes, 8);
    Buffer.from(this.fingerprints.buffer).copy(bytes, 8 + size * 8);
    return bytes;
  }

  /** A table from `toBytes`; undefined when the bytes are not one. */
  static fromBytes(bytes: Buffer): KeyPlaces | undefined {
    if (bytes.length < 8) return undefined;
    const used = bytes.readUInt32LE(0);
    const size = bytes.readUInt32LE(4);
    if (size < 16 || (size & (size - 1)) !== 0 || bytes.length !== 8 + size * 12 || used * 4 > size * 3)
      return undefined;
    const table = new KeyPlaces(0);
    table.fingerprints = new Uint32Array(size);
    table.places = new Float64Array(size);
    Buffer.from(table.places.buffer).set(bytes.subarray(8, 8 + size * 8));
    Buffer.from(table.fingerprints.buffer).set(bytes.subarray(8 + size * 8));
    table.mask = size - 1;
    table.used = used;
    let filled = 0;
    for (let i = 0; i < size; i++) {
      if (table.fingerprints[i] === 0) continue;
      filled++;
      if (!isPlace(table.places[i]!)) return undefined;
    }
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

  /** The places of the entries stored under `fingerprint`, latest first (usually one, or none). */
  placesOf(fingerprint: number): number[] {
    const found: number[] = [];
    for (let i = fingerprint & this.mask; this.fingerprints[i] !== 0; i = (i + 1) & this.mask)
      if (this.fingerprints[i] === fingerprint) found.push(this.places[i]!);
    return found.length > 1 ? found.sort((a, b) => b - a) : found;
  }

  /** One more entry, stored at `place`. */
  add(fingerprint: number, place: number): void {
    if ((this.used + 1) * 4 > this.fingerprints.length * 3) this.grow();
    let i = fingerprint & this.mask;
    while (this.fingerprints[i] !== 0) i = (i + 1) & this.mask;
    this.fingerprints[i] = fingerprint;
    this.places[i] = place;
    this.used++;
  }

  /** One entry fewer (the slot of this fingerprint and place); answers whether there was one. */
  remove(fingerprint: number, place: number): boolean {
    let i = fingerprint & this.mask;
    for (; this.fingerprints[i] !== 0; i = (i + 1) & this.mask)
      if (this.fingerprints[i] === fingerprint && this.places[i] === place) break;
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
      this.places[gap] = this.places[j]!;
      gap = j;
    }
    this.fingerprints[gap] = 0;
    this.used--;
    return true;
  }

  /**
   * Drops every slot of a place before `place`; answers how many. The store calls it once no
   * entry is kept before that place: what remains there stands for entries that are gone (a
   * journal replayed after a kill -9 may name them).
   */
  dropBefore(place: number): number {
    const fingerprints = this.fingerprints;
    const places = this.places;
    this.fingerprints = new Uint32Array(fingerprints.length);
    this.places = new Float64Array(fingerprints.length);
    const before = this.used;
    this.used = 0;
    for (let i = 0; i < fingerprints.length; i++)
      if (fingerprints[i] !== 0 && places[i]! >= place) this.add(fingerprints[i]!, places[i]!);
    return before - this.used;
  }

  private grow(): void {
    const fingerprints = this.fingerprints;
    const places = this.places;
    this.fingerprints = new Uint32Array(fingerprints.length * 2);
    this.places = new Float64Array(fingerprints.length * 2);
    this.mask = this.fingerprints.length - 1;
    this.used = 0;
    for (let i = 0; i < fingerprints.length; i++) if (fingerprints[i] !== 0) this.add(fingerprints[i]!, places[i]!);
  }
}

/** A place is a whole number from 0 to 2^53 - 1 (a table read from disk is checked for it). */
export const isPlace = (value: number): boolean => Number.isSafeInteger(value) && value >= 0;
