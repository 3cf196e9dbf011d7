/**
 * The records of the request ledger (`send-ledger`, README "Sent once"): what a member writes
 * about a request of partition p, to partition p, keyed by the request. Compaction keeps the
 * last one per request. Pure: no Kafka, no LMDB.
 *
 * - `calling`: a provider call is about to be made (written, and acknowledged, before the first
 *   attempt). A `calling` record with nothing after it means a call may have been made whose
 *   outcome nobody recorded.
 * - `done`: the request's terminal outcome, with its result as published (without content).
 *   `remember`: a new record with the same request id gets this result again instead of a call;
 *   otherwise (expired, rejected for a reason that may pass) only the same record (`offset`) does.
 * - `released`: the member stopped working on it without an outcome (its partition moved, or a
 *   drain ran out of time), after `attempts` attempts; the next owner carries them on.
 *
 * `calling` records of calls started together travel as one batch record (README "Calling
 * records in batches"): a `calling` record for each request it names, in its place in the log.
 */
export type LedgerEntry =
  | { state: 'calling'; offset: number; at: number; owner: string }
  /** `result`: the result as published, without its content: a JSON object's text. */
  | { state: 'done'; offset: number; at: number; remember: boolean; result: string }
  | {
      state: 'released';
      offset: number;
      at: number;
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
 * The key of a batch of `calling` records: its writer and a number of its own. A three-element
 * array, so never a request's key (two elements).
 */
export function callingBatchKey(owner: string, sequence: number): string {
  return JSON.stringify(['calling', owner, sequence]);
}

/** How every batch's key begins (a request of a business named `calling` shares it: tell them apart by the value). */
export const CALLING_BATCH_KEY_START = '["calling",';

/** One request of a batch: its ledger key and the offset of its record. */
export interface BatchedCall {
  key: string;
  offset: number;
}

/**
 * A batch of `calling` records, all at `at` by `owner`. Each request's key is a JSON string of its
 * ledger key: read back as it is, with no key to build again per request.
 */
export function encodeCallingBatch(at: number, owner: string, calls: readonly BatchedCall[]): string {
  let list = '';
  for (const call of calls) list += `${list === '' ? '' : ','}[${JSON.stringify(call.key)},${call.offset}]`;
  return `{"v":${VERSION},"state":"calling-batch","at":${at},"owner":${JSON.stringify(owner)},"calls":[${list}]}`;
}

const BATCH_PREFIX = `{"v":${VERSION},"state":"calling-batch",`;
const BATCH_PREFIX_BYTES = Buffer.from(BATCH_PREFIX);

/** Whether a ledger value is a batch of `calling` records (by its prefix; `readCallingBatch` checks the rest). */
export function isCallingBatch(value: string | Buffer): boolean {
  return typeof value === 'string'
    ? value.startsWith(BATCH_PREFIX)
    : value.length >= BATCH_PREFIX_BYTES.length &&
        BATCH_PREFIX_BYTES.compare(value, 0, BATCH_PREFIX_BYTES.length) === 0;
}

/** A batch of `calling` records read back: who wrote it, when, and the requests it names. */
export interface CallingBatch {
  at: number;
  owner: string;
  calls: BatchedCall[];
}

/** A batch's contents; undefined when it is not a batch this release understands (skipped, never trusted). */
export function readCallingBatch(text: string | Buffer | null | undefined): CallingBatch | undefined {
  const json = parseObject(text);
  if (!json || json.v !== VERSION || json.state !== 'calling-batch') return undefined;
  const { at, owner, calls } = json;
  if (!isTime(at) || typeof owner !== 'string' || !Array.isArray(calls)) return undefined;
  const out: BatchedCall[] = [];
  for (const call of calls as unknown[]) {
    if (!Array.isArray(call) || call.length !== 2 || typeof call[0] !== 'string' || !isOffset(call[1]))
      return undefined;
    out.push({ key: call[0], offset: call[1] });
  }
  return { at, owner, calls: out };
}

/** The `calling` records a batch stands for, with their keys; undefined when it is not a batch this release understands. */
export function decodeCallingBatch(
  text: string | Buffer | null | undefined,
): { key: string; entry: LedgerEntry & { state: 'calling' } }[] | undefined {
  const batch = readCallingBatch(text);
  return batch?.calls.map(({ key, offset }) => ({
    key,
    entry: { state: 'calling', offset, at: batch.at, owner: batch.owner },
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
 * value's text as it is and needs only this: no entry is built and no result is written out again.
 */
export function ledgerEntryTime(text: string | Buffer | null | undefined): number | undefined {
  if (text !== null && text !== undefined && text.length > 0) {
    // Without parsing the result: a profiled restore spent 12% of its time in JSON.parse here.
    // Of bytes, only the head is read (the prefix is ASCII).
    const head = typeof text === 'string' ? text : text.toString('latin1', 0, WRITTEN_PREFIX_MAX);
    const ends = typeof text === 'string' ? text.endsWith('}') : text[text.length - 1] === 0x7d;
    const fast = WRITTEN_PREFIX.exec(head);
    if (fast && ends) {
      const at = Number(fast[1] ?? fast[2]);
      if (Number.isSafeInteger(at)) return at;
    }
  }
  return validRecord(text)?.at;
}

/** Longer than any match of WRITTEN_PREFIX: `done` with 16-digit numbers is 95 characters. */
const WRITTEN_PREFIX_MAX = 128;
const WRITTEN_PREFIX = new RegExp(
  `^\\{"v":${VERSION},"state":"(?:calling","offset":\\d{1,16},"at":(\\d{1,16}),"owner":"|done","offset":\\d{1,16},"at":(\\d{1,16}),"remember":(?:true|false),"result":\\{)`,
);

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
        (json.firstAttemptAt === null || isTime(json.firstAttemptAt))
        ? valid
        : undefined;
    default:
      return undefined;
  }
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
