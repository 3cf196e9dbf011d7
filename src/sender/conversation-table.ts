import { conversationWindowSchema } from '../contracts/conversation-window.js';
import { canonicalCustomerId } from '../contracts/customer-id.js';
import { RecencyMap } from '../platform/recency-map.js';

/**
 * The sender's copy of the `conversations` topic (docs/topics.md): which customers' 24-hour windows
 * are open, kept current by the follower (conversation-follower.ts). Pure: no Kafka. The rules
 * (what "never seen" means, what happens when it is full) are in README.md "Conversation window".
 *
 * Only open windows are kept: once the table is complete, a closed window and an unknown
 * customer mean the same (closed), so a window that closes is dropped and memory follows the
 * customers who wrote in the last 24 hours, not the topic's history. Entries are kept in the
 * order they were last updated (a RecencyMap), which is close to the order they close.
 */

/** What the table knows of one customer's window at a given time. */
export type WindowLookup =
  | { state: 'open'; openUntil: number }
  /** `openUntil` null: never seen (or closed long ago), with the table complete. */
  | { state: 'closed'; openUntil: number | null }
  /** The table cannot tell: not read to its end yet, its follower stopped, or open windows were evicted. */
  | { state: 'unknown'; reason: 'incomplete' | 'evicted' };

/** A `conversations` record as the table takes it. */
export type ConversationEntry =
  | { key: string; businessId: string; openUntil: number }
  /** A tombstone: the conversation was deleted. */
  | { key: string; businessId: string; openUntil: null }
  | { invalid: string };

export interface ConversationTableOptions {
  /** Entries kept at most; past it the entry updated least recently is dropped. */
  maxEntries: number;
  /** Wall clock (default Date.now). */
  now?: () => number;
}

export interface ConversationTableStats {
  entries: number;
  complete: boolean;
  /** Records applied (changed an entry), and records that changed nothing (an older or equal window, a closed one). */
  applied: number;
  unchanged: number;
  /**
   * Open windows dropped because the table was full: lookups of unknown customers answer `unknown` until they would all
   * have closed.
   */
  evictedOpen: number;
  /** Until when (ms) unknown customers answer `unknown` because of such evictions (0 = never). */
  evictedUntil: number;
}

/**
 * The table key: `<businessId>:<customer>`, the customer in its canonical form (contracts/
 * customer-id.ts: a number with or without its `+` is one customer), whichever form the topic's
 * key (records of earlier releases kept the provider's) or the request wrote.
 */
export function tableKey(businessId: string, customer: string): string {
  return `${businessId}:${canonicalCustomerId(customer)}`;
}

/**
 * Parses a `conversations` record: key `<businessId>:<customer>`, value per
 * `conversationWindowSchema` (null = tombstone). The record key names the conversation, as
 * compaction does; the value gives its `windowOpenUntil`.
 */
export function conversationEntry(key: Buffer | string | null, value: Buffer | string | null): ConversationEntry {
  if (key === null) return { invalid: 'record without a key' };
  const text = typeof key === 'string' ? key : key.toString('utf8');
  const colon = text.indexOf(':');
  if (colon <= 0 || colon === text.length - 1)
    return { invalid: `key "${text.slice(0, 200)}" is not <businessId>:<customer>` };
  const businessId = text.slice(0, colon);
  const entryKey = tableKey(businessId, text.slice(colon + 1));
  if (value === null || value.length === 0) return { key: entryKey, businessId, openUntil: null };
  let json: unknown;
  try {
    json = JSON.parse(typeof value === 'string' ? value : value.toString('utf8'));
  } catch {
    return { invalid: `value of ${text.slice(0, 200)} is not JSON` };
  }
  const parsed = conversationWindowSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return {
      invalid: `value of ${text.slice(0, 200)} is not a conversation window: ${issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'invalid'}`,
    };
  }
  const openUntil = Date.parse(parsed.data.windowOpenUntil);
  if (!Number.isFinite(openUntil))
    return { invalid: `value of ${text.slice(0, 200)} has an unreadable windowOpenUntil` };
  return { key: entryKey, businessId, openUntil };
}

