/** Header names on every record the relay writes (DESIGN §1.2). */
export const HEADER = {
  eventId: 'event-id',
  businessId: 'business-id',
  receivedAt: 'received-at',
  contentType: 'content-type',
  schema: 'schema',
  signature: 'x-service-hmac-sha256',
  traceparent: 'traceparent',
  errorReason: 'error-reason',
} as const;

/** The provider's signature header on webhook calls. */
export const SIGNATURE_HEADER = 'x-service-hmac-sha256';

export const SCHEMA_ID = {
  messages: 'messages/v1',
  delivery_status: 'delivery_status/v1',
  webhooksDlq: 'webhooks-dlq/v1',
  sendResult: 'send-result/v1',
  sendRequestsDlq: 'send-requests-dlq/v1',
} as const;
