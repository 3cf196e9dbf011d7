import type { Database, RootDatabase } from 'lmdb';
import { inboundMessageRecordSchema, type InboundMessageRecord } from '../contracts/inbound-message.js';

const pad = (ms: number) => String(Math.max(0, Math.floor(ms))).padStart(15, '0');
/**
 * The parts of these keys are joined with \u0005, not NUL as in state-store.ts: lmdb-js's key
 * encoding (ordered-binary) escapes a NUL only in keys under 64 characters, and reads a longer key
 * with a NUL back as an array of its parts; these keys hold a 64-character event id. \u0005 sorts
 * below every character an id holds, so a customer's keys stay one range.
 */
const KEY_SEP = '\u0005';
/**
 * The sort keys handed out have the shape of a message's in its recipient's list (time, NUL, id): a thread merges the
 * two under one cursor.
 */
const SORT_SEP = '\u0000';

/**
 * The inbound messages of a task's local store (README "Conversations", "Local store"): three
 * LMDB databases in the task's environment, written in the same transactions as the states, so
 * the changelog position of `inbound-messages` is checkpointed with them. The records by event id
 * (the compacted topic's key), a customer's records newest first (by when they wrote), and an
 * expiry index (by when the tracker recorded them). The TaskStore calls these; nothing else does.
 */
export interface InboundDbs {
  /** event id → the record's JSON. */
  records: Database<string, string>;
  /** `<customer>\u0005<at>\u0005<event id>` → '': a customer's messages, newest first read backwards. */
  byCustomer: Database<string, string>;
  /** `<recordedAt>\u0005<event id>` → '': retention. */
  expiry: Database<string, string>;
}

export function openInboundDbs(env: RootDatabase): InboundDbs {
  const db = (name: string) => env.openDB<string, string>({ name, encoding: 'string' });
  return { records: db('inbound-messages'), byCustomer: db('inbound-by-customer'), expiry: db('inbound-expiry') };
}

/** The sort key of a record in its customer's thread (the same shape as a message's: time, NUL, id). */
export function inboundSortKey(record: Pick<InboundMessageRecord, 'at' | 'eventId'>): string {
  return `${pad(Date.parse(record.at))}${SORT_SEP}${record.eventId}`;
}

const customerKey = (r: InboundMessageRecord) =>
  `${r.customer}${KEY_SEP}${pad(Date.parse(r.at))}${KEY_SEP}${r.eventId}`;
const inboundExpiryKey = (r: InboundMessageRecord) => `${pad(Date.parse(r.recordedAt))}${KEY_SEP}${r.eventId}`;

/**
 * A customer's records (canonical id), newest first by when they wrote, at most `limit`,
 * strictly older than the `before` sort key of an earlier page (`inboundSortKey`'s shape).
 */
export function inboundPage(
  dbs: InboundDbs,
  customer: string,
  limit: number,
  before?: string,
): { id: string; sort: string }[] {
  const prefix = `${customer}${KEY_SEP}`;
  const start = before !== undefined ? `${prefix}${before.replace(SORT_SEP, KEY_SEP)}` : `${customer}\u0006`;
  const found: { id: string; sort: string }[] = [];
  for (const key of dbs.byCustomer.getKeys({ start, end: prefix, reverse: true, limit: limit + 1 })) {
    if (key === start) continue;
    const rest = key.slice(prefix.length);
    const at = rest.indexOf(KEY_SEP);
    found.push({ id: rest.slice(at + 1), sort: `${rest.slice(0, at)}${SORT_SEP}${rest.slice(at + 1)}` });
    if (found.length === limit) break;
  }
  return found;
}

/** A stored or changelog value as a record of `key`; undefined when it is not one (never trusted blindly). */
export function parseInbound(json: unknown, key: string): InboundMessageRecord | undefined {
  const parsed = inboundMessageRecordSchema.safeParse(json);
  return parsed.success && parsed.data.eventId === key ? parsed.data : undefined;
}

export function parseInboundText(text: string | undefined, key: string): InboundMessageRecord | undefined {
  if (text === undefined) return undefined;
  try {
    return parseInbound(JSON.parse(text), key);
  } catch {
    return undefined;
  }
}

/** Inside a write transaction: the record and its index entries (a previous version's go). */
export function putInbound(
  dbs: InboundDbs,
  record: InboundMessageRecord,
  previous: InboundMessageRecord | undefined,
): void {
  if (previous) deleteInbound(dbs, previous);
  dbs.records.put(record.eventId, JSON.stringify(record));
  dbs.byCustomer.put(customerKey(record), '');
  dbs.expiry.put(inboundExpiryKey(record), '');
}

export function deleteInbound(dbs: InboundDbs, record: InboundMessageRecord): void {
  dbs.records.remove(record.eventId);
  dbs.byCustomer.remove(customerKey(record));
  dbs.expiry.remove(inboundExpiryKey(record));
}

/** Whether a record was recorded before `beforeMs` (the retention sweep has work). */
export function inboundDue(dbs: InboundDbs, beforeMs: number): boolean {
  return [...dbs.expiry.getKeys({ end: `${pad(beforeMs)}${KEY_SEP}`, limit: 1 })].length > 0;
}

/**
 * Inside a write transaction: drops the records recorded before `beforeMs` (at most `max`),
 * except those still being written; answers how many went.
 */
export function expireInbound(
  dbs: InboundDbs,
  beforeMs: number,
  max: number,
  unflushed: ReadonlyMap<string, unknown>,
): number {
  let gone = 0;
  for (const key of [...dbs.expiry.getKeys({ end: `${pad(beforeMs)}${KEY_SEP}`, limit: max })]) {
    const id = key.slice(key.indexOf(KEY_SEP) + 1);
    const record = parseInboundText(dbs.records.get(id), id);
    if (record && inboundExpiryKey(record) === key && !unflushed.has(id)) {
      deleteInbound(dbs, record);
      gone++;
    } else if (!record || inboundExpiryKey(record) !== key) dbs.expiry.removeSync(key);
  }
  return gone;
}
