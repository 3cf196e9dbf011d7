import { createHash } from 'node:crypto';
import { HEADER, SCHEMA_ID, deliveryStatusEventSchema, eventIdOf, inboundMessageEventSchema, resultEventId, sendResultSchema } from '../contracts/index.js';
import type { ConsumedRecord } from '../kafka/group-consumer.js';
import { javaCompatibleHash } from '../kafka/partitioner.js';
import { applyInbound, conversationKey, conversationWindowSchema, inboundFrom, type ConversationWindow, type InboundEvent } from './conversation-window.js';
import { applyEvent, messageIdOf, messageStateSchema, resultEventFrom, statusEventFrom, type ApplyOutcome, type TrackedMessage, type TrackerEvent } from './message-state.js';
import { StateCache, messageStateCache } from './state-cache.js';
import type { OutputRecord, ProcessResult } from './transactional-engine.js';

/**
 * The tracker's work on one task (partition p of `send-results`, `delivery_status` and
 * `messages`), free of Kafka clients: records in, output records and a state change out. The
 * caches of a task hold committed states only: `process` works on a pending layer that its
 * `commit()` folds in once the transaction committed (transactional-engine.ts).
 */
export interface TrackerTopics {
  sendResults: string;
  deliveryStatus: string;
  messages: string;
  messageState: string;
  conversations: string;
}

export type SkipReason = 'invalid_json' | 'invalid_event' | 'missing_business' | 'not_accepted';

export interface TrackerCounters {
  event(topic: 'send-results' | 'delivery_status' | 'messages', outcome: ApplyOutcome | 'window_moved' | 'window_unchanged'): void;
  skipped(reason: SkipReason): void;
  evicted(kind: 'message' | 'conversation'): void;
}

export interface TrackerLogicOptions {
  topics: TrackerTopics;
  /** Partition count of the inputs (and of message-state): a customer's task is its key hash modulo this. */
  partitions: number;
  maxCachedMessages: number;
  maxCachedConversations: number;
  counters: TrackerCounters;
  /** Called for a record that is skipped (why, and where it is). */
  onSkip?(reason: SkipReason, record: ConsumedRecord, detail: string): void;
  now?: () => Date;
}

/** A record of a batch and the event it carries (parsed once: `decodeBatch`). */
export type DecodedEvent = ({ kind: 'message'; event: TrackerEvent } | { kind: 'conversation'; input: InboundEvent }) & { record: ConsumedRecord };

/** States read back for one batch (see reloadInto). */
export interface Loaded {
  messages: Map<string, TrackedMessage>;
  conversations: Map<string, ConversationWindow>;
}

/** What has to be read back from the changelogs before a batch can be applied (evicted states). */
export interface Reload {
  messageIds: string[];
  conversationKeys: string[];
}

interface TaskState {
  messages: StateCache<TrackedMessage>;
  conversations: StateCache<ConversationWindow>;
  /** Keys evicted from the caches: their state is in the changelog, not in memory. */
  evicted: BoundedKeySet;
}

/**
 * Keys known to be evicted, bounded: past `max` it forgets them all and from then on treats
 * every unknown key as possibly evicted (each miss reads the changelog: slower, never wrong).
 */
class BoundedKeySet {
  private keys = new Set<string>();
  lossy = false;
  constructor(private readonly max: number) {}
  add(key: string): void {
    if (this.lossy) return;
    this.keys.add(key);
    if (this.keys.size > this.max) {
      this.keys.clear();
      this.lossy = true;
    }
  }
  mayHold(key: string): boolean {
    return this.lossy || this.keys.has(key);
  }
  delete(key: string): void {
    this.keys.delete(key);
  }
}

const text = (value: string | Buffer | (string | Buffer)[] | undefined): string | undefined =>
  value === undefined ? undefined : Array.isArray(value) ? text(value[0]) : value.toString();

/** The customer of a `conversations` key (`<businessId>:<customer>`; a business id may hold a colon, a customer's number does not). */
export function customerOfConversationKey(key: string): string {
  return key.slice(key.lastIndexOf(':') + 1);
}

export class TrackerLogic {
  private readonly tasks = new Map<number, TaskState>();
  private readonly now: () => Date;

  constructor(private readonly opts: TrackerLogicOptions) {
    this.now = opts.now ?? (() => new Date());
  }

  /** Starts a task with empty state (restore fills it). */
  startTask(task: number): void {
    const evicted = new BoundedKeySet(10 * (this.opts.maxCachedMessages + this.opts.maxCachedConversations));
    this.tasks.set(task, {
      evicted,
      messages: messageStateCache(this.opts.maxCachedMessages, (id) => {
        evicted.add(`m:${id}`);
        this.opts.counters.evicted('message');
      }),
      conversations: new StateCache<ConversationWindow>({
        maxEntries: this.opts.maxCachedConversations,
        onEvict: (key) => {
          evicted.add(`c:${key}`);
          this.opts.counters.evicted('conversation');
        },
      }),
    });
  }