export class ConversationTable {
  /** key → windowOpenUntil (ms), least recently updated first. */
  private readonly windows = new RecencyMap<string, number>();
  private readonly maxEntries: number;
  private readonly now: () => number;
  private complete = false;
  private evictedUntil = 0;
  private evictedOpen = 0;
  private applied = 0;
  private unchanged = 0;

  constructor(options: ConversationTableOptions) {
    if (!Number.isInteger(options.maxEntries) || options.maxEntries < 1)
      throw new RangeError(`maxEntries must be a positive integer, got ${options.maxEntries}`);
    this.maxEntries = options.maxEntries;
    this.now = options.now ?? Date.now;
  }

  get size(): number {
    return this.windows.size;
  }

  get isComplete(): boolean {
    return this.complete;
  }

  /** The topic was read to the end it had when the read began: an unknown customer now means closed. */
  markComplete(): void {
    this.complete = true;
  }

  /** The table stopped following the topic (its consumer died): nothing it lacks can be trusted as closed. */
  markIncomplete(): void {
    this.complete = false;
  }

  /**
   * Applies one record. A window only moves forward (the tracker's values are a max over inbound
   * times, so an older value read late changes nothing); a window already closed is not stored
   * (and a stored one it replaces is dropped); a tombstone removes the entry.
   */
  apply(entry: Exclude<ConversationEntry, { invalid: string }>): boolean {
    const current = this.windows.peek(entry.key);
    if (entry.openUntil === null) {
      if (current === undefined) return this.count(false);
      this.windows.delete(entry.key);
      return this.count(true);
    }
    if (current !== undefined && current >= entry.openUntil) return this.count(false);
    const now = this.now();
    if (entry.openUntil <= now) {
      if (current === undefined) return this.count(false);
      this.windows.delete(entry.key);
      return this.count(true);
    }
    if (current === undefined && this.windows.size >= this.maxEntries) this.makeRoom(now);
    this.windows.set(entry.key, entry.openUntil);
    return this.count(true);
  }

  /** What is known of the window of `customer` at `now` (default the table's clock). */
  lookup(businessId: string, customer: string, now = this.now()): WindowLookup {
    const key = tableKey(businessId, customer);
    const openUntil = this.windows.peek(key);
    if (openUntil !== undefined) {
      if (now < openUntil) return { state: 'open', openUntil };
      // Closed: the entry carries nothing an absent one does not (once complete).
      if (this.complete) this.windows.delete(key);
      return this.complete ? { state: 'closed', openUntil } : { state: 'unknown', reason: 'incomplete' };
    }
    if (!this.complete) return { state: 'unknown', reason: 'incomplete' };
    if (now < this.evictedUntil) return { state: 'unknown', reason: 'evicted' };
    return { state: 'closed', openUntil: null };
  }

  /**
   * Drops closed windows from the least recently updated end, stopping at the first open one
   * (the order is close to closing order; any closed entry left behind is dropped when looked up
   * or evicted). Returns how many were dropped.
   */
  sweep(now = this.now()): number {
    let dropped = 0;
    while (this.windows.size > 0 && this.windows.oldestValue()! <= now) {
      this.windows.delete(this.windows.oldest()!);
      dropped += 1;
    }
    return dropped;
  }

  stats(): ConversationTableStats {
    return {
      entries: this.windows.size,
      complete: this.complete,
      applied: this.applied,
      unchanged: this.unchanged,
      evictedOpen: this.evictedOpen,
      evictedUntil: this.evictedUntil,
    };
  }

  /**
   * Full: drops closed windows first, else the least recently updated open one. An open window
   * dropped makes unknown customers `unknown` (sent as asked) until it would have closed: the
   * table no longer knows every open window, so absence proves nothing until then.
   */
  private makeRoom(now: number): void {
    if (this.sweep(now) > 0) return;
    const key = this.windows.oldest();
    if (key === undefined) return;
    const openUntil = this.windows.oldestValue()!;
    this.windows.delete(key);
    if (openUntil > now) {
      this.evictedOpen += 1;
      if (openUntil > this.evictedUntil) this.evictedUntil = openUntil;
    }
  }

  private count(changed: boolean): boolean {
    if (changed) this.applied += 1;
    else this.unchanged += 1;
    return changed;
  }
}
