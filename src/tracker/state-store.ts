import type { Database, RootDatabase } from 'lmdb';
import { LocalStore, localStoreDir, sortableTime, type ChangelogEntry } from '../platform/local-store.js';
import {
  canonicalConversationKey,
  conversationWindowSchema,
  type ConversationWindow,
} from '../contracts/conversation-window.js';
import { canonicalCustomerId } from '../contracts/customer-id.js';
import type { InboundMessageRecord } from '../contracts/inbound-message.js';
import { messageStateSchema, type TrackedMessage } from '../contracts/message-state.js';
import { requestOutcomeSchema, type RequestOutcome } from '../contracts/request-outcome.js';
import {
  deleteInbound,
  expireInbound,
  inboundDue,
  inboundPage,
  openInboundDbs,
  parseInbound,
  parseInboundText,
  putInbound,
  type InboundDbs,
} from './inbound-store.js';
import type { MessageList } from './tracker-logic.js';

/**
 * One task's persistent local store (LMDB, one environment per task directory): every live
 * message state and conversation window of partition p, the indexes the queries need, and the
 * changelog positions the store reflects, all changed in one LMDB transaction. It is a
 * materialisation of the compacted topics, which stay the source of truth (README "Local store").
 */

/** Next offsets to read in partition p of each changelog: everything before is in the store. */
export interface Checkpoint extends Record<string, number | undefined> {
  messageState: number;
  conversations: number;
  /** Absent in a store written before request outcomes were kept: that changelog is read from its start. */
  requestOutcomes?: number;
  /** Absent in a store written before inbound messages were kept: that changelog is read from its start. */
  inboundMessages?: number;
}

/** What the store belongs to: a directory left by another configuration is not reused. */
export interface StoreIdentity {
  clusterId: string;
  task: number;
  partitions: number;
  messageStateTopic: string;
  conversationsTopic: string;
  requestOutcomesTopic: string;
  inboundMessagesTopic: string;
}

export interface MessageChange {
  id: string;
  state: TrackedMessage;
  /** The state it replaces, as the store holds it (its index entries go). */
  previous: TrackedMessage | undefined;
}

export interface ConversationChange {
  key: string;
  window: ConversationWindow;
  previous: ConversationWindow | undefined;
}

export interface OutcomeChange {
  requestId: string;
  outcome: RequestOutcome;
  previous: RequestOutcome | undefined;
}

/** A new inbound message (README "Conversations"); one per event id, never replaced. */
export interface InboundChange {
  record: InboundMessageRecord;
}

export interface StoreChange {
  messages: MessageChange[];
  conversations: ConversationChange[];
  outcomes?: OutcomeChange[];
  inbound?: InboundChange[];
  /** Positions reached by this change; a field left out keeps its stored value. */
  checkpoint?: Partial<Checkpoint>;
}

export type { ChangelogEntry };

const SEP = '\u0000';
const pad = sortableTime;

/** The time a message is listed under for its recipient: when it was first known to happen. */
export function firstSeenMs(state: TrackedMessage): number {
  for (const t of [state.acceptedAt, state.sentAt, state.deliveredAt, state.readAt, state.failedAt])
    if (t) return Date.parse(t);
  return Date.parse(state.updatedAt);
}

const requestKey = (requestId: string, messageId: string) => `${requestId}${SEP}${messageId}`;
const listKey = (value: string, firstSeen: string, s: TrackedMessage) =>
  `${value}${SEP}${firstSeen}${SEP}${s.messageId}`;
const messageExpiryKey = (s: TrackedMessage) => `${pad(Date.parse(s.updatedAt))}${SEP}${s.messageId}`;
const windowExpiryKey = (w: ConversationWindow, key: string) => `${pad(Date.parse(w.lastInboundAt))}${SEP}${key}`;
const outcomeExpiryKey = (o: RequestOutcome) => `${pad(Date.parse(o.updatedAt))}${SEP}${o.requestId}`;
// Recipients are indexed in their canonical form (contracts/customer-id.ts): a search by either form finds both.
const outcomeRecipientKey = (o: RequestOutcome) =>
  o.recipient ? `${canonicalCustomerId(o.recipient)}${SEP}${pad(Date.parse(o.at))}${SEP}${o.requestId}` : undefined;