  dropTask(task: number): void {
    this.tasks.delete(task);
  }

  ownedTasks(): number[] {
    return [...this.tasks.keys()];
  }

  /** The task of a message id or a customer: where their records and states live. */
  taskOf(key: string): number {
    return javaCompatibleHash(Buffer.from(key)) % this.opts.partitions;
  }

  /** Whether a `conversations` record belongs to this task (its customer's `messages` partition). */
  ownsConversation(task: number, key: string): boolean {
    return this.taskOf(customerOfConversationKey(key)) === task;
  }

  /** A record of `message-state` or `conversations` read back when a task starts: latest wins, tombstones delete. */
  restore(task: number, record: ConsumedRecord): void {
    const state = this.tasks.get(task);
    const key = record.key?.toString();
    if (!state || key === undefined) return;
    const isMessage = record.topic === this.opts.topics.messageState;
    const parsed = this.parseState(record);
    if (isMessage) {
      if (parsed) state.messages.set(key, parsed as TrackedMessage);
      else state.messages.delete(key);
    } else if (parsed) state.conversations.set(key, parsed as ConversationWindow);
    else state.conversations.delete(key);
    if (parsed) state.evicted.delete(`${isMessage ? 'm' : 'c'}:${key}`);
  }

  /**
   * A record read back for one batch (an evicted state it needs): kept beside the batch, not in
   * the cache, where inserting it could evict another state the same batch needs.
   */
  reloadInto(loaded: Loaded, record: ConsumedRecord): void {
    const key = record.key?.toString();
    if (key === undefined) return;
    const parsed = this.parseState(record);
    const target = record.topic === this.opts.topics.messageState ? loaded.messages : loaded.conversations;
    if (parsed) (target as Map<string, unknown>).set(key, parsed);
    else target.delete(key);
  }

  /** A `message-state` or `conversations` value; undefined for a tombstone or a value the tracker did not write (the next event rebuilds it). */
  private parseState(record: ConsumedRecord): TrackedMessage | ConversationWindow | undefined {
    if (record.value === null) return undefined;
    try {
      const json: unknown = JSON.parse(record.value.toString());
      return record.topic === this.opts.topics.messageState ? messageStateSchema.parse(json) : conversationWindowSchema.parse(json);
    } catch {
      return undefined;
    }
  }

  /** The events a batch carries, each record parsed once; the others are counted as skipped. */
  decodeBatch(records: ConsumedRecord[]): DecodedEvent[] {
    const events: DecodedEvent[] = [];
    for (const record of records) {
      const decoded = this.decode(record);
      if (decoded) events.push(decoded);
    }
    return events;
  }

  /** The keys a batch needs that were evicted: read them back before `process`. */
  needsReload(task: number, events: DecodedEvent[]): Reload {
    const state = this.tasks.get(task);
    const reload: Reload = { messageIds: [], conversationKeys: [] };
    if (!state) return reload;
    for (const decoded of events) {
      if (decoded.kind === 'message') {
        const id = messageIdOf(decoded.event);
        if (!state.messages.has(id) && state.evicted.mayHold(`m:${id}`)) reload.messageIds.push(id);
      } else {
        const key = conversationKey(decoded.input.businessId, decoded.input.customer);
        if (!state.conversations.has(key) && state.evicted.mayHold(`c:${key}`)) reload.conversationKeys.push(key);
      }
    }
    reload.messageIds = [...new Set(reload.messageIds)];
    reload.conversationKeys = [...new Set(reload.conversationKeys)];
    return reload;
  }

