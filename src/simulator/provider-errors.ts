import { randomInt } from 'node:crypto';
import type { ProviderError } from '../contracts/index.js';

/**
 * The provider's error object: the body of its HTTP error answers and `statusUpdate.error`
 * of `delivery_failed` events. Codes the provider documents keep their names; the few the
 * simulator adds for cases its documentation leaves open follow the same `ERROR_CODE_` pattern.
 */
export const ERROR_TYPE = {
  invalidRequest: 'ERROR_TYPE_INVALID_REQUEST',
  unauthenticated: 'ERROR_TYPE_UNAUTHENTICATED',
  notFound: 'ERROR_TYPE_NOT_FOUND',
  resourceExhausted: 'ERROR_TYPE_RESOURCE_EXHAUSTED',
  deadlineExceeded: 'ERROR_TYPE_DEADLINE_EXCEEDED',
  unspecified: 'ERROR_TYPE_UNSPECIFIED',
} as const;

interface CatalogueEntry {
  type: string;
  title: string;
  message: string;
}

const CATALOGUE = {
  // Send-time (HTTP) errors.
  ERROR_CODE_API_KEY_MISSING: {
    type: ERROR_TYPE.unauthenticated,
    title: 'Missing API key',
    message: 'the X-API-Key header is missing',
  },
  ERROR_CODE_API_KEY_INVALID: {
    type: ERROR_TYPE.unauthenticated,
    title: 'Invalid API key',
    message: 'the API key is not valid for this business',
  },
  ERROR_CODE_REQUEST_BODY_INVALID: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Invalid request',
    message: 'the request body is not valid JSON',
  },
  ERROR_CODE_REQUEST_FIELD_INVALID: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Invalid request',
    message: 'a field of the request is invalid',
  },
  ERROR_CODE_CONTENT_TYPE_UNSUPPORTED: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Unsupported content type',
    message: 'the request body must be application/json',
  },
  ERROR_CODE_REQUEST_TOO_LARGE: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Request too large',
    message: 'the request body is too large',
  },
  ERROR_CODE_PHONE_NUMBER_BAD_FORMAT: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Invalid phone number',
    message: 'the phone number is not in international format',
  },
  ERROR_CODE_MESSAGE_TEXT_EMPTY: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Empty message',
    message: 'the message text is empty',
  },
  ERROR_CODE_WEBHOOK_LIMIT_REACHED: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Too many webhooks',
    message: 'this business has reached its number of webhook registrations',
  },
  ERROR_CODE_NOT_FOUND: { type: ERROR_TYPE.notFound, title: 'Not found', message: 'no such resource' },
  ERROR_CODE_METHOD_NOT_ALLOWED: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Method not allowed',
    message: 'this method is not allowed on this resource',
  },
  ERROR_CODE_BUSINESS_REACHED_LIMITS: {
    type: ERROR_TYPE.resourceExhausted,
    title: 'Rate limit reached',
    message: 'too many requests; slow down',
  },
  ERROR_CODE_INTERNAL: {
    type: ERROR_TYPE.unspecified,
    title: 'Internal error',
    message: 'the service failed to process the request',
  },
  ERROR_CODE_UNAVAILABLE: {
    type: ERROR_TYPE.unspecified,
    title: 'Service unavailable',
    message: 'the service is temporarily unavailable',
  },
  ERROR_CODE_UPSTREAM_TIMEOUT: {
    type: ERROR_TYPE.deadlineExceeded,
    title: 'Deadline exceeded',
    message: 'the service did not answer in time',
  },
  // Delivery-time (asynchronous, delivery_failed) errors.
  ERROR_CODE_MESSAGE_CUSTOMER_NO_CONVERSATION_INITIATION: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Conversation not initiated',
    message: 'the customer has not started a conversation; send a template message first',
  },
  ERROR_CODE_MESSAGE_OUTSIDE_OF_ELIGIBILITY_WINDOW: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Outside the 24-hour window',
    message: "the customer's last message is older than 24 hours; send a template message",
  },
  ERROR_CODE_MESSAGE_TEMPLATE_NOT_FOUND: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Template not found',
    message: 'no approved template has this name',
  },
  ERROR_CODE_MESSAGE_TEMPLATE_INPUT_INVALID: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Invalid template parameters',
    message: 'the template inputs are invalid',
  },
  ERROR_CODE_PHONE_NUMBER_NOT_ON_WHATSAPP: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Not on WhatsApp',
    message: 'the recipient number is not on WhatsApp',
  },
  ERROR_CODE_MESSAGE_CUSTOMER_OPTED_OUT: {
    type: ERROR_TYPE.invalidRequest,
    title: 'Customer opted out',
    message: 'the customer opted out of messages from this business',
  },
} as const satisfies Record<string, CatalogueEntry>;

export type ProviderErrorCode = keyof typeof CATALOGUE;

/** Decimal digits, as the provider's trace ids are. */
export function newTraceId(): string {
  return `${randomInt(1, 10)}${String(randomInt(0, 1e12)).padStart(12, '0')}${String(randomInt(0, 1e6)).padStart(6, '0')}`;
}

export function providerError(
  code: ProviderErrorCode,
  options: { message?: string; details?: Record<string, unknown> } = {},
): ProviderError {
  const entry: CatalogueEntry = CATALOGUE[code];
  const cntTraceId = newTraceId();
  return {
    message: options.message ?? entry.message,
    type: entry.type,
    code,
    userTitle: entry.title,
    userMessage: `Something went wrong. Please share the trace id ${cntTraceId} with our support team so that they can look into it.`,
    cntTraceId,
    details: options.details ?? {},
  };
}
