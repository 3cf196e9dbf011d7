/**
 * The records of the request ledger (`send-ledger`): `calling`, `done` and `released`, what each
 * means to the next owner, and the batch record that carries a turn's records, are in
 * src/sender/README.md, "Sent once". Pure: no Kafka, no LMDB.
 */
export type LedgerEntry =
  | { state: 'calling'; offset: number; at: number; owner: string }
  /** `result`: the result as published, without its content: a JSON object's text. */
  | { state: 'done'; offset: number; at: number; remember: boolean; result: string }
  | {
      state: 'released';
      offset: number;
      at: number;
      /** The process that released it; an earlier record names none. */
      owner?: string;
      attempts: number;
      maybeSent: boolean;
      firstAttemptAt: number | null;
    };

/** The ledger key of a request: its business and request id, unambiguous whatever they contain. */
export function ledgerKey(businessId: string, requestId: string): string {
  return JSON.stringify([businessId, requestId]);
}

const VERSION = 1;
const isTime = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v) && v >= 0;
const isOffset = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/**
 * The key of a batch record: its writer and a number of its own. A three-element array, so never
 * a request's key (two elements).
 */
export function batchKey(owner: string, sequence: number): string {
  return JSON.stringify(['batch', owner, sequence]);
}

/** How every batch's key begins (a request of a business named `batch` shares it: tell them apart by the value). */
export const BATCH_KEY_START = '["batch",';

/** A `calling` or `done` record of one request, as a batch carries it. */
export interface BatchedRecord {
  key: string;
  entry: LedgerEntry & { state: 'calling' | 'done' };
}

/** Whether a record can travel in a batch: its key and value are lines (JSON.stringify's output always is). */
export function isBatchable({ key, entry }: BatchedRecord): boolean {
  return !key.includes('\n') && (entry.state !== 'done' || !entry.result.includes('\n'));
}

/**
 * Several ledger records of one writer as one Kafka record (README "Ledger records in batches"):
 * a header line (JSON: the latest time, the writer, how many records), then each record's key
 * and value, a line each, exactly as they would be written alone. A reader splits the bytes at
 * the line ends and keeps each value as it is: nothing parsed, nothing written out again.
 */
export function encodeBatch(owner: string, records: readonly BatchedRecord[]): string {
  let at = 0;
  let lines = '';
  for (const { key, entry } of records) {
    at = Math.max(at, entry.at);
    lines += `${key}\n${encodeLedgerEntry(entry)}\n`;
  }
  return `{"v":${VERSION},"state":"batch","at":${at},"owner":${JSON.stringify(owner)},"records":${records.length}}\n${lines}`;
}

const BATCH_PREFIX = `{"v":${VERSION},"state":"batch",`;
const BATCH_PREFIX_BYTES = Buffer.from(BATCH_PREFIX);
const NEWLINE = 0x0a;

/** Whether a ledger value is a batch record (by its prefix; `splitBatch` checks the rest). */
export function isBatch(value: string | Buffer): boolean {
  return typeof value === 'string' ? value.startsWith(BATCH_PREFIX) : startsAt(value, 0, BATCH_PREFIX_BYTES);
}

/**
 * Where the records of a batch lie in its bytes, in order: for each, its key's start and end and
 * its value's end (the value starts after the key's line end); `bounds` is filled with these
 * three numbers per record. A restore makes a string of each key and a view only of the values
 * it keeps. Answers the batch's time (the latest of its records': a restore indexes them by it,
 * with no time read per value); undefined, with `bounds` empty, when it is not a batch this
 * release understands (skipped whole, never trusted).
 */
export function batchBounds(value: Buffer, bounds: number[]): number | undefined {
  bounds.length = 0;
  let end = value.indexOf(NEWLINE);
  if (end < 0) return undefined;
  const header = batchHeader(value, end);
  if (!header) return undefined;
  let start = end + 1;
  while (start < value.length) {
    const keyEnd = value.indexOf(NEWLINE, start);
    end = keyEnd < 0 ? -1 : value.indexOf(NEWLINE, keyEnd + 1);
    // A key is a JSON array, a value a JSON object.
    const valid =
      end >= 0 &&
      value[start] === 0x5b &&
      value[keyEnd - 1] === 0x5d &&
      value[keyEnd + 1] === 0x7b &&
      value[end - 1] === 0x7d;
    if (!valid) {
      bounds.length = 0;
      return undefined;
    }
    bounds.push(start, keyEnd, end);
    start = end + 1;
  }
  if (bounds.length !== header.records * 3) {
    bounds.length = 0;
    return undefined;
  }
  return header.at;
}

