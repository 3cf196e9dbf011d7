import { Deque } from '../platform/deque.js';

/**
 * The results kept for repeated request ids: up to `maxEntries` ids, the least recently kept
 * evicted first, held outside V8's heap in a log of byte segments with an open-addressing index
 * in typed arrays. The layout, the eviction and the bounds are in src/sender/README.md,
 * "Duplicates, within a process".
 */
export interface CompletedResultsOptions {
  maxEntries: number;
  /** Bytes per segment, a power of two (default 256 KiB); a larger record is not kept. */
  segmentBytes?: number;
}

const HEAD_BYTES = 10;
/** Segments addressable at once: a location is `slot × segmentBytes + offset`, under 2^30. */
const SEGMENT_SLOTS = 4096;
const MAX_ID_BYTES = 0xffff;

interface Segment {
  readonly bytes: Buffer;
  /** Bytes written. */
  used: number;
  /** Its place in the location space: `serial % SEGMENT_SLOTS`. */
  readonly slot: number;
}

export class CompletedResults {
  private readonly maxEntries: number;
  private readonly segmentBytes: number;
  /** Location + 1 of each id's newest record; 0 = empty. */
  private readonly table: Int32Array;
  /** The id hash of each slot's record, so probing and deletion rarely read the log. */
  private readonly hashes: Int32Array;
  private readonly mask: number;
  private entries = 0;
  /** Oldest first; the last one is written to. */
  private readonly segments = new Deque<Segment>();
  /** Where the oldest record not evicted starts, in the first segment. */
  private oldest = 0;
  private records = 0;
  private serial = 0;
  /** The last released segment's bytes, for the next segment: no allocation, nothing left for the GC to free. */
  private spare: Buffer | undefined;
  /** The id being looked up or kept, as UTF-16. */
  private readonly scratch = Buffer.allocUnsafeSlow(MAX_ID_BYTES);

  constructor(options: CompletedResultsOptions) {
    if (!(Number.isInteger(options.maxEntries) && options.maxEntries >= 1 && options.maxEntries <= 2 ** 28)) throw new RangeError('maxEntries must be an integer from 1 to 2^28');
    this.maxEntries = options.maxEntries;
    this.segmentBytes = options.segmentBytes ?? 256 * 1024;
    const bytes = this.segmentBytes;
    if (!(Number.isInteger(bytes) && bytes >= 64 && bytes <= 2 ** 18 && (bytes & (bytes - 1)) === 0)) throw new RangeError('segmentBytes must be a power of two from 64 to 256 KiB');
    // At most half full, and never without an empty slot: a keep holds maxEntries + 1 entries
    // until it evicts, and a probe stops only at an empty slot.
    const slots = 2 ** Math.ceil(Math.log2(2 * options.maxEntries + 1));
    this.table = new Int32Array(slots);
    this.hashes = new Int32Array(slots);
    this.mask = slots - 1;
  }

  /** Ids remembered. */
  get size(): number {
    return this.entries;
  }

  /** Bytes allocated outside the heap: the segments and the table. */
  get bytes(): number {
    return (this.segments.length + (this.spare ? 1 : 0)) * this.segmentBytes + this.table.byteLength + this.hashes.byteLength;
  }

  get(id: string): string | undefined {
    const idBytes = this.encode(id);
    if (idBytes < 0) return undefined;
    const slot = this.find(hashOf(id), idBytes);
    const entry = this.table[slot]!;
    if (entry === 0) return undefined;
    const segment = this.segmentAt(entry - 1);
    const offset = (entry - 1) & (this.segmentBytes - 1);
    return segment.bytes.toString('utf8', offset + HEAD_BYTES + idBytes, offset + segment.bytes.readUInt32LE(offset));
  }

  /** Keeps `value` as `id`'s newest entry; false (nothing kept, an older copy forgotten) for a record over a segment. */
  keep(id: string, value: string): boolean {
    const idBytes = this.encode(id);
    if (idBytes < 0) return false;
    const hash = hashOf(id);
    const length = HEAD_BYTES + idBytes + Buffer.byteLength(value);
    if (length > this.segmentBytes) {
      const slot = this.find(hash, idBytes);
      if (this.table[slot] !== 0) this.remove(slot);
      return false;
    }
    const segment = this.writable(length);
    const offset = segment.used;
    const bytes = segment.bytes;
    bytes.writeUInt32LE(length, offset);
    bytes.writeInt32LE(hash, offset + 4);
    bytes.writeUInt16LE(idBytes, offset + 8);
    this.scratch.copy(bytes, offset + HEAD_BYTES, 0, idBytes);
    bytes.write(value, offset + HEAD_BYTES + idBytes, length - HEAD_BYTES - idBytes, 'utf8');
    segment.used += length;
    this.records += 1;
    // Found after the write: making room for it may have moved slots.
    const slot = this.find(hash, idBytes);
    if (this.table[slot] === 0) this.entries += 1;
    this.table[slot] = this.locationOf(segment, offset) + 1;
    this.hashes[slot] = hash;
    while (this.entries > this.maxEntries || this.records > 2 * this.maxEntries) this.evictOldest();
    return true;
  }

