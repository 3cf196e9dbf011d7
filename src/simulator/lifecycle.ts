import type { SimulatorConfig } from '../config/schema.js';
import { RecencyMap } from '../platform/recency-map.js';
import {
  canonicalCustomerId,
  type DeliveryStatus,
  type ProviderError,
  type SendOperation,
} from '../contracts/index.js';
import { deliveryStatusEvent, type SimEvent } from './events.js';
import type { CompiledBusiness } from './options.js';
import { providerError, type ProviderErrorCode } from './provider-errors.js';

export interface StatusChange {
  status: DeliveryStatus;
  at: string;
  error: ProviderError | null;
  /** Id of the event that reported it (null for channels without webhooks). */
  eventId: string | null;
}

/** What the simulator decided will happen to a message, at the moment it was created. */
export type MessagePlan = 'read' | 'delivered_never_read' | 'stays_sent' | 'failed' | 'no_events';

export interface MessageRecord {
  id: string;
  businessId: string;
  operation: SendOperation;
  channelType: string;
  recipient: string;
  templateName: string | null;
  createdAt: string;
  plan: MessagePlan;
  /** The latest status reported (null before the first). */
  status: DeliveryStatus | null;
  history: StatusChange[];
}

interface TrackedMessage {
  record: MessageRecord;
  business: CompiledBusiness;
  steps: { status: DeliveryStatus; error: ProviderError | null; delayMs: number }[];
  callbackData: unknown;
  timer: NodeJS.Timeout | undefined;
}

export interface CreateMessageInput {
  id: string;
  business: CompiledBusiness;
  operation: SendOperation;
  channelType: string;
  recipient: string;
  templateName?: string;
  parameters?: { name: string; value: string }[];
  callbackData?: unknown;
}

/**
 * Every created message's delivery status lifecycle, and the 24-hour conversation windows
 * that decide whether a text may go out. Outcomes are decided when the message is created
 * (from the rules, the templates and the recipient behaviours) and then reported on a
 * schedule: sent → delivered → read, or delivery_failed with the error object. Memory is
 * bounded: the oldest messages and conversations are forgotten first.
 */
export class MessageLifecycle {
  /** Oldest created first (read with peek: a lookup does not make a message recent). */
  private readonly messages = new RecencyMap<string, TrackedMessage>();
  /**
   * `${businessId} ${customer}` (the canonical customer id: `+` or not, one customer) → time of the customer's last
   * inbound message, oldest first.
   */
  private readonly conversations = new RecencyMap<string, number>();
  private readonly recipients: Record<keyof SimulatorConfig['recipients'], Set<string>>;
  private activeTimers = 0;
  private closed = false;

  constructor(
    private readonly options: {
      lifecycle: SimulatorConfig['lifecycle'];
      templates: SimulatorConfig['templates'];
      recipients: SimulatorConfig['recipients'];
      history: SimulatorConfig['history'];
      emit: (event: SimEvent) => void;
      now: () => number;
    },
  ) {
    const r = options.recipients;
    const set = (ids: readonly string[]) => new Set(ids.map(canonicalCustomerId));
    this.recipients = {
      notOnWhatsapp: set(r.notOnWhatsapp),
      optedOut: set(r.optedOut),
      neverReads: set(r.neverReads),
      blocked: set(r.blocked),
    };
  }

  /** An inbound message from `customer` opens (or reopens) the window for texts. */
  recordInbound(businessId: string, customer: string): void {
    const key = `${businessId} ${canonicalCustomerId(customer)}`;
    this.conversations.set(key, this.options.now());
    if (this.conversations.size > this.options.history.conversations)
      this.conversations.delete(this.conversations.oldest()!);
  }

  create(input: CreateMessageInput): MessageRecord {
    const { sentDelayMs, deliveredDelayMs, readDelayMs } = this.options.lifecycle;
    const failure = this.failureOf(input);
    let plan: MessagePlan;
    let steps: TrackedMessage['steps'];
    const customer = canonicalCustomerId(input.recipient);
    if (input.channelType !== 'whatsapp') {
      // Only WhatsApp messages produce webhook events (spec, Events rule 5).
      plan = 'no_events';
      steps = [];
    } else if (failure) {
      plan = 'failed';
      steps = [{ status: 'delivery_failed', error: failure, delayMs: sentDelayMs }];
    } else {
      steps = [{ status: 'sent', error: null, delayMs: sentDelayMs }];
      if (this.recipients.blocked.has(customer)) {
        plan = 'stays_sent';
      } else {
        steps.push({ status: 'delivered', error: null, delayMs: deliveredDelayMs });
        if (this.recipients.neverReads.has(customer)) plan = 'delivered_never_read';
        else {
          plan = 'read';
          steps.push({ status: 'read', error: null, delayMs: readDelayMs });
        }
      }
    }
    const record: MessageRecord = {
      id: input.id,
      businessId: input.business.id,
      operation: input.operation,
      channelType: input.channelType,
      recipient: input.recipient,
      templateName: input.templateName ?? null,
      createdAt: new Date(this.options.now()).toISOString(),
      plan,
      status: null,
      history: [],
    };
    const tracked: TrackedMessage = {
      record,
      business: input.business,
      steps,
      callbackData: input.callbackData,
      timer: undefined,
    };
    this.messages.set(record.id, tracked);
    if (this.messages.size > this.options.history.messages) {
      this.forget(this.messages.oldestValue()!);
    }
    this.scheduleNext(tracked);
    return record;
  }