const HEADER_OWNER = Buffer.from(',"owner":"');
const HEADER_RECORDS = Buffer.from('","records":');

/**
 * A batch's header line (`value` up to `end`): its time and record count. The shape
 * `encodeBatch` writes is read from the bytes (a restore reads one per batch); anything else,
 * an owner with escapes included, is parsed as JSON and checked the same.
 */
function batchHeader(value: Buffer, end: number): { at: number; records: number } | undefined {
  const plain = plainBatchHeader(value, end);
  if (plain) return plain;
  const header = parseObject(value.toString('utf8', 0, end));
  if (!header || header.v !== VERSION || header.state !== 'batch' || !isTime(header.at)) return undefined;
  if (typeof header.owner !== 'string' || !isOffset(header.records)) return undefined;
  return { at: header.at, records: header.records };
}

/** The header in exactly `encodeBatch`'s shape, with a plain owner; undefined otherwise (then read as JSON). */
function plainBatchHeader(value: Buffer, end: number): { at: number; records: number } | undefined {
  const atStart = BATCH_PREFIX_BYTES.length + AT_KEY.length;
  if (!startsAt(value, 0, BATCH_PREFIX_BYTES) || !startsAt(value, BATCH_PREFIX_BYTES.length, AT_KEY)) return undefined;
  const atEnd = digitsEnd(value, atStart);
  if (atEnd < 0 || !startsAt(value, atEnd, HEADER_OWNER)) return undefined;
  let i = atEnd + HEADER_OWNER.length;
  // A plain owner: no escape, no control character (JSON allows neither raw).
  while (i < end && value[i] !== 0x22 && value[i] !== 0x5c && value[i]! >= 0x20) i++;
  if (i >= end || !startsAt(value, i, HEADER_RECORDS)) return undefined;
  const countStart = i + HEADER_RECORDS.length;
  const countEnd = digitsEnd(value, countStart);
  if (countEnd !== end - 1 || value[countEnd] !== 0x7d) return undefined;
  // No leading zero (JSON has none): such a header goes to JSON.parse, which refuses it.
  if (!noLeadingZero(value, atStart, atEnd) || !noLeadingZero(value, countStart, countEnd)) return undefined;
  const at = digitsValue(value, atStart, atEnd);
  const records = digitsValue(value, countStart, countEnd);
  return Number.isSafeInteger(at) && Number.isSafeInteger(records) ? { at, records } : undefined;
}

const noLeadingZero = (bytes: Buffer, from: number, to: number) => bytes[from] !== 0x30 || to === from + 1;

/**
 * The records of a batch, in order: each key, and its value as a view of the batch's bytes (read
 * like a record's own value: `decodeLedgerEntry`), with the batch's time (`batchBounds`).
 */
export function splitBatch(value: Buffer): { at: number; records: { key: string; value: Buffer }[] } | undefined {
  const bounds: number[] = [];
  const at = batchBounds(value, bounds);
  if (at === undefined) return undefined;
  const records: { key: string; value: Buffer }[] = [];
  for (let i = 0; i < bounds.length; i += 3)
    records.push({
      key: value.toString('utf8', bounds[i], bounds[i + 1]),
      value: value.subarray(bounds[i + 1]! + 1, bounds[i + 2]),
    });
  return { at, records };
}

/** The records of a batch with their entries (undefined for a value not understood, as alone); undefined when it is not a batch this release understands. */
export function decodeBatch(
  value: string | Buffer | null | undefined,
): { key: string; entry: LedgerEntry | undefined }[] | undefined {
  if (value === null || value === undefined) return undefined;
  return splitBatch(typeof value === 'string' ? Buffer.from(value) : value)?.records.map(({ key, value: bytes }) => ({
    key,
    entry: decodeLedgerEntry(bytes),
  }));
}

/**
 * The record's value, JSON. A `done` record carries its result as a JSON object (the result's
 * own text, inserted as it is: no second escaping of 400 bytes per request).
 */
export function encodeLedgerEntry(entry: LedgerEntry): string {
  switch (entry.state) {
    case 'calling':
      return `{"v":${VERSION},"state":"calling","offset":${entry.offset},"at":${entry.at},"owner":${JSON.stringify(entry.owner)}}`;
    case 'done':
      return `{"v":${VERSION},"state":"done","offset":${entry.offset},"at":${entry.at},"remember":${entry.remember},"result":${entry.result}}`;
    case 'released':
      return JSON.stringify({ v: VERSION, ...entry });
  }
}