  /**
   * Writes `id` into the scratch buffer as UTF-16, which keeps every string apart (UTF-8 would
   * turn each lone surrogate into the same U+FFFD); its byte length, or -1 when too long to keep.
   */
  private encode(id: string): number {
    const idBytes = 2 * id.length;
    if (idBytes > MAX_ID_BYTES) return -1;
    this.scratch.write(id, 0, idBytes, 'utf16le');
    return idBytes;
  }

  /** The slot holding the scratch id's record, or the empty slot where it would go. */
  private find(hash: number, idBytes: number): number {
    for (let slot = hash & this.mask; ; slot = (slot + 1) & this.mask) {
      const entry = this.table[slot]!;
      if (entry === 0) return slot;
      if (this.hashes[slot] !== hash) continue;
      const segment = this.segmentAt(entry - 1);
      const offset = (entry - 1) & (this.segmentBytes - 1);
      const at = offset + HEAD_BYTES;
      if (segment.bytes.readUInt16LE(offset + 8) === idBytes && this.scratch.compare(segment.bytes, at, at + idBytes, 0, idBytes) === 0) return slot;
    }
  }

  /** Empties a slot, shifting back the entries of its probe run that would no longer be found. */
  private remove(slot: number): void {
    const { table, hashes, mask } = this;
    let hole = slot;
    table[hole] = 0;
    for (let next = (hole + 1) & mask; table[next] !== 0; next = (next + 1) & mask) {
      const home = hashes[next]! & mask;
      // Stays when its home lies cyclically in (hole, next].
      const stays = hole <= next ? hole < home && home <= next : hole < home || home <= next;
      if (stays) continue;
      table[hole] = table[next]!;
      hashes[hole] = hashes[next]!;
      table[next] = 0;
      hole = next;
    }
    this.entries -= 1;
  }

  private writable(length: number): Segment {
    const last = this.segments.at(this.segments.length - 1);
    if (last && this.segmentBytes - last.used >= length) return last;
    // Every slot in use: make room by evicting what the oldest segment still holds.
    while (this.segments.length >= SEGMENT_SLOTS) {
      const first = this.segments.peek();
      while (this.segments.peek() === first) this.evictOldest();
    }
    const segment: Segment = { bytes: this.spare ?? Buffer.allocUnsafeSlow(this.segmentBytes), used: 0, slot: this.serial++ % SEGMENT_SLOTS };
    this.spare = undefined;
    this.segments.push(segment);
    return segment;
  }

  /** Drops the oldest record (from the index if it is its id's newest copy) and a segment left behind. */
  private evictOldest(): void {
    const first = this.segments.peek()!;
    const at = this.oldest;
    const location = this.locationOf(first, at);
    for (let slot = first.bytes.readInt32LE(at + 4) & this.mask; this.table[slot] !== 0; slot = (slot + 1) & this.mask) {
      if (this.table[slot] === location + 1) {
        this.remove(slot);
        break;
      }
    }
    this.records -= 1;
    this.oldest += first.bytes.readUInt32LE(at);
    if (this.oldest < first.used) return;
    this.oldest = 0;
    // The newest segment is kept (emptied) for the next record; an older one is released.
    if (this.segments.length > 1) this.spare = this.segments.shift()!.bytes;
    else first.used = 0;
  }

  private locationOf(segment: Segment, offset: number): number {
    return segment.slot * this.segmentBytes + offset;
  }

  /** The segment of a location (its offset within is `location & (segmentBytes - 1)`). */
  private segmentAt(location: number): Segment {
    const slot = Math.floor(location / this.segmentBytes);
    return this.segments.at((slot - this.segments.peek()!.slot + SEGMENT_SLOTS) % SEGMENT_SLOTS)!;
  }
}

/** FNV-1a over the id's UTF-16 code units, as a signed 32-bit integer (what an Int32Array holds). */
function hashOf(id: string): number {
  let hash = 0x811c9dc5 | 0;
  for (let i = 0; i < id.length; i++) hash = Math.imul(hash ^ id.charCodeAt(i), 0x01000193);
  return hash;
}
