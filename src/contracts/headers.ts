import { hash } from 'node:crypto';

/** The provider's signature header on webhook calls. */
export const SIGNATURE_HEADER = 'x-service-hmac-sha256';

/** Header names on every record the relay writes (docs/topics.md, "Headers"). */
export const HEADER = {
  eventId: 'event-id',
  businessId: 'business-id',
  receivedAt: 'received-at',
  contentType: 'content-type',
  schema: 'schema',
  signature: SIGNATURE_HEADER,
  traceparent: 'traceparent',
  errorReason: 'error-reason',
} as const;

/**
 * Headers of dead-letter records beyond HEADER (docs/topics.md, "Headers"): what a redrive needs, and what a
 * redriven record carries. `webhook-topic` is the webhook topic the address named (or the body,
 * when the address named none); `original-topic` the Kafka topic the event was meant for (webhooks,
 * from 0.2.0; records before derive it from `webhook-topic` or the body); `source-*` where a
 * dead-lettered send request was read (its key is the DLQ record's key).
 */
export const DLQ_HEADER = {
  errorCode: 'error-code',
  webhookTopic: 'webhook-topic',
  originalTopic: 'original-topic',
  sourceTopic: 'source-topic',
  sourcePartition: 'source-partition',
  sourceOffset: 'source-offset',
  dlqValue: 'dlq-value',
  /** On a redriven record: `<dlq topic>/<partition>/<offset>` of the dead letter it came from. */
  redrivenFrom: 'redriven-from',
  /** On a redriven record: when it was redriven (ms since the epoch). */
  redrivenAt: 'redriven-at',
} as const;

/** The `event-id` of a record: hex SHA-256 of its exact value bytes (the webhook body, the send request). */
export function eventIdOf(bytes: string | Uint8Array): string {
  // One-shot: no Hash object per webhook (0.9 → 0.5 µs for a 500-byte body).
  return hash('sha256', bytes, 'hex');
}

/**
 * The `event-id` of a send result: derived from what it answers (business, request id,
 * outcome), not from its bytes, so that a result written twice (a crash, a broker failover,
 * a replay) carries the same id even when its attempts, times or message id differ.
 */
export function resultEventId(businessId: string, requestId: string, outcome: string): string {
  return hash('sha256', `send-result\n${businessId}\n${requestId}\n${outcome}`, 'hex');
}

export const SCHEMA_ID = {
  messages: 'messages/v1',
  delivery_status: 'delivery_status/v1',
  webhooksDlq: 'webhooks-dlq/v1',
  sendResult: 'send-result/v1',
  /** Written by `msgbridge send`; other producers of send requests may leave the header out. */
  sendRequest: 'send-request/v1',
  sendRequestsDlq: 'send-requests-dlq/v1',
  messageState: 'message-state/v1',
  conversations: 'conversations/v1',
  requestOutcomes: 'request-outcome/v1',
  inboundMessages: 'inbound-message-record/v1',
} as const;