  get(id: string): MessageRecord | undefined {
    return this.messages.peek(id)?.record;
  }

  recent(limit: number): MessageRecord[] {
    return [...this.messages.values()].slice(-limit).map((m) => m.record);
  }

  /** Status changes still to come, all messages together. */
  get pendingSteps(): number {
    return this.activeTimers;
  }

  close(): void {
    this.closed = true;
    for (const tracked of this.messages.values()) this.cancel(tracked);
  }

  /** The delivery_failed error a message will get, or null when it goes through. */
  private failureOf(input: CreateMessageInput): ProviderError | null {
    if (input.operation === 'template') {
      const name = input.templateName ?? '';
      const template = this.options.templates[name];
      if (!template)
        return fail('ERROR_CODE_MESSAGE_TEMPLATE_NOT_FOUND', `template "${name}" does not exist`, {
          templateName: name,
        });
      const problem = parameterProblem(template.variables, input.parameters ?? []);
      if (problem)
        return fail('ERROR_CODE_MESSAGE_TEMPLATE_INPUT_INVALID', `the template inputs are invalid: ${problem}`, {
          templateName: name,
          expected: template.variables,
        });
    }
    if (input.channelType !== 'whatsapp') return null;
    const customer = canonicalCustomerId(input.recipient);
    if (this.recipients.notOnWhatsapp.has(customer))
      return fail('ERROR_CODE_PHONE_NUMBER_NOT_ON_WHATSAPP', `${input.recipient} is not on WhatsApp`);
    if (this.recipients.optedOut.has(customer)) return fail('ERROR_CODE_MESSAGE_CUSTOMER_OPTED_OUT');
    if (input.operation === 'text') {
      const last = this.conversations.peek(`${input.business.id} ${customer}`);
      if (last === undefined) return fail('ERROR_CODE_MESSAGE_CUSTOMER_NO_CONVERSATION_INITIATION');
      if (this.options.now() - last > this.options.lifecycle.conversationWindowMs)
        return fail('ERROR_CODE_MESSAGE_OUTSIDE_OF_ELIGIBILITY_WINDOW');
    }
    return null;
  }

  private scheduleNext(tracked: TrackedMessage): void {
    const step = tracked.steps.shift();
    if (!step || this.closed) return;
    this.activeTimers += 1;
    tracked.timer = setTimeout(() => {
      this.activeTimers -= 1;
      tracked.timer = undefined;
      this.report(tracked, step.status, step.error);
      this.scheduleNext(tracked);
    }, step.delayMs);
  }

  private report(tracked: TrackedMessage, status: DeliveryStatus, error: ProviderError | null): void {
    const at = this.options.now();
    const event = deliveryStatusEvent({
      businessId: tracked.business.id,
      businessNumber: tracked.business.number,
      recipient: tracked.record.recipient,
      channelType: tracked.record.channelType,
      messageId: tracked.record.id,
      status,
      error,
      at,
      callbackData: tracked.callbackData,
    });
    tracked.record.status = status;
    tracked.record.history.push({ status, at: new Date(at).toISOString(), error, eventId: event.eventId });
    this.options.emit(event);
  }

  private cancel(tracked: TrackedMessage): void {
    if (tracked.timer !== undefined) {
      clearTimeout(tracked.timer);
      tracked.timer = undefined;
      this.activeTimers -= 1;
    }
    tracked.steps = [];
  }

  private forget(tracked: TrackedMessage): void {
    this.cancel(tracked);
    this.messages.delete(tracked.record.id);
  }
}

function fail(code: ProviderErrorCode, message?: string, details?: Record<string, unknown>): ProviderError {
  return providerError(code, {
    ...(message !== undefined ? { message } : {}),
    ...(details !== undefined ? { details } : {}),
  });
}

/** Why template parameters do not match the declared variables, or undefined when they do. */
export function parameterProblem(
  variables: readonly string[],
  parameters: readonly { name: string; value: string }[],
): string | undefined {
  const names = parameters.map((p) => p.name);
  const duplicate = names.find((n, i) => names.indexOf(n) !== i);
  if (duplicate !== undefined) return `parameter "${duplicate}" is given twice`;
  const missing = variables.filter((v) => !names.includes(v));
  if (missing.length > 0) return `missing ${missing.map((m) => `"${m}"`).join(', ')}`;
  const unknown = names.filter((n) => !variables.includes(n));
  if (unknown.length > 0) return `unknown ${unknown.map((u) => `"${u}"`).join(', ')}`;
  const empty = parameters.find((p) => p.value.trim() === '');
  if (empty) return `parameter "${empty.name}" is empty`;
  return undefined;
}
