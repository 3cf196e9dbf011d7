import {
  HEADER,
  SCHEMA_ID,
  deliveryStatusEventSchema,
  eventIdOf,
  inboundMessageEventSchema,
  resultEventId,
  sendResultSchema,
} from '../contracts/index.js';
import type { ConsumedRecord } from '../kafka/group-consumer.js';
import { javaCompatibleHash } from '../kafka/partitioner.js';
import { applyInbound, inboundFrom, type InboundEvent } from './window-rules.js';
import {
  canonicalConversationKey,
  conversationKey,
  customerOfConversationKey,
  type ConversationWindow,
} from '../contracts/conversation-window.js';
import { canonicalCustomerId } from '../contracts/customer-id.js';
import type { InboundMessageRecord } from '../contracts/inbound-message.js';
import { inboundRecordFrom } from './inbound-rules.js';
import {
  applyEvent,
  messageIdOf,
  resultEventFrom,
  statusEventFrom,
  type ApplyOutcome,
  type TrackerEvent,
} from './state-rules.js';
import { type TrackedMessage } from '../contracts/message-state.js';
import type { RequestOutcome } from '../contracts/request-outcome.js';
import { applyOutcome, outcomeEventFrom, type OutcomeEvent } from './request-outcome-rules.js';
import { StateCache, messageStateCache } from './state-cache.js';
import type { OutputRecord, ProcessResult } from '../kafka/transactional-engine.js';
import { errorMessage } from '../platform/errors.js';

/** A list a message is found in, newest first: its recipient's messages, its business's messages. */
export type MessageList = 'recipient' | 'business';

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
  /** Compacted: the last rejected or expired result per request id (task p writes partition p). */
  requestOutcomes: string;
  /** Compacted: each inbound message, bounded, by event id (task p writes partition p: README "Conversations"). */
  inboundMessages: string;
}

export type SkipReason = 'invalid_json' | 'invalid_event' | 'missing_business';

export interface TrackerCounters {
  event(
    topic: 'send-results' | 'delivery_status' | 'messages',
    outcome:
      | ApplyOutcome
      | 'window_moved'
      | 'window_unchanged'
      | 'outcome_recorded'
      | 'outcome_unchanged'
      | 'inbound_recorded'
      | 'inbound_duplicate',
  ): void;
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

/**
 * A batch's outputs, each with the input record that caused it (`causes[i]` caused `outputs[i]`: the tracing's span
 * links).
 */
export type TrackerProcessResult = ProcessResult & { causes: ConsumedRecord[] };

/** A record of a batch and the event it carries (parsed once: `decodeBatch`). */
export type DecodedEvent = (
  | { kind: 'message'; event: TrackerEvent }
  | { kind: 'conversation'; input: InboundEvent; inbound: InboundMessageRecord }
  | { kind: 'outcome'; event: OutcomeEvent }
) & {
  record: ConsumedRecord;
};

/** Longest customer id the tracker keys by (a store key must stay small): longer, the record is skipped. */
const MAX_CUSTOMER_ID_LENGTH = 512;

/**
 * A task's persistent store as the logic sees it (state-store.ts is the LMDB adapter): every
 * committed state of the task, read synchronously; `write` applies a committed change with the
 * changelog positions it reflects.
 */
export interface TaskStateStore {
  message(id: string): TrackedMessage | undefined;
  conversation(key: string): ConversationWindow | undefined;
  requestOutcome(requestId: string): RequestOutcome | undefined;
  messageIdsOfRequest(requestId: string): string[];
  /**
   * False while the indexes of a bulk restore are being built (a lookup by request, recipient or business may miss).
   */
  indexesComplete(): boolean;
  /** A recipient's or a business's messages, newest first, older than the `before` sort key. */
  listedMessages(list: MessageList, value: string, limit: number, before?: string): { id: string; sort: string }[];
  /** The request ids of a recipient's rejected or expired requests, newest first. */
  outcomesOfRecipient(recipient: string, limit: number): string[];
  /** An inbound message kept by its event id. */
  inboundMessage(eventId: string): InboundMessageRecord | undefined;
  /** A customer's inbound messages (canonical id), newest first, older than the `before` sort key. */
  inboundOfCustomer(customer: string, limit: number, before?: string): { sort: string; record: InboundMessageRecord }[];
  write(change: {
    messages: { id: string; state: TrackedMessage; previous: TrackedMessage | undefined }[];
    conversations: { key: string; window: ConversationWindow; previous: ConversationWindow | undefined }[];
    outcomes?: { requestId: string; outcome: RequestOutcome; previous: RequestOutcome | undefined }[];
    inbound?: { record: InboundMessageRecord }[];
    checkpoint?: { messageState?: number; conversations?: number; requestOutcomes?: number; inboundMessages?: number };
  }): Promise<void>;
}

/** A task this member runs: its store, and the recently used committed states above it. */
interface OpenTask {
  /** Recently used committed states, above the store (tracker.maxCachedMessages per task). */
  messages: StateCache<TrackedMessage>;
  conversations: StateCache<ConversationWindow>;
  store: TaskStateStore;
  /** Set when a store write failed: the task must be started again (its store reopened). */
  broken: Error | undefined;
}

const text = (value: string | Buffer | (string | Buffer)[] | undefined): string | undefined =>
  value === undefined ? undefined : Array.isArray(value) ? text(value[0]) : value.toString();

export class TrackerLogic {
  private readonly tasks = new Map<number, OpenTask>();
  private readonly now: () => Date;