/** The index entries of one state: removed and added as a set when it changes. */
function messageIndexKeys(s: TrackedMessage): {
  request?: string;
  recipient?: string;
  business?: string;
  expiry: string;
} {
  const firstSeen = pad(firstSeenMs(s));
  return {
    ...(s.requestId ? { request: requestKey(s.requestId, s.messageId) } : {}),
    ...(s.recipient ? { recipient: listKey(canonicalCustomerId(s.recipient), firstSeen, s) } : {}),
    ...(s.businessId ? { business: listKey(s.businessId, firstSeen, s) } : {}),
    expiry: messageExpiryKey(s),
  };
}

/**
 * The indexes a store of this release keeps. A store written by an earlier release (before the
 * business index: no format; before canonical customer ids: 2) has its indexes rebuilt in the
 * background, as after a bulk restore; from format 2, its recipient indexes and windows are
 * first moved to canonical customer ids (`canonicalizeIds`).
 */
const INDEX_FORMAT = 3;

/** A store value parsed back; undefined when it is not a state the tracker wrote (never trusted blindly). */
function parseMessage(bytes: Buffer | undefined): TrackedMessage | undefined {
  if (bytes === undefined) return undefined;
  try {
    const parsed = messageStateSchema.safeParse(JSON.parse(bytes.toString()));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

function parseWindow(text: string | undefined): ConversationWindow | undefined {
  if (text === undefined) return undefined;
  try {
    const parsed = conversationWindowSchema.safeParse(JSON.parse(text));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The fields the indexes need, read cheaply from a changelog value (restore speed: no schema
 * check here; a value that is not a state is dropped, and every read validates again).
 */
function indexFieldsOf(json: unknown, key: string): TrackedMessage | undefined {
  const s = json as Partial<TrackedMessage> | null;
  if (
    !s ||
    typeof s !== 'object' ||
    s.messageId !== key ||
    typeof s.updatedAt !== 'string' ||
    typeof s.status !== 'string'
  )
    return undefined;
  if (Number.isNaN(Date.parse(s.updatedAt))) return undefined;
  return s as TrackedMessage;
}

/** A stored value with the fields its index entries need, or undefined. */
function rawState(bytes: Buffer | undefined, key: string): TrackedMessage | undefined {
  if (bytes === undefined) return undefined;
  try {
    return indexFieldsOf(JSON.parse(bytes.toString()), key);
  } catch {
    return undefined;
  }
}

function parseOutcome(json: unknown, key: string): RequestOutcome | undefined {
  const parsed = requestOutcomeSchema.safeParse(json);
  return parsed.success && parsed.data.requestId === key ? parsed.data : undefined;
}

function parseOutcomeText(text: string | undefined, key: string): RequestOutcome | undefined {
  if (text === undefined) return undefined;
  try {
    return parseOutcome(JSON.parse(text), key);
  } catch {
    return undefined;
  }
}

function isWindow(json: unknown): json is ConversationWindow {
  const w = json as Partial<ConversationWindow> | null;
  return (
    !!w &&
    typeof w === 'object' &&
    typeof w.businessId === 'string' &&
    typeof w.customer === 'string' &&
    typeof w.lastInboundAt === 'string' &&
    !Number.isNaN(Date.parse(w.lastInboundAt))
  );
}

export interface StoreStats {
  messages: number;
  conversations: number;
  outcomes: number;
  inbound: number;
  /** Bytes the task's directory takes on disk. */
  bytes: number;
}

/** The handles of one open LMDB environment (replaced whole by `remap`). */
interface Handles {
  env: RootDatabase;
  messages: Database<Buffer, string>;
  windows: Database<string, string>;
  requests: Database<string, string>;
  recipients: Database<string, string>;
  businesses: Database<string, string>;
  messageExpiry: Database<string, string>;
  windowExpiry: Database<string, string>;
  outcomes: Database<string, string>;
  outcomeExpiry: Database<string, string>;
  outcomesByRecipient: Database<string, string>;
  inbound: InboundDbs;
  meta: Database<unknown, string>;
}

function openHandles(env: RootDatabase): Handles {
  const db = <V>(name: string, encoding: 'string' | 'msgpack' | 'binary') => env.openDB<V, string>({ name, encoding });
  return {
    env,
    // The value bytes as the changelog holds them: a bulk restore copies them without parsing.
    messages: db<Buffer>('messages', 'binary'),
    windows: db<string>('windows', 'string'),
    requests: db<string>('by-request', 'string'),
    recipients: db<string>('by-recipient', 'string'),
    businesses: db<string>('by-business', 'string'),
    messageExpiry: db<string>('message-expiry', 'string'),
    windowExpiry: db<string>('window-expiry', 'string'),
    outcomes: db<string>('request-outcomes', 'string'),
    outcomeExpiry: db<string>('outcome-expiry', 'string'),
    outcomesByRecipient: db<string>('outcomes-by-recipient', 'string'),
    inbound: openInboundDbs(env),
    meta: db<unknown>('meta', 'msgpack'),
  };
}

const EMPTY_CHECKPOINT: Checkpoint = { messageState: 0, conversations: 0 };

/** The tracker's task store on the shared LMDB base (src/platform/local-store.ts). */
export class TaskStore extends LocalStore<Handles, Checkpoint, StoreIdentity> {
  /** Writes issued and not yet durable in LMDB: reads see them first. */
  private readonly unflushedMessages = new Map<string, TrackedMessage>();
  private readonly unflushedWindows = new Map<string, ConversationWindow>();
  private readonly unflushedOutcomes = new Map<string, RequestOutcome>();
  private readonly unflushedInbound = new Map<string, InboundMessageRecord>();

  private constructor(dir: string, identity: StoreIdentity) {
    super(dir, identity, openHandles);
  }

  private get messages() {
    return this.live.messages;
  }
  private get windows() {
    return this.live.windows;
  }
  private get requests() {
    return this.live.requests;
  }
  private list(list: MessageList) {
    return list === 'recipient' ? this.live.recipients : this.live.businesses;
  }
  private get messageExpiry() {
    return this.h.messageExpiry;
  }
  private get windowExpiry() {
    return this.h.windowExpiry;
  }
  private get outcomes() {
    return this.live.outcomes;
  }
  private get outcomeExpiry() {
    return this.h.outcomeExpiry;
  }
  /** Opens (or creates) the store of a task; a directory of another identity is wiped first. */
  static open(dir: string, identity: StoreIdentity): TaskStore {
    const store = new TaskStore(dir, identity);
    // A store of an earlier release has no request outcomes or inbound messages yet: it is kept,
    // and gains them (its checkpoint has no position there, so that changelog is read from its start).
    const kept = store.claim((stored) => ({
      ...stored,
      requestOutcomesTopic: stored.requestOutcomesTopic ?? identity.requestOutcomesTopic,
      inboundMessagesTopic: stored.inboundMessagesTopic ?? identity.inboundMessagesTopic,
    }));
    const format = store.meta.get('indexFormat') as number | undefined;
    if (kept && format !== INDEX_FORMAT && (format === undefined || format < 3)) store.canonicalizeIds();
    if (format !== INDEX_FORMAT) {
      store.env.transactionSync(() => {
        // States kept from an earlier release lack the newer indexes; an empty store has none to build.
        if (kept && store.meta.get('indexing') === undefined) store.meta.putSync('indexing', { after: null });
        store.meta.putSync('indexFormat', INDEX_FORMAT);
      });
    }
    return store;
  }

  /** Wipes the store (its offsets are inconsistent with the changelog) and opens it empty. */
  static rebuild(store: TaskStore): TaskStore {
    store.wipe();
    return TaskStore.open(store.dir, store.identity);
  }

  message(id: string): TrackedMessage | undefined {
    return this.unflushedMessages.get(id) ?? parseMessage(this.messages.get(id));
  }

  conversation(key: string): ConversationWindow | undefined {
    return this.unflushedWindows.get(key) ?? parseWindow(this.windows.get(key));
  }

  /** An inbound message kept by its event id (README "Conversations"). */
  inboundMessage(eventId: string): InboundMessageRecord | undefined {
    return this.unflushedInbound.get(eventId) ?? parseInboundText(this.live.inbound.records.get(eventId), eventId);
  }

  /**
   * A customer's inbound messages (canonical id), newest first by when they wrote, at most
   * `limit`, strictly older than the `before` sort key of an earlier page (the same cursor as
   * `listedMessages`: a thread merges the two).
   */
  inboundOfCustomer(
    customer: string,
    limit: number,
    before?: string,
  ): { sort: string; record: InboundMessageRecord }[] {
    const found: { sort: string; record: InboundMessageRecord }[] = [];
    for (const { id, sort } of inboundPage(this.live.inbound, customer, limit, before)) {
      const record = this.inboundMessage(id);
      if (record) found.push({ sort, record });
    }
    return found;
  }

  /** The rejected or expired outcome kept for a request id, when its result was on this task's partition. */
  requestOutcome(requestId: string): RequestOutcome | undefined {
    return this.unflushedOutcomes.get(requestId) ?? parseOutcomeText(this.outcomes.get(requestId), requestId);
  }

  /** Message ids recorded for a request id (a maybeSent resend can make two). */
  messageIdsOfRequest(requestId: string): string[] {
    const ids = new Set<string>();
    for (const key of this.requests.getKeys({ start: `${requestId}${SEP}`, end: `${requestId}\u0001` }))
      ids.add(key.slice(requestId.length + 1));
    for (const [id, s] of this.unflushedMessages) if (s.requestId === requestId) ids.add(id);
    return [...ids];
  }

  /**
   * The messages of a recipient or a business, newest first (by when each was first known to
   * happen), at most `limit`, strictly older than the `before` sort key of an earlier page.
   */
  listedMessages(list: MessageList, value: string, limit: number, before?: string): { id: string; sort: string }[] {
    // A recipient in either form (+ or not) is one customer: the index holds the canonical one.
    return this.newestFirst(this.list(list), list === 'recipient' ? canonicalCustomerId(value) : value, limit, before);
  }

  /**
   * The request ids of a recipient's (either form) rejected or expired requests, newest first (by when they ended), at
   * most `limit`.
   */
  outcomesOfRecipient(recipient: string, limit: number): string[] {
    return this.newestFirst(this.live.outcomesByRecipient, canonicalCustomerId(recipient), limit).map((e) => e.id);
  }

  private newestFirst(
    db: Database<string, string>,
    value: string,
    limit: number,
    before?: string,
  ): { id: string; sort: string }[] {
    const prefix = `${value}${SEP}`;
    const start = before !== undefined ? `${prefix}${before}` : `${value}\u0001`;
    const found: { id: string; sort: string }[] = [];
    for (const key of db.getKeys({ start, end: prefix, reverse: true, limit: limit + 1 })) {
      if (key === start) continue;
      const sort = key.slice(prefix.length);
      found.push({ id: sort.slice(sort.indexOf(SEP) + 1), sort });
      if (found.length === limit) break;
    }
    return found;
  }

  /**
   * Applies a committed change with the positions it reflects, atomically, on lmdb's write
   * thread; reads see it at once (through the unflushed layer). Resolves once durable.
   */
  write(change: StoreChange): Promise<void> {
    this.assertOpen();
    for (const m of change.messages) this.unflushedMessages.set(m.id, m.state);
    for (const c of change.conversations) this.unflushedWindows.set(c.key, c.window);
    for (const o of change.outcomes ?? []) this.unflushedOutcomes.set(o.requestId, o.outcome);
    for (const i of change.inbound ?? []) this.unflushedInbound.set(i.record.eventId, i.record);
    const checkpoint = change.checkpoint
      ? { ...this.pendingCheckpoint(EMPTY_CHECKPOINT), ...change.checkpoint }
      : undefined;
    if (checkpoint) this.advanceCheckpoint(checkpoint);
    return this.writeAsync(
      () => {
        for (const m of change.messages) this.putMessage(m.id, m.state, m.previous);
        for (const c of change.conversations) this.putWindow(c.key, c.window, c.previous);
        for (const o of change.outcomes ?? []) this.putOutcome(o.outcome, o.previous);
        for (const i of change.inbound ?? []) putInbound(this.h.inbound, i.record, undefined);
        if (checkpoint) this.meta.put('checkpoint', checkpoint);
      },
      () => {
        for (const m of change.messages)
          if (this.unflushedMessages.get(m.id) === m.state) this.unflushedMessages.delete(m.id);
        for (const c of change.conversations)
          if (this.unflushedWindows.get(c.key) === c.window) this.unflushedWindows.delete(c.key);
        for (const o of change.outcomes ?? [])
          if (this.unflushedOutcomes.get(o.requestId) === o.outcome) this.unflushedOutcomes.delete(o.requestId);
        for (const i of change.inbound ?? [])
          if (this.unflushedInbound.get(i.record.eventId) === i.record) this.unflushedInbound.delete(i.record.eventId);
      },
    );
  }

  /**
   * Changelog records (restore, in offset order) up to `checkpoint`, in one synchronous LMDB
   * transaction: later records of a key replace earlier ones, a tombstone or a value the
   * tracker did not write deletes, a state older than `expireBeforeMs` is not kept. Answers the
   * states kept.
   */
  applyChangelog(
    topic: 'messageState' | 'conversations' | 'requestOutcomes' | 'inboundMessages',
    entries: ChangelogEntry[],
    checkpoint: Partial<Checkpoint>,
    expireBeforeMs: number,
  ): number {
    this.assertOpen();
    let kept = 0;
    const next = { ...this.pendingCheckpoint(EMPTY_CHECKPOINT), ...checkpoint };
    this.env.transactionSync(() => {
      for (const { key, value } of entries) {
        let json: unknown;
        try {
          json = value === null ? null : JSON.parse(value.toString());
        } catch {
          json = null;
        }
        if (topic === 'messageState') {
          const prevState = rawState(this.messages.get(key), key);
          const state = indexFieldsOf(json, key);
          if (state && Date.parse(state.updatedAt) >= expireBeforeMs) {
            this.putMessage(key, state, prevState);
            kept++;
          } else if (prevState) this.deleteMessage(key, prevState);
        } else if (topic === 'inboundMessages') {
          const previous = parseInboundText(this.h.inbound.records.get(key), key);
          const record = json === null ? undefined : parseInbound(json, key);
          if (record && Date.parse(record.recordedAt) >= expireBeforeMs) {
            putInbound(this.h.inbound, record, previous);
            kept++;
          } else if (previous) deleteInbound(this.h.inbound, previous);
        } else if (topic === 'requestOutcomes') {
          const previous = parseOutcomeText(this.outcomes.get(key), key);
          const outcome = json === null ? undefined : parseOutcome(json, key);
          if (outcome && Date.parse(outcome.updatedAt) >= expireBeforeMs) {
            this.putOutcome(outcome, previous);
            kept++;
          } else if (previous) this.deleteOutcome(previous);
        } else {
          // Keys of earlier releases kept the provider's form of the customer: one window per canonical customer.
          const windowKey = canonicalConversationKey(key);
          const previous = parseWindow(this.windows.get(windowKey));
          if (isWindow(json) && Date.parse(json.lastInboundAt) >= expireBeforeMs) {
            // A window is a max: an older record (another partition's, before the layout
            // change, or of the other form of the customer) never moves it back.
            if (!previous || Date.parse(previous.lastInboundAt) < Date.parse(json.lastInboundAt))
              this.putWindow(windowKey, { ...json, customer: canonicalCustomerId(json.customer) }, previous);
            kept++;
          } else if (json === null && previous) this.deleteWindow(windowKey, previous);
        }
      }
      this.meta.putSync('checkpoint', next);
    });
    this.advanceCheckpoint(next);
    return kept;
  }

  /**
   * A bulk restore's records (into a store that started empty), as fast as LMDB takes them: the
   * value bytes are copied as they are, a tombstone deletes, nothing is parsed. The indexes (and
   * the expiry of old states) are built afterwards by `buildIndexes`, while the task already
   * runs; the store remembers that they are incomplete until then.
   */
  loadChangelog(entries: ChangelogEntry[], checkpoint: Partial<Checkpoint>): void {
    this.assertOpen();
    const next = { ...this.pendingCheckpoint(EMPTY_CHECKPOINT), ...checkpoint };
    this.env.transactionSync(() => {
      if (this.meta.get('indexing') === undefined) this.meta.putSync('indexing', { after: null });
      for (const { key, value } of entries) {
        if (value === null) this.messages.removeSync(key);
        else this.messages.putSync(key, value);
      }
      this.meta.putSync('checkpoint', next);
    });
    this.advanceCheckpoint(next);
  }

  /**
   * Whether the request, recipient, business and expiry indexes cover every state (false while a bulk restore's are
   * being built).
   */
  indexesComplete(): boolean {
    return this.meta.get('indexing') === undefined;
  }

  /**
   * Indexes up to `max` states of a bulk restore, in key order from where the last call stopped,
   * in one LMDB transaction; drops those older than `expireBeforeMs` and values that are not
   * states. Answers whether every state is indexed now.
   */
  buildIndexes(max: number, expireBeforeMs: number): { indexed: number; done: boolean } {
    this.assertOpen();
    const progress = this.meta.get('indexing') as { after: string | null } | undefined;
    if (!progress) return { indexed: 0, done: true };
    let indexed = 0;
    let last: string | undefined;
    this.env.transactionSync(() => {
      for (const { key, value } of this.messages.getRange({
        ...(progress.after !== null ? { start: progress.after } : {}),
        limit: max + 1,
      })) {
        if (key === progress.after) continue;
        if (indexed === max) break;
        last = key;
        indexed++;
        const state = rawState(value, key);
        if (!state || Date.parse(state.updatedAt) < expireBeforeMs) {
          this.messages.removeSync(key);
          continue;
        }
        const keys = messageIndexKeys(state);
        if (keys.request) this.requests.putSync(keys.request, '');
        if (keys.recipient) this.h.recipients.putSync(keys.recipient, '');
        if (keys.business) this.h.businesses.putSync(keys.business, '');
        this.messageExpiry.putSync(keys.expiry, '');
      }
      if (last === undefined) this.meta.removeSync('indexing');
      else this.meta.putSync('indexing', { after: last });
    });
    return { indexed, done: last === undefined };
  }

  /**
   * Drops message states not updated since `messagesBeforeMs` and windows whose last inbound
   * message is older than `windowsBeforeMs` (at most `max` of each); answers how many went.
   */
  expire(
    messagesBeforeMs: number,
    windowsBeforeMs: number,
    max: number,
  ): { messages: number; conversations: number; outcomes: number; inbound: number } {
    this.assertOpen();
    const result = { messages: 0, conversations: 0, outcomes: 0, inbound: 0 };
    const oldMessages = [...this.messageExpiry.getKeys({ end: `${pad(messagesBeforeMs)}${SEP}`, limit: max })];
    const oldWindows = [...this.windowExpiry.getKeys({ end: `${pad(windowsBeforeMs)}${SEP}`, limit: max })];
    // Outcomes follow the message states' retention (tracker.stateRetentionMs).
    const oldOutcomes = [...this.outcomeExpiry.getKeys({ end: `${pad(messagesBeforeMs)}${SEP}`, limit: max })];
    // Inbound messages too (recorded before it: README "Conversations").
    const oldInbound = inboundDue(this.h.inbound, messagesBeforeMs);
    if (oldMessages.length === 0 && oldWindows.length === 0 && oldOutcomes.length === 0 && !oldInbound) return result;
    this.env.transactionSync(() => {
      for (const key of oldMessages) {
        const id = key.slice(key.indexOf(SEP) + 1);
        const state = rawState(this.messages.get(id), id);
        if (state && messageExpiryKey(state) === key && !this.unflushedMessages.has(id)) {
          this.deleteMessage(id, state);
          result.messages++;
        } else if (!state || messageExpiryKey(state) !== key) this.messageExpiry.removeSync(key);
      }
      for (const key of oldWindows) {
        const k = key.slice(key.indexOf(SEP) + 1);
        const window = parseWindow(this.windows.get(k));
        if (window && windowExpiryKey(window, k) === key && !this.unflushedWindows.has(k)) {
          this.deleteWindow(k, window);
          result.conversations++;
        } else if (!window || windowExpiryKey(window, k) !== key) this.windowExpiry.removeSync(key);
      }
      for (const key of oldOutcomes) {
        const id = key.slice(key.indexOf(SEP) + 1);
        const outcome = parseOutcomeText(this.outcomes.get(id), id);
        if (outcome && outcomeExpiryKey(outcome) === key && !this.unflushedOutcomes.has(id)) {
          this.deleteOutcome(outcome);
          result.outcomes++;
        } else if (!outcome || outcomeExpiryKey(outcome) !== key) this.outcomeExpiry.removeSync(key);
      }
      if (oldInbound) result.inbound = expireInbound(this.h.inbound, messagesBeforeMs, max, this.unflushedInbound);
    });
    return result;
  }

  stats(): StoreStats {
    return {
      messages: this.entries(this.messages),
      conversations: this.entries(this.windows),
      outcomes: this.entries(this.outcomes),
      inbound: this.entries(this.h.inbound.records),
      bytes: this.bytes(),
    };
  }

  private putMessage(id: string, state: TrackedMessage, previous: TrackedMessage | undefined): void {
    const next = messageIndexKeys(state);
    if (previous) {
      const old = messageIndexKeys(previous);
      if (old.request && old.request !== next.request) this.requests.remove(old.request);
      if (old.recipient && old.recipient !== next.recipient) this.h.recipients.remove(old.recipient);
      if (old.business && old.business !== next.business) this.h.businesses.remove(old.business);
      if (old.expiry !== next.expiry) this.messageExpiry.remove(old.expiry);
    }
    this.messages.put(id, Buffer.from(JSON.stringify(state)));
    if (next.request) this.requests.put(next.request, '');
    if (next.recipient) this.h.recipients.put(next.recipient, '');
    if (next.business) this.h.businesses.put(next.business, '');
    this.messageExpiry.put(next.expiry, '');
  }

  private deleteMessage(id: string, previous: TrackedMessage): void {
    const old = messageIndexKeys(previous);
    this.messages.remove(id);
    if (old.request) this.requests.remove(old.request);
    if (old.recipient) this.h.recipients.remove(old.recipient);
    if (old.business) this.h.businesses.remove(old.business);
    this.messageExpiry.remove(old.expiry);
  }

  private putWindow(key: string, window: ConversationWindow, previous: ConversationWindow | undefined): void {
    if (previous && windowExpiryKey(previous, key) !== windowExpiryKey(window, key))
      this.windowExpiry.remove(windowExpiryKey(previous, key));
    this.windows.put(key, JSON.stringify(window));
    this.windowExpiry.put(windowExpiryKey(window, key), '');
  }

  private deleteWindow(key: string, previous: ConversationWindow): void {
    this.windows.remove(key);
    this.windowExpiry.remove(windowExpiryKey(previous, key));
  }

  private putOutcome(outcome: RequestOutcome, previous: RequestOutcome | undefined): void {
    if (previous && outcomeExpiryKey(previous) !== outcomeExpiryKey(outcome))
      this.outcomeExpiry.remove(outcomeExpiryKey(previous));
    const [before, after] = [previous && outcomeRecipientKey(previous), outcomeRecipientKey(outcome)];
    if (before && before !== after) this.h.outcomesByRecipient.remove(before);
    this.outcomes.put(outcome.requestId, JSON.stringify(outcome));
    this.outcomeExpiry.put(outcomeExpiryKey(outcome), '');
    if (after) this.h.outcomesByRecipient.put(after, '');
  }

  private deleteOutcome(previous: RequestOutcome): void {
    this.outcomes.remove(previous.requestId);
    this.outcomeExpiry.remove(outcomeExpiryKey(previous));
    const byRecipient = outcomeRecipientKey(previous);
    if (byRecipient) this.h.outcomesByRecipient.remove(byRecipient);
  }

  /**
   * Once, when a store of index format 2 or before opens: customers become their canonical form
   * (contracts/customer-id.ts). The recipient index of the states is emptied (the background
   * rebuild that follows fills it again, as after a bulk restore); the outcomes' recipient index
   * is rebuilt here, and the windows move to their canonical key, a window per customer (the
   * latest of the two forms), both small (the outcomes of the retention, the windows of 26 h).
   */
  private canonicalizeIds(): void {
    const { recipients, outcomesByRecipient, outcomes, windows, windowExpiry } = this.h;
    recipients.clearSync();
    outcomesByRecipient.clearSync();
    this.env.transactionSync(() => {
      for (const { key, value } of outcomes.getRange()) {
        const outcome = parseOutcomeText(value, key);
        const byRecipient = outcome && outcomeRecipientKey(outcome);
        if (byRecipient) outcomesByRecipient.putSync(byRecipient, '');
      }
      for (const { key, value } of [...windows.getRange()]) {
        const canonical = canonicalConversationKey(key);
        const window = parseWindow(value);
        if (canonical === key && (!window || window.customer === canonicalCustomerId(window.customer))) continue;
        windows.removeSync(key);
        if (window) windowExpiry.removeSync(windowExpiryKey(window, key));
        if (!window) continue;
        const kept = canonical === key ? undefined : parseWindow(windows.get(canonical));
        if (kept && Date.parse(kept.lastInboundAt) >= Date.parse(window.lastInboundAt)) continue;
        if (kept) windowExpiry.removeSync(windowExpiryKey(kept, canonical));
        const moved = { ...window, customer: canonicalCustomerId(window.customer) };
        windows.putSync(canonical, JSON.stringify(moved));
        windowExpiry.putSync(windowExpiryKey(moved, canonical), '');
      }
    });
  }
}

/** The directory of a task's store: `<stateDir>/<groupId>/task-<p>`. */
export function taskStoreDir(stateDir: string, groupId: string, task: number): string {
  return localStoreDir(stateDir, groupId, `task-${task}`);
}
