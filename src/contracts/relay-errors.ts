/**
 * The relay's own error vocabulary, as backend teams read it in a rejected result's `error`
 * (`type` and `code`, beside the provider's `ERROR_TYPE_*` / `ERROR_CODE_*`) and operators in a
 * dead letter's `error-reason` code. Published values: a new one may be added, none renamed.
 */

/** `error.type` of a result the relay wrote (the provider's error object keeps its own type). */
export const RELAY_ERROR_TYPE = {
  /** The request can never be sent as it is (dead-lettered). */
  invalidRequest: 'RELAY_INVALID_REQUEST',
  /** The provider answered an error without its error object. */
  httpError: 'RELAY_HTTP_ERROR',
  /** The provider answered 2xx without a message id. */
  invalidResponse: 'RELAY_INVALID_RESPONSE',
  /** No answer: timeout or network failure. */
  transportError: 'RELAY_TRANSPORT_ERROR',
  /** Refused by the conversation window guard. */
  conversationWindow: 'RELAY_CONVERSATION_WINDOW',
} as const;

/** Why a send request was dead-lettered: its rejected result's `error.code` and its `error-reason` header's code. */
export const DLQ_CODES = [
  'RELAY_INVALID_JSON',
  'RELAY_INVALID_REQUEST',
  'RELAY_UNKNOWN_TYPE',
  'RELAY_INVALID_FIELD',
  'RELAY_INVALID_EXPIRY',
  'RELAY_UNKNOWN_BUSINESS',
  'RELAY_AMBIGUOUS_BUSINESS',
] as const;
export type DlqCode = (typeof DLQ_CODES)[number];

/** `error.code` of results the relay wrote for a request it did send or refuse to send. */
export const RELAY_RESULT_CODE = {
  createdWithoutId: 'RELAY_CREATED_WITHOUT_ID',
  timeout: 'RELAY_TIMEOUT',
  networkError: 'RELAY_NETWORK_ERROR',
  outsideConversationWindow: 'RELAY_OUTSIDE_CONVERSATION_WINDOW',
} as const;

/** Why `msgbridge dlq redrive` would not send a dead letter again (besides a DlqCode it fails with today). */
export const REDRIVE_REFUSAL_CODE = {
  /** A rejected result kept beside the request, for reference: nothing to send. */
  reference: 'RELAY_DLQ_REFERENCE',
  /** Past its expiry: the sender would answer expired. */
  expired: 'RELAY_EXPIRED',
} as const;