/** A ledger value read back; undefined when it is not one this release understands (skipped, never trusted). */
export function decodeLedgerEntry(text: string | Buffer | null | undefined): LedgerEntry | undefined {
  const json = validRecord(text);
  if (!json) return undefined;
  const { offset, at } = json;
  switch (json.state) {
    case 'calling':
      return { state: 'calling', offset, at, owner: json.owner as string };
    case 'done':
      return { state: 'done', offset, at, remember: json.remember as boolean, result: JSON.stringify(json.result) };
    default:
      return {
        state: 'released',
        offset,
        at,
        ...(typeof json.owner === 'string' ? { owner: json.owner } : {}),
        attempts: json.attempts as number,
        maybeSent: json.maybeSent as boolean,
        firstAttemptAt: json.firstAttemptAt as number | null,
      };
  }
}

/**
 * The time of a ledger value this release understands, undefined otherwise: for the `calling` and
 * `done` shapes `encodeLedgerEntry` writes, read from their prefix (the rest is checked when the
 * entry is decoded); for anything else, what `decodeLedgerEntry` would give. A restore keeps the
 * value's bytes as they are and needs only this: no entry is built and no result is written out
 * again.
 */
export function ledgerEntryTime(text: string | Buffer | null | undefined): number | undefined {
  if (text === null || text === undefined || text.length === 0) return undefined;
  // Without parsing the result: a profiled restore spent 12% of its time in JSON.parse here.
  const fast = typeof text === 'string' ? timeOfText(text) : timeOfBytes(text);
  return fast ?? validRecord(text)?.at;
}

function timeOfText(text: string): number | undefined {
  const fast = text.endsWith('}') ? WRITTEN_PREFIX.exec(text) : null;
  const at = fast ? Number(fast[1] ?? fast[2]) : undefined;
  return at !== undefined && Number.isSafeInteger(at) ? at : undefined;
}

const WRITTEN_PREFIX = new RegExp(
  `^\\{"v":${VERSION},"state":"(?:calling","offset":\\d{1,16},"at":(\\d{1,16}),"owner":"|done","offset":\\d{1,16},"at":(\\d{1,16}),"remember":(?:true|false),"result":\\{)`,
);

/** The same prefixes as WRITTEN_PREFIX, read from the bytes with no string made (a restore reads a value per entry). */
const STATE_START = Buffer.from(`{"v":${VERSION},"state":"`);
const CALLING_OFFSET = Buffer.from('calling","offset":');
const DONE_OFFSET = Buffer.from('done","offset":');
const AT = Buffer.from(',"at":');
const AT_KEY = Buffer.from('"at":');
const OWNER = Buffer.from(',"owner":"');
const REMEMBER = Buffer.from(',"remember":');
const TRUE_RESULT = Buffer.from('true,"result":{');
const FALSE_RESULT = Buffer.from('false,"result":{');

function timeOfBytes(bytes: Buffer): number | undefined {
  if (bytes[bytes.length - 1] !== 0x7d || !startsAt(bytes, 0, STATE_START)) return undefined;
  let i = STATE_START.length;
  const calling = startsAt(bytes, i, CALLING_OFFSET);
  if (!calling && !startsAt(bytes, i, DONE_OFFSET)) return undefined;
  i += calling ? CALLING_OFFSET.length : DONE_OFFSET.length;
  const offsetEnd = digitsEnd(bytes, i);
  if (offsetEnd < 0 || !startsAt(bytes, offsetEnd, AT)) return undefined;
  const atStart = offsetEnd + AT.length;
  const atEnd = digitsEnd(bytes, atStart);
  if (atEnd < 0) return undefined;
  if (calling) {
    if (!startsAt(bytes, atEnd, OWNER)) return undefined;
  } else {
    const flag = atEnd + REMEMBER.length;
    if (!startsAt(bytes, atEnd, REMEMBER)) return undefined;
    if (!startsAt(bytes, flag, TRUE_RESULT) && !startsAt(bytes, flag, FALSE_RESULT)) return undefined;
  }
  const at = digitsValue(bytes, atStart, atEnd);
  return Number.isSafeInteger(at) ? at : undefined;
}

/** The number the ASCII digits from `start` to `end` write. */
function digitsValue(bytes: Buffer, start: number, end: number): number {
  let n = 0;
  for (let j = start; j < end; j++) n = n * 10 + bytes[j]! - 0x30;
  return n;
}

/** A loop rather than Buffer.compare: for a few bytes, the native call cost more than the comparison. */
function startsAt(bytes: Buffer, at: number, prefix: Buffer): boolean {
  if (bytes.length < at + prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) if (bytes[at + i] !== prefix[i]) return false;
  return true;
}

