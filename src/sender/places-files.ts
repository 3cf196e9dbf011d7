import { closeSync, fsyncSync, openSync, readFileSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { isPlace, KeyPlaces } from './key-places.js';

/**
 * The ledger store's index of places (`KeyPlaces`) on disk beside the store, so that an open
 * does not read every key (1.7 s a million after a kill -9): a base, the whole table as it was
 * at one moment, and a journal of every slot added after it (src/sender/README.md, "The
 * store's layout"). Base and journal carry a generation: a journal adds to the base of its own.
 *
 * Only adds are journaled. The index may hold more than the disk (a slot whose entry was
 * removed, or whose write never landed): a lookup reads the disk for each place it names, so an
 * extra slot costs a read and is swept when its minute expires. A slot missing while its entry
 * is on disk would send a request again: the journal is written before the write it covers is
 * issued, and the store records the journal's length in the same transaction (`JournalMark`).
 */

const BASE_FILE = 'places.index';
/** "KMIN", then the version of what follows: 3, places (1 and 2, of minutes, are refused). */
const BASE_MAGIC = 0x4e494d4b;
const BASE_VERSION = 3;
const JOURNAL_FILE = 'places.journal';
/** "KMJL", then the version: 2, places. */
const JOURNAL_MAGIC = 0x4c4a4d4b;
const JOURNAL_VERSION = 2;
/** Magic, version, generation (8 bytes), and for a base lmdb's last transaction id (8 bytes). */
const BASE_HEADER = 24;
const JOURNAL_HEADER = 16;
/** A journal record: a fingerprint (32 bits) and a place (a double). */
const RECORD = 12;
/** Records collected before one `writeSync`. */
const BUFFERED = 4096;

/** What each of the store's transactions records beside its writes: the journal up to here covers them. */
export interface JournalMark {
  generation: number;
  /** Bytes of records in the journal when the transaction was issued. */
  length: number;
}

/** The mark of writes no journal covers. */
export const BROKEN: JournalMark = { generation: -1, length: 0 };

export interface SavedBase {
  generation: number;
  /** lmdb's last transaction when it was written (none since: the base is the index). */
  lastTxnId: number;
  table: KeyPlaces;
}

/**
 * Writes the base of `generation`, synced, to another name and renames it over the last: a
 * kill -9 or a power loss leaves the old one or the new one whole.
 */
export function writeBase(dir: string, generation: number, lastTxnId: number, table: KeyPlaces): void {
  const header = Buffer.alloc(BASE_HEADER);
  header.writeUInt32LE(BASE_MAGIC, 0);
  header.writeUInt32LE(BASE_VERSION, 4);
  header.writeDoubleLE(generation, 8);
  header.writeDoubleLE(lastTxnId, 16);
  const path = join(dir, BASE_FILE);
  const fd = openSync(`${path}.next`, 'w');
  try {
    writeSync(fd, header);
    writeSync(fd, table.toBytes());
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(`${path}.next`, path);
}

/** Removes the base (best effort: a base that is not there is not taken). */
export function removeBase(dir: string): void {
  try {
    rmSync(join(dir, BASE_FILE), { force: true });
  } catch {
    // Nothing more can be done: the next open's checks still apply.
  }
}

/** The base last written, if one is there whole. */
export function readBase(dir: string): SavedBase | undefined {
  const bytes = readOrNothing(join(dir, BASE_FILE));
  if (
    bytes === undefined ||
    bytes.length < BASE_HEADER ||
    bytes.readUInt32LE(0) !== BASE_MAGIC ||
    bytes.readUInt32LE(4) !== BASE_VERSION
  )
    return undefined;
  const table = KeyPlaces.fromBytes(bytes.subarray(BASE_HEADER));
  if (!table) return undefined;
  return { generation: bytes.readDoubleLE(8), lastTxnId: bytes.readDoubleLE(16), table };
}

/**
 * Adds the journal of `generation` to `table`; answers the bytes of records it held, or
 * undefined when there is no journal of that generation.
 */
export function replayJournal(dir: string, generation: number, table: KeyPlaces): number | undefined {
  const bytes = readOrNothing(join(dir, JOURNAL_FILE));
  if (
    bytes === undefined ||
    bytes.length < JOURNAL_HEADER ||
    bytes.readUInt32LE(0) !== JOURNAL_MAGIC ||
    bytes.readUInt32LE(4) !== JOURNAL_VERSION ||
    bytes.readDoubleLE(8) !== generation
  )
    return undefined;
  // A record cut short by a full disk is not one; a fingerprint is never 0, so zeros are a tail a
  // power loss left unwritten, and the journal ends before them (as at anything not a place).
  const end = JOURNAL_HEADER + Math.floor((bytes.length - JOURNAL_HEADER) / RECORD) * RECORD;
  let at = JOURNAL_HEADER;
  for (; at < end; at += RECORD) {
    const fingerprint = bytes.readUInt32LE(at);
    const place = bytes.readDoubleLE(at + 4);
    if (fingerprint === 0 || !isPlace(place)) break;
    table.add(fingerprint, place);
  }
  return at - JOURNAL_HEADER;
}

/** The journal being written: records are buffered, and written by `commit` before the write they cover. */
export class PlacesJournal {
  private readonly buffer = Buffer.alloc(BUFFERED * RECORD);
  private buffered = 0;
  private written = 0;
  private fd: number | undefined;

  private constructor(
    readonly generation: number,
    fd: number,
  ) {
    this.fd = fd;
  }

  /** An empty journal of `generation`, replacing any other. */
  static start(dir: string, generation: number): PlacesJournal {
    const header = Buffer.alloc(JOURNAL_HEADER);
    header.writeUInt32LE(JOURNAL_MAGIC, 0);
    header.writeUInt32LE(JOURNAL_VERSION, 4);
    header.writeDoubleLE(generation, 8);
    const fd = openSync(join(dir, JOURNAL_FILE), 'w');
    try {
      writeSync(fd, header);
    } catch (error) {
      closeSync(fd);
      throw error;
    }
    return new PlacesJournal(generation, fd);
  }

  /** Records written so far. */
  get records(): number {
    return this.written / RECORD;
  }

  /** A write failed, or it was closed: it takes no more records. */
  get broken(): boolean {
    return this.fd === undefined;
  }

  add(fingerprint: number, place: number): void {
    if (this.fd === undefined) return;
    if (this.buffered === BUFFERED && !this.writeBuffered()) return;
    this.buffer.writeUInt32LE(fingerprint, this.buffered * RECORD);
    this.buffer.writeDoubleLE(place, this.buffered * RECORD + 4);
    this.buffered++;
  }

  /**
   * Writes what was added (to the OS: a kill -9 keeps it); answers the mark the covering
   * transaction records. A journal that failed to write (a full disk) may hold part of a record:
   * it is dropped, and its mark (`BROKEN`) matches no journal, so the next open reads the keys.
   */
  commit(): JournalMark {
    if (this.fd === undefined || !this.writeBuffered()) return BROKEN;
    return { generation: this.generation, length: this.written };
  }

  close(): void {
    const fd = this.fd;
    this.fd = undefined;
    this.buffered = 0;
    try {
      if (fd !== undefined) closeSync(fd);
    } catch {
      // Closed either way: the descriptor is not used again.
    }
  }

  /** False when the write failed: the journal is then closed for good. */
  private writeBuffered(): boolean {
    if (this.fd === undefined) return false;
    const bytes = this.buffered * RECORD;
    try {
      let done = 0;
      while (done < bytes) done += writeSync(this.fd, this.buffer, done, bytes - done);
    } catch {
      this.close();
      return false;
    }
    this.written += bytes;
    this.buffered = 0;
    return true;
  }
}

function readOrNothing(path: string): Buffer | undefined {
  try {
    return readFileSync(path);
  } catch {
    return undefined;
  }
}
