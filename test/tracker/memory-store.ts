import type { ConversationWindow } from '../../src/contracts/conversation-window.js';
import type { InboundMessageRecord } from '../../src/contracts/inbound-message.js';
import type { TrackedMessage } from '../../src/contracts/message-state.js';
import type { RequestOutcome } from '../../src/contracts/request-outcome.js';
import type { TaskStateStore } from '../../src/tracker/tracker-logic.js';

/**
 * A task's store in memory, for the pure-logic tests (state-store.ts is the LMDB one): what it was asked, and what was
 * written.
 */
export type Write = Parameters<TaskStateStore['write']>[0];

export class MemoryStore implements TaskStateStore {
  messages = new Map<string, TrackedMessage>();
  windows = new Map<string, ConversationWindow>();
  outcomes = new Map<string, RequestOutcome>();
  inbound = new Map<string, InboundMessageRecord>();
  writes: Write[] = [];
  reads = 0;
  fail: Error | undefined;
  message(id: string) {
    this.reads++;
    return this.messages.get(id);
  }
  conversation(key: string) {
    return this.windows.get(key);
  }
  requestOutcome(requestId: string) {
    return this.outcomes.get(requestId);
  }
  messageIdsOfRequest(requestId: string) {
    return [...this.messages.values()].filter((s) => s.requestId === requestId).map((s) => s.messageId);
  }
  indexesComplete() {
    return true;
  }
  listedMessages(list: 'recipient' | 'business', value: string, limit: number) {
    return [...this.messages.values()]
      .filter((s) => (list === 'recipient' ? s.recipient : s.businessId) === value)
      .map((s) => ({ id: s.messageId, sort: `${s.acceptedAt}\u0000${s.messageId}` }))
      .slice(0, limit);
  }
  inboundMessage(eventId: string) {
    return this.inbound.get(eventId);
  }
  inboundOfCustomer(customer: string, limit: number) {
    return [...this.inbound.values()]
      .filter((r) => r.customer === customer)
      .map((record) => ({ sort: `${record.at}\u0000${record.eventId}`, record }))
      .sort((a, b) => (a.sort < b.sort ? 1 : -1))
      .slice(0, limit);
  }
  outcomesOfRecipient(recipient: string, limit: number) {
    return [...this.outcomes.values()]
      .filter((o) => o.recipient === recipient)
      .map((o) => o.requestId)
      .slice(0, limit);
  }
  write(change: Write) {
    this.writes.push(change);
    if (this.fail) return Promise.reject(this.fail);
    for (const m of change.messages) this.messages.set(m.id, m.state);
    for (const c of change.conversations) this.windows.set(c.key, c.window);
    for (const o of change.outcomes ?? []) this.outcomes.set(o.requestId, o.outcome);
    for (const i of change.inbound ?? []) this.inbound.set(i.record.eventId, i.record);
    return Promise.resolve();
  }
}