/** Where a run of 1 to 16 ASCII digits starting at `from` ends; -1 when there is none. */
function digitsEnd(bytes: Buffer, from: number): number {
  let i = from;
  while (i < bytes.length && i - from < 17 && bytes[i]! >= 0x30 && bytes[i]! <= 0x39) i++;
  return i > from && i - from <= 16 ? i : -1;
}

function validRecord(
  text: string | Buffer | null | undefined,
): (Record<string, unknown> & { offset: number; at: number }) | undefined {
  const json = parseObject(text);
  if (!json || json.v !== VERSION || !isOffset(json.offset) || !isTime(json.at)) return undefined;
  const valid = json as Record<string, unknown> & { offset: number; at: number };
  switch (json.state) {
    case 'calling':
      return typeof json.owner === 'string' ? valid : undefined;
    case 'done':
      return typeof json.remember === 'boolean' && json.result !== null && typeof json.result === 'object'
        ? valid
        : undefined;
    case 'released':
      return Number.isSafeInteger(json.attempts) &&
        (json.attempts as number) >= 0 &&
        typeof json.maybeSent === 'boolean' &&
        (json.firstAttemptAt === null || isTime(json.firstAttemptAt)) &&
        (json.owner === undefined || typeof json.owner === 'string')
        ? valid
        : undefined;
    default:
      return undefined;
  }
}

/**
 * Whether a `released` record replaces what the ledger held for its request (README "A late
 * release"). A member that lost its partition without knowing it (evicted from its group while
 * it waited) writes its releases after the next owner's records: such a release must not hide
 * the outcome that still answers its request, nor another process's call in flight.
 */
export function releaseReplaces(
  current: LedgerEntry | undefined,
  release: LedgerEntry & { state: 'released' },
): boolean {
  switch (current?.state) {
    case undefined:
      return true;
    case 'released':
      // A process releases only after its own `calling`: over another's release, it is late.
      return release.owner === undefined || current.owner === undefined || release.owner === current.owner;
    case 'done':
      return !current.remember && current.offset !== release.offset;
    case 'calling':
      return release.owner === undefined || release.owner === current.owner;
  }
}

const RELEASED_PREFIX = Buffer.from(`{"v":${VERSION},"state":"released",`);

/** Whether a ledger value (from `start` in `value`) is a `released` record (by its prefix; decoding checks the rest). */
export function isReleased(value: Buffer, start = 0): boolean {
  return startsAt(value, start, RELEASED_PREFIX);
}

/** What stands once `next` is read after `current`: `next`, unless it is a release that does not replace `current`. */
export function standing(current: LedgerEntry | undefined, next: LedgerEntry): LedgerEntry | undefined {
  return next.state === 'released' && !releaseReplaces(current, next) ? current : next;
}

/** What a request's owner does with what the ledger says about it (README "Sent once"). */
export type LedgerDecision =
  /** Publish this result again; no call. */
  | { action: 'repeat'; result: string }
  /** Send it (carrying on what a previous owner released, if anything). */
  | { action: 'send'; carried?: { attempts: number; maybeSent: boolean; firstAttemptAt: number | null } }
  /** Another owner may still be calling: wait for its outcome, up to `until`. */
  | { action: 'wait'; until: number };

/**
 * The decision for the request at `offset`, given the ledger's entry for its id. `graceMs`: how
 * long after a `calling` record its writer may still record the outcome (a call's deadline plus
 * the time to publish); past it, the writer is taken for dead with the call in flight.
 */
export function ledgerDecision(
  entry: LedgerEntry | undefined,
  offset: number,
  now: number,
  graceMs: number,
): LedgerDecision {
  if (!entry) return { action: 'send' };
  switch (entry.state) {
    case 'done':
      return entry.remember || entry.offset === offset
        ? { action: 'repeat', result: entry.result }
        : { action: 'send' };
    case 'released':
      return entry.offset === offset
        ? {
            action: 'send',
            carried: { attempts: entry.attempts, maybeSent: entry.maybeSent, firstAttemptAt: entry.firstAttemptAt },
          }
        : { action: 'send' };
    case 'calling':
      if (now < entry.at + graceMs) return { action: 'wait', until: entry.at + graceMs };
      // Nobody recorded an outcome in time: the call may have reached the provider.
      return { action: 'send', carried: { attempts: 1, maybeSent: true, firstAttemptAt: entry.at } };
  }
}

/** A ledger value's JSON object; undefined when it is not one. */
function parseObject(text: string | Buffer | null | undefined): Record<string, unknown> | undefined {
  if (text === null || text === undefined) return undefined;
  try {
    const json: unknown = JSON.parse(typeof text === 'string' ? text : text.toString());
    return json !== null && typeof json === 'object' ? (json as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