  constructor(private readonly opts: TrackerLogicOptions) {
    this.now = opts.now ?? (() => new Date());
  }

  /** Starts a task on its store (already restored: state-store.ts, index.ts). */
  startTask(task: number, store: TaskStateStore): void {
    this.tasks.set(task, {
      store,
      broken: undefined,
      messages: messageStateCache(this.opts.maxCachedMessages, () => this.opts.counters.evicted('message')),
      conversations: new StateCache<ConversationWindow>({
        maxEntries: this.opts.maxCachedConversations,
        onEvict: () => this.opts.counters.evicted('conversation'),
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

  /** The task of a customer (any form of its id): the partition of its `messages` key, the canonical id. */
  taskOfCustomer(customer: string): number {
    return this.taskOf(canonicalCustomerId(customer));
  }

  /** Whether a `conversations` record belongs to this task (its customer's `messages` partition). */
  ownsConversation(task: number, key: string): boolean {
    return this.taskOfCustomer(customerOfConversationKey(key)) === task;
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

  /** An output record to the task's own partition, with the headers every output carries. */
  private output(
    kind: 'messageState' | 'requestOutcomes' | 'inboundMessages' | 'conversations',
    task: number,
    key: string,
    value: unknown,
    eventId: string,
    businessId: string | null,
  ): OutputRecord {
    const headers: Record<string, string> = { [HEADER.eventId]: eventId };
    if (businessId !== null) headers[HEADER.businessId] = businessId;
    headers[HEADER.contentType] = 'application/json';
    headers[HEADER.schema] = SCHEMA_ID[kind];
    return { topic: this.opts.topics[kind], partition: task, key, value: JSON.stringify(value), headers };
  }

  /** Applies one batch of one input partition of a task: the outputs, and the state change for after the commit. */
  process(task: number, events: DecodedEvent[]): TrackerProcessResult {
    const openTask = this.tasks.get(task);
    if (!openTask) throw new Error(`task ${task} is not started`);
    if (openTask.broken) throw openTask.broken;
    const messages = new Map<string, TrackedMessage>();
    const windows = new Map<string, ConversationWindow>();
    // The committed state each changed key had before this batch (the store replaces its index entries).
    const previousMessages = new Map<string, TrackedMessage | undefined>();
    const previousWindows = new Map<string, ConversationWindow | undefined>();
    // Request outcomes are few and small, and read once per result: no cache above the store.
    const outcomes = new Map<string, RequestOutcome>();
    const previousOutcomes = new Map<string, RequestOutcome | undefined>();
    // Inbound messages are written once each and read by the queries only: no cache above the store.
    const inbound = new Map<string, InboundMessageRecord>();
    const outputs: OutputRecord[] = [];
    const causes: ConsumedRecord[] = [];
    const now = this.now();
    for (const decoded of events) {
      if (decoded.kind === 'message') {
        const { event, record } = decoded;
        const id = messageIdOf(event);
        let current = messages.get(id) ?? previousMessages.get(id);
        if (current === undefined && !previousMessages.has(id)) {
          current = this.committedMessage(openTask, id);
          previousMessages.set(id, current);
        }
        let result;
        try {
          result = applyEvent(current, event, now);
        } catch (err) {
          this.skip('invalid_event', record, errorMessage(err));
          continue;
        }
        this.opts.counters.event(event.kind === 'result' ? 'send-results' : 'delivery_status', result.outcome);
        if (!result.changed) continue;
        messages.set(id, result.state);
        causes.push(record);
        const eventId = stateEventId(id, result.state.events, result.state.updatedAt);
        outputs.push(this.output('messageState', task, id, result.state, eventId, result.state.businessId));
      } else if (decoded.kind === 'outcome') {
        const { event, record } = decoded;
        const id = event.requestId;
        if (!previousOutcomes.has(id)) previousOutcomes.set(id, openTask.store.requestOutcome(id));
        const { outcome, changed } = applyOutcome(outcomes.get(id) ?? previousOutcomes.get(id), event, now);
        this.opts.counters.event('send-results', changed ? 'outcome_recorded' : 'outcome_unchanged');
        if (!changed) continue;
        outcomes.set(id, outcome);
        causes.push(record);
        const eventId = eventIdOf(`request-outcome\n${id}\n${outcome.outcome}\n${outcome.at}`);
        outputs.push(this.output('requestOutcomes', task, id, outcome, eventId, outcome.businessId));
      } else {
        // The message itself, once per event id (README "Conversations"): a redelivery changes nothing.
        const record = decoded.inbound;
        if (inbound.has(record.eventId) || openTask.store.inboundMessage(record.eventId) !== undefined) {
          this.opts.counters.event('messages', 'inbound_duplicate');
        } else {
          this.opts.counters.event('messages', 'inbound_recorded');
          inbound.set(record.eventId, record);
          causes.push(decoded.record);
          // The task's own partition (like message-state): a task restores its customers' messages from one.
          const eventId = eventIdOf(`inbound-message\n${record.eventId}`);
          outputs.push(this.output('inboundMessages', task, record.eventId, record, eventId, record.businessId));
        }
        const key = conversationKey(decoded.input.businessId, decoded.input.customer);
        let current = windows.get(key) ?? previousWindows.get(key);
        if (current === undefined && !previousWindows.has(key)) {
          current = this.committedWindow(openTask, key);
          previousWindows.set(key, current);
        }
        const { window, changed } = applyInbound(current, decoded.input);
        this.opts.counters.event('messages', changed ? 'window_moved' : 'window_unchanged');
        if (!changed) continue;
        windows.set(key, window);
        causes.push(decoded.record);
        // The task's own partition (like message-state): a task restores its windows from one partition.
        const eventId = eventIdOf(`${key}\n${window.lastInboundAt}`);
        outputs.push(this.output('conversations', task, key, window, eventId, window.businessId));
      }
    }
    return {
      outputs,
      causes,
      commit: (written) => {
        for (const [id, tracked] of messages) openTask.messages.set(id, tracked);
        for (const [key, window] of windows) openTask.conversations.set(key, window);
        if (messages.size === 0 && windows.size === 0 && outcomes.size === 0 && inbound.size === 0) return;
        const checkpoint: {
          messageState?: number;
          conversations?: number;
          requestOutcomes?: number;
          inboundMessages?: number;
        } = {};
        const ms = written?.get(this.opts.topics.messageState)?.get(task);
        const cv = written?.get(this.opts.topics.conversations)?.get(task);
        const ro = written?.get(this.opts.topics.requestOutcomes)?.get(task);
        const im = written?.get(this.opts.topics.inboundMessages)?.get(task);
        if (ms !== undefined) checkpoint.messageState = ms;
        if (cv !== undefined) checkpoint.conversations = cv;
        if (ro !== undefined) checkpoint.requestOutcomes = ro;
        if (im !== undefined) checkpoint.inboundMessages = im;
        openTask.store
          .write({
            messages: [...messages].map(([id, s]) => ({ id, state: s, previous: previousMessages.get(id) })),
            conversations: [...windows].map(([key, w]) => ({ key, window: w, previous: previousWindows.get(key) })),
            outcomes: [...outcomes].map(([requestId, o]) => ({
              requestId,
              outcome: o,
              previous: previousOutcomes.get(requestId),
            })),
            inbound: [...inbound.values()].map((record) => ({ record })),
            checkpoint,
          })
          .catch((error: unknown) => {
            // The transaction is committed; the store missed it. The next batch fails the task,
            // whose start reads the changelog from the store's checkpoint (README "Local store").
            openTask.broken = new Error(`the local store of task ${task} failed a write: ${errorMessage(error)}`);
          });
      },
    };
  }

  /** The committed state of a message of a task: the cache, else the store (then cached). */
  private committedMessage(openTask: OpenTask, id: string): TrackedMessage | undefined {
    const cached = openTask.messages.get(id);
    if (cached !== undefined) return cached;
    const stored = openTask.store.message(id);
    if (stored !== undefined) openTask.messages.set(id, stored);
    return stored;
  }

  private committedWindow(openTask: OpenTask, key: string): ConversationWindow | undefined {
    const cached = openTask.conversations.get(key);
    if (cached !== undefined) return cached;
    const stored = openTask.store.conversation(key);
    if (stored !== undefined) openTask.conversations.set(key, stored);
    return stored;
  }

  /** Whether this member runs the task (its store is open here). */
  ownsTask(task: number): boolean {
    return this.tasks.has(task);
  }

  /** A message's state from the task that owns it on this member; undefined when unknown here. */
  message(messageId: string): TrackedMessage | undefined {
    const openTask = this.tasks.get(this.taskOf(messageId));
    return openTask && (openTask.messages.peek(messageId) ?? openTask.store.message(messageId));
  }

  /**
   * A conversation window (its key with either form of the customer) from the task of its customer on this member;
   * undefined when unknown here.
   */
  conversation(key: string): ConversationWindow | undefined {
    const canonical = canonicalConversationKey(key);
    const openTask = this.tasks.get(this.taskOfCustomer(customerOfConversationKey(canonical)));
    return openTask && (openTask.conversations.peek(canonical) ?? openTask.store.conversation(canonical));
  }

  /**
   * A customer's inbound messages (any form of the id), newest first, from the task of the customer on this member;
   * undefined when it is not here.
   */
  inboundOfCustomer(
    customer: string,
    limit: number,
    before?: string,
  ): { sort: string; record: InboundMessageRecord }[] | undefined {
    const openTask = this.tasks.get(this.taskOfCustomer(customer));
    return openTask?.store.inboundOfCustomer(canonicalCustomerId(customer), limit, before);
  }

  /** The latest-updated message of a request among this member's tasks (a maybeSent resend can make two). */
  request(requestId: string): TrackedMessage | undefined {
    let latest: TrackedMessage | undefined;
    for (const openTask of this.tasks.values()) {
      for (const id of openTask.store.messageIdsOfRequest(requestId)) {
        const found = openTask.messages.peek(id) ?? openTask.store.message(id);
        if (found && found.requestId === requestId && (!latest || found.updatedAt > latest.updatedAt)) latest = found;
      }
    }
    return latest;
  }

  /**
   * The rejected or expired outcome of a request among this member's tasks (the task of the
   * send-results partition its result was on: one lookup per task), the latest when several.
   */
  requestOutcome(requestId: string): RequestOutcome | undefined {
    let latest: RequestOutcome | undefined;
    for (const openTask of this.tasks.values()) {
      const found = openTask.store.requestOutcome(requestId);
      if (found && (!latest || found.at > latest.at)) latest = found;
    }
    return latest;
  }

  /**
   * Whether every owned task's indexes cover all its states (a miss by request id, recipient or business is then
   * final).
   */
  indexesComplete(): boolean {
    for (const openTask of this.tasks.values()) if (!openTask.store.indexesComplete()) return false;
    return true;
  }

  /** A page of a recipient's or a business's messages across this member's tasks, newest first. */
  listedMessages(
    list: MessageList,
    value: string,
    limit: number,
    before?: string,
  ): { sort: string; state: TrackedMessage }[] {
    const found: { sort: string; state: TrackedMessage }[] = [];
    for (const openTask of this.tasks.values()) {
      for (const { id, sort } of openTask.store.listedMessages(list, value, limit, before)) {
        const tracked = openTask.messages.peek(id) ?? openTask.store.message(id);
        if (tracked) found.push({ sort, state: tracked });
      }
    }
    return found.sort((a, b) => (a.sort < b.sort ? 1 : a.sort > b.sort ? -1 : 0)).slice(0, limit);
  }

  /** A recipient's rejected or expired requests across this member's tasks, newest first (by when they ended). */
  recipientOutcomes(recipient: string, limit: number): RequestOutcome[] {
    const found: RequestOutcome[] = [];
    for (const openTask of this.tasks.values()) {
      for (const id of openTask.store.outcomesOfRecipient(recipient, limit)) {
        const outcome = openTask.store.requestOutcome(id);
        if (outcome) found.push(outcome);
      }
    }
    return newestOutcomesFirst(found).slice(0, limit);
  }

  get taskCount(): number {
    return this.opts.partitions;
  }

  cachedCounts(): { messages: number; conversations: number } {
    let messages = 0;
    let conversations = 0;
    for (const openTask of this.tasks.values()) {
      messages += openTask.messages.size;
      conversations += openTask.conversations.size;
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
        // A result that created no message is kept as its request's outcome (README "Request outcomes").
        if (result.outcome !== 'accepted')
          return { kind: 'outcome', event: outcomeEventFrom(result, Number(record.timestamp)), record };
        const event = resultEventFrom(
          result,
          eventId ?? resultEventId(result.businessId ?? business ?? '', result.requestId, result.outcome),
        )!;
        return { kind: 'message', event, record };
      }
      if (business === undefined || business === '') return skip('missing_business', `no ${HEADER.businessId} header`);
      if (record.topic === this.opts.topics.deliveryStatus) {
        const parsed = deliveryStatusEventSchema.safeParse(json);
        if (!parsed.success) return skip('invalid_event', parsed.error.issues[0]?.message ?? 'not a delivery status');
        return {
          kind: 'message',
          event: statusEventFrom(parsed.data, { eventId: eventId ?? eventIdOf(record.value), businessId: business }),
          record,
        };
      }
      const parsed = inboundMessageEventSchema.safeParse(json);
      if (!parsed.success) return skip('invalid_event', parsed.error.issues[0]?.message ?? 'not an inbound message');
      if (parsed.data.sender.id.length > MAX_CUSTOMER_ID_LENGTH)
        return skip('invalid_event', `sender.id has more than ${MAX_CUSTOMER_ID_LENGTH} characters: not a customer id`);
      const inbound = inboundRecordFrom(
        parsed.data,
        { eventId: eventId ?? eventIdOf(record.value), businessId: business },
        this.now(),
      );
      return { kind: 'conversation', input: inboundFrom(parsed.data, business), inbound, record };
    } catch (err) {
      return skip('invalid_event', errorMessage(err));
    }
  }
}

/** The `event-id` of a published state: the same for the same version of a message's state. */
function stateEventId(messageId: string, events: number, updatedAt: string): string {
  return eventIdOf(`message-state\n${messageId}\n${events}\n${updatedAt}`);
}

/** Outcomes newest first by when they ended, then by request id: the same order on every member. */
export function newestOutcomesFirst(outcomes: RequestOutcome[]): RequestOutcome[] {
  return outcomes.sort((a, b) =>
    a.at !== b.at ? (a.at < b.at ? 1 : -1) : a.requestId < b.requestId ? 1 : a.requestId > b.requestId ? -1 : 0,
  );
}