  /** Applies one batch of one input partition of a task: the outputs, and the state change for after the commit. */
  process(task: number, events: DecodedEvent[], loaded: Loaded = { messages: new Map(), conversations: new Map() }): ProcessResult {
    const state = this.tasks.get(task);
    if (!state) throw new Error(`task ${task} is not started`);
    const messages = new Map<string, TrackedMessage>();
    const windows = new Map<string, ConversationWindow>();
    const outputs: OutputRecord[] = [];
    const now = this.now();
    for (const decoded of events) {
      if (decoded.kind === 'message') {
        const { event, record } = decoded;
        const id = messageIdOf(event);
        let result;
        try {
          result = applyEvent(messages.get(id) ?? state.messages.peek(id) ?? loaded.messages.get(id), event, now);
        } catch (err) {
          this.skip('invalid_event', record, (err as Error).message);
          continue;
        }
        this.opts.counters.event(event.kind === 'result' ? 'send-results' : 'delivery_status', result.outcome);
        if (!result.changed) continue;
        messages.set(id, result.state);
        outputs.push({
          topic: this.opts.topics.messageState,
          partition: task,
          key: id,
          value: JSON.stringify(result.state),
          headers: {
            [HEADER.eventId]: stateEventId(id, result.state.events, result.state.updatedAt),
            [HEADER.businessId]: result.state.businessId,
            [HEADER.contentType]: 'application/json',
            [HEADER.schema]: SCHEMA_ID.messageState,
          },
        });
      } else {
        const key = conversationKey(decoded.input.businessId, decoded.input.customer);
        const { window, changed } = applyInbound(windows.get(key) ?? state.conversations.peek(key) ?? loaded.conversations.get(key), decoded.input);
        this.opts.counters.event('messages', changed ? 'window_moved' : 'window_unchanged');
        if (!changed) continue;
        windows.set(key, window);
        outputs.push({
          topic: this.opts.topics.conversations,
          key,
          value: JSON.stringify(window),
          headers: {
            [HEADER.eventId]: eventIdOf(`${key}\n${window.lastInboundAt}`),
            [HEADER.businessId]: window.businessId,
            [HEADER.contentType]: 'application/json',
            [HEADER.schema]: SCHEMA_ID.conversations,
          },
        });
      }
    }
    return {
      outputs,
      commit: () => {
        for (const [id, tracked] of messages) {
          state.messages.set(id, tracked);
          state.evicted.delete(`m:${id}`);
        }
        for (const [key, window] of windows) {
          state.conversations.set(key, window);
          state.evicted.delete(`c:${key}`);
        }
      },
    };
  }

  /** A cached state of a message this member tracks; undefined when not in memory here. */
  cachedMessage(messageId: string): TrackedMessage | undefined {
    return this.tasks.get(this.taskOf(messageId))?.messages.peek(messageId);
  }

  cachedRequest(requestId: string): TrackedMessage | undefined {
    for (const state of this.tasks.values()) {
      const found = state.messages.getBySecondary(requestId);
      if (found) return found;
    }
    return undefined;
  }

  cachedCounts(): { messages: number; conversations: number } {
    let messages = 0;
    let conversations = 0;
    for (const state of this.tasks.values()) {
      messages += state.messages.size;
      conversations += state.conversations.size;
    }
    return { messages, conversations };
  }

  private skip(reason: SkipReason, record: ConsumedRecord, detail: string): void {
    this.opts.counters.skipped(reason);
    this.opts.onSkip?.(reason, record, detail);
  }

  /** A record as the event it carries; undefined (counted as skipped) when it carries none the tracker applies. */
  private decode(record: ConsumedRecord): DecodedEvent | undefined {
    const skip = (reason: SkipReason, detail: string) => {
      this.skip(reason, record, detail);
      return undefined;
    };
    if (record.value === null) return skip('invalid_json', 'no value');
    let json: unknown;
    try {
      json = JSON.parse(record.value.toString());
    } catch {
      return skip('invalid_json', 'the value is not JSON');
    }
    const business = text(record.headers[HEADER.businessId]);
    const eventId = text(record.headers[HEADER.eventId]);
    try {
      if (record.topic === this.opts.topics.sendResults) {
        const parsed = sendResultSchema.safeParse(json);
        if (!parsed.success) return skip('invalid_event', parsed.error.issues[0]?.message ?? 'not a send result');
        const result = parsed.data;
        const event = resultEventFrom(result, eventId ?? resultEventId(result.businessId ?? business ?? '', result.requestId, result.outcome));
        return event ? { kind: 'message', event, record } : skip('not_accepted', result.outcome);
      }
      if (business === undefined || business === '') return skip('missing_business', `no ${HEADER.businessId} header`);
      if (record.topic === this.opts.topics.deliveryStatus) {
        const parsed = deliveryStatusEventSchema.safeParse(json);
        if (!parsed.success) return skip('invalid_event', parsed.error.issues[0]?.message ?? 'not a delivery status');
        return { kind: 'message', event: statusEventFrom(parsed.data, { eventId: eventId ?? eventIdOf(record.value), businessId: business }), record };
      }
      const parsed = inboundMessageEventSchema.safeParse(json);
      if (!parsed.success) return skip('invalid_event', parsed.error.issues[0]?.message ?? 'not an inbound message');
      return { kind: 'conversation', input: inboundFrom(parsed.data, business), record };
    } catch (err) {
      return skip('invalid_event', (err as Error).message);
    }
  }
}

/** The `event-id` of a published state: the same for the same version of a message's state. */
function stateEventId(messageId: string, events: number, updatedAt: string): string {
  return createHash('sha256').update(`message-state\n${messageId}\n${events}\n${updatedAt}`).digest('hex');
}
