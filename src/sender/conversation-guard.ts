import {
  isSms,
  RELAY_ERROR_TYPE,
  RELAY_RESULT_CODE,
  type FallbackTemplate,
  type SendRequest,
} from '../contracts/index.js';
import type { WindowLookup } from './conversation-table.js';

/**
 * The conversation window guard's decision for one request (README "Conversation window"):
 * send it as it is, refuse it (`RELAY_OUTSIDE_CONVERSATION_WINDOW`), send its fallback template
 * instead, or wait a moment for the table to learn of a window that may just have opened. Pure:
 * the window comes from a lookup the caller provides, the clock is an argument.
 */

/** `sender.conversationWindow`. */
export type ConversationWindowMode = 'off' | 'reject';

export const CONVERSATION_WINDOW_MODES: readonly ConversationWindowMode[] = ['off', 'reject'];

/** The `error.code` of a text refused because the customer's window is closed. */
export const OUTSIDE_WINDOW_CODE = RELAY_RESULT_CODE.outsideConversationWindow;

export type GuardDecision =
  /** Sent as it is. `why` says which rule let it through (a metric label). */
  | { action: 'send'; why: 'off' | 'template' | 'sms' | 'override' | 'open' | 'unknown' }
  | { action: 'reject'; window: Extract<WindowLookup, { state: 'closed' }> }
  | { action: 'fallback'; template: FallbackTemplate; window: Extract<WindowLookup, { state: 'closed' }> }
  /** Not open yet and the request is recent: look again at `untilMs` (or earlier) before refusing. */
  | { action: 'wait'; untilMs: number };

export interface GuardInput {
  mode: ConversationWindowMode;
  /** `recipient.channelType` of a text says its channel (a template is WhatsApp's). */
  request: Pick<SendRequest, 'type' | 'conversationWindow'> & {
    fallbackTemplate?: FallbackTemplate | undefined;
    recipient?: { channelType: string };
  };
  /** The window of the request's customer; called only when the rules need it. */
  lookup: () => WindowLookup;
  now: number;
  /** When the request was produced (its record timestamp; when it was taken when it has none). */
  requestTime: number;
  /** `sender.conversationWindowGraceMs`. */
  graceMs: number;
}

/**
 * The rules, in order:
 * 1. `off`: every request is sent as it is (a `fallbackTemplate` is never used).
 * 2. A template is always sent: the window only limits free-form text.
 * 3. An SMS text is sent as it is: the 24-hour rule is WhatsApp's (its `fallbackTemplate`, a
 *    WhatsApp template, is never used).
 * 4. `conversationWindow: "ignore"` on the request: sent as it is.
 * 5. Window open: sent.
 * 6. Window unknown (the table is not complete, or open windows were evicted): sent as it is —
 *    the guard refuses only what it knows is doomed; the provider decides the rest.
 * 7. Window closed (known closed, or never seen with the table complete), the request younger
 *    than `graceMs`: wait until it is that old, then decide again (the window may be opening).
 * 8. Window closed: the `fallbackTemplate` when the request has one, else rejected.
 */
export function decideConversation(input: GuardInput): GuardDecision {
  const { mode, request } = input;
  if (mode === 'off') return { action: 'send', why: 'off' };
  if (request.type !== 'text') return { action: 'send', why: 'template' };
  if (isSms(request.recipient?.channelType)) return { action: 'send', why: 'sms' };
  if (request.conversationWindow === 'ignore') return { action: 'send', why: 'override' };
  const window = input.lookup();
  if (window.state === 'open') return { action: 'send', why: 'open' };
  if (window.state === 'unknown') return { action: 'send', why: 'unknown' };
  const waitUntil = input.requestTime + input.graceMs;
  if (input.now < waitUntil) return { action: 'wait', untilMs: waitUntil };
  if (request.fallbackTemplate) return { action: 'fallback', template: request.fallbackTemplate, window };
  return { action: 'reject', window };
}

/** The error of a refused text: what a producer reads in `error` of the rejected result. */
export function outsideWindowFailure(window: Extract<WindowLookup, { state: 'closed' }>): {
  message: string;
  type: string;
  code: string;
  retriable: false;
  details: Record<string, unknown>;
} {
  const closedAt = window.openUntil === null ? null : new Date(window.openUntil).toISOString();
  return {
    message:
      closedAt === null
        ? 'not sent: the customer has no open 24-hour conversation window (no message from them in the last 24 hours is known), so a free-form text would fail; send a template (fallbackTemplate), or wait until the customer writes'
        : `not sent: the customer's 24-hour conversation window closed at ${closedAt}, so a free-form text would fail; send a template (fallbackTemplate), or wait until the customer writes again`,
    type: RELAY_ERROR_TYPE.conversationWindow,
    code: OUTSIDE_WINDOW_CODE,
    retriable: false,
    details: { windowOpenUntil: closedAt },
  };
}

/**
 * The provider body of a text request's fallback: the template (its extra fields, such as
 * `language`, included) to the text's recipient, with the text's other pass-through fields
 * (`callbackData`, `campaignName`...) but not its text-only ones (`recipient`, `message`).
 */
export function fallbackBody(
  textBody: Record<string, unknown>,
  recipient: string,
  template: FallbackTemplate,
): Record<string, unknown> {
  const body: Record<string, unknown> = {};
  for (const [field, value] of Object.entries(textBody))
    if (field !== 'recipient' && field !== 'message') body[field] = value;
  return { ...body, ...template, number: recipient, parameters: template.parameters ?? [] };
}
