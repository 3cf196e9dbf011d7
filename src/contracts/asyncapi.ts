import { z } from 'zod';
import { providerErrorSchema } from './common.js';
import { DLQ_HEADER, HEADER, SCHEMA_ID } from './headers.js';
import { sendRequestSchema, sendResultSchema } from './send.js';
import { deliveryStatusEventSchema, inboundMessageEventSchema } from './webhook-events.js';
import { conversationWindowSchema } from './conversation-window.js';
import { messageStateSchema } from './message-state.js';
import { requestOutcomeSchema } from './request-outcome.js';
import { inboundMessageRecordSchema } from './inbound-message.js';

/**
 * The AsyncAPI 3 document of the relay's public surface — the Kafka topics it reads and
 * writes and the webhook endpoints it serves — generated from the zod contracts so that it
 * cannot drift from them (`npm run schemas` writes docs/asyncapi.json; a test checks it).
 */
function schemaOf(schema: z.ZodType): Record<string, unknown> {
  const json = z.toJSONSchema(schema, { target: 'draft-7', io: 'input', unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  delete json.$schema;
  return json;
}

const stringHeader = (description: string) => ({ type: 'string', description });

/** `businessIdAbsent`: when a record of the channel has no business-id header (it is then not required). */
const relayHeaders = (extra: Record<string, unknown> = {}, required: string[] = [], businessIdAbsent?: string) => ({
  type: 'object',
  properties: {
    [HEADER.eventId]: stringHeader(
      'Stable id of the event: for webhooks the hex SHA-256 of the raw body, the same across provider redeliveries, so consumers can deduplicate.',
    ),
    [HEADER.businessId]: stringHeader(
      businessIdAbsent
        ? `The business the event belongs to; absent ${businessIdAbsent}.`
        : 'The business the event belongs to.',
    ),
    [HEADER.receivedAt]: stringHeader('When the relay received it, milliseconds since the epoch (decimal).'),
    [HEADER.contentType]: stringHeader('Media type of the value.'),
    [HEADER.schema]: stringHeader('Schema id of the value, for example delivery_status/v1.'),
    [HEADER.traceparent]: stringHeader('W3C trace context, when one came in.'),
    ...extra,
  },
  required: [
    HEADER.eventId,
    ...(businessIdAbsent ? [] : [HEADER.businessId]),
    HEADER.receivedAt,
    HEADER.contentType,
    HEADER.schema,
    ...required,
  ],
});

/** Headers of the tracker's records: no received-at (a state is derived, not received). */
const trackerHeaders = (eventId: string, businessIdAbsent?: string) => ({
  type: 'object',
  properties: {
    [HEADER.eventId]: stringHeader(eventId),
    [HEADER.businessId]: stringHeader(
      businessIdAbsent
        ? `The business the state belongs to; absent ${businessIdAbsent}.`
        : 'The business the state belongs to.',
    ),
    [HEADER.contentType]: stringHeader('Media type of the value: application/json.'),
    [HEADER.schema]: stringHeader('Schema id of the value.'),
  },
  required: [HEADER.eventId, ...(businessIdAbsent ? [] : [HEADER.businessId]), HEADER.contentType, HEADER.schema],
});

const readCommitted =
  'Written in Kafka transactions (exactly once): read it with isolation.level=read_committed (the kafkajs default; librdkafka, the Java client and @platformatic/kafka default to read_uncommitted and would show records of aborted transactions).';

/** A compacted topic: Kafka keeps at least the latest record of each key. */
const compacted = { kafka: { topicConfiguration: { 'cleanup.policy': ['compact'] }, bindingVersion: '0.5.0' } };

function messageStateJsonSchema(): Record<string, unknown> {
  const json = schemaOf(messageStateSchema);
  const properties = json.properties as Record<string, Record<string, unknown>>;
  properties.eventIds = {
    ...properties.eventIds,
    description:
      'Bookkeeping of the tracker: the event-ids it applied to this state (the last 32, most recent last), so that deduplication survives a restore. Not part of the public state; the queries leave it out.',
  };
  return json;
}

/** On a record `msgbridge dlq redrive` produced from a dead letter (absent otherwise). */
const redriveHeaders = {
  [DLQ_HEADER.redrivenFrom]: stringHeader(
    'On a redriven record: <dlq topic>/<partition>/<offset> of the dead letter it came from.',
  ),
  [DLQ_HEADER.redrivenAt]: stringHeader(
    'On a redriven record: when it was redriven, milliseconds since the epoch (decimal).',
  ),
};

const webhookHeaders = {
  ...relayHeaders(
    {
      [HEADER.signature]: stringHeader(
        'The provider signature header as received, so a consumer can re-verify the bytes.',
      ),
      ...redriveHeaders,
    },
    [HEADER.signature],
  ),
};

const kafkaKey = (description: string) => ({
  kafka: { key: { type: 'string', description }, bindingVersion: '0.5.0' },
});

/** The HTTP headers of a webhook the provider POSTs. */
const webhookHttpHeaders = {
  type: 'object',
  properties: {
    'content-type': { type: 'string', const: 'text/plain; charset=utf-8' },
    'content-length': { type: 'string' },
    'accept-encoding': { type: 'string', const: 'gzip' },
    'x-service-hmac-sha256': {
      type: 'string',
      description: 'Base64 (padded) HMAC-SHA256 of the exact raw body, keyed with the business signing secret.',
    },
  },
  required: ['x-service-hmac-sha256'],
};

/** The document, one function per section (below). */
export function buildAsyncApiDocument(version: string): Record<string, unknown> {
  return {
    asyncapi: '3.0.0',
    info: asyncApiInfo(version),
    defaultContentType: 'application/json',
    servers: {
      kafka: { host: 'localhost:9092', protocol: 'kafka', description: 'The Kafka cluster (KAFKA_BROKERS).' },
      ingress: {
        host: 'localhost:8080',
        protocol: 'http',
        description: 'The msgbridge ingress (MSGBRIDGE_INGRESS_PORT).',
      },
    },
    channels: { ...kafkaChannels(), ...webhookChannels() },
    operations: asyncApiOperations(),
    components: {
      schemas: componentSchemas(),
      messages: { ...kafkaRecordMessages(), ...webhookMessages() },
    },
  };
}

function asyncApiInfo(version: string): Record<string, unknown> {
  return {
    title: 'msgbridge',
    version,
    description:
      'Relay between a WhatsApp/SMS messaging provider and Apache Kafka. The ingress receives signed provider webhooks and publishes them to Kafka, answering 200 only once Kafka holds them (acks=all); the sender consumes send requests, calls the provider and publishes results; the tracker folds send results and delivery statuses into one state per message (message-state), keeps the outcome of requests that created no message (request-outcomes), folds inbound messages into conversation windows (conversations) and keeps each of them for the conversation view (inbound-messages), exactly once, on compacted topics.',
    license: { name: 'Apache-2.0' },
  };
}

/** The Kafka topics. */
function kafkaChannels(): Record<string, unknown> {
  return {
    messages: {
      address: 'messages',
      servers: [{ $ref: '#/servers/kafka' }],
      description:
        'Inbound customer messages and button replies, keyed by the customer (sender.id in its canonical form: a number without its leading +) so one conversation stays in order whichever form the provider wrote. Value: the webhook body, byte for byte.',
      messages: { inboundMessage: { $ref: '#/components/messages/inboundMessageRecord' } },
    },
    deliveryStatus: {
      address: 'delivery_status',
      servers: [{ $ref: '#/servers/kafka' }],
      description:
        'Delivery statuses, keyed by statusUpdate.id (the message id), co-partitioned with send-results. Value: the webhook body, byte for byte.',
      messages: { deliveryStatus: { $ref: '#/components/messages/deliveryStatusRecord' } },
    },
    webhooksDlq: {
      address: 'webhooks-dlq',
      servers: [{ $ref: '#/servers/kafka' }],
      description:
        'Correctly signed webhook bodies that are not valid JSON or do not match the schema, keyed by business id, with the reason in error-reason.',
      messages: { rejectedWebhook: { $ref: '#/components/messages/webhookDlqRecord' } },
    },
    sendRequests: {
      address: 'send-requests',
      servers: [{ $ref: '#/servers/kafka' }],
      description: 'Send requests produced by other services, keyed by the recipient.',
      messages: { sendRequest: { $ref: '#/components/messages/sendRequestRecord' } },
    },
    sendResults: {
      address: 'send-results',
      servers: [{ $ref: '#/servers/kafka' }],
      description: 'One result per send request, keyed by the created message id (the request id when there is none).',
      messages: { sendResult: { $ref: '#/components/messages/sendResultRecord' } },
    },
    sendRequestsDlq: {
      address: 'send-requests-dlq',
      servers: [{ $ref: '#/servers/kafka' }],
      description:
        'Send requests that can never be sent (invalid), with the original key and bytes and the reason in error-reason.',
      messages: { invalidSendRequest: { $ref: '#/components/messages/sendRequestDlqRecord' } },
    },
    messageState: {
      address: 'message-state',
      servers: [{ $ref: '#/servers/kafka' }],
      description: `Compacted, and deleted after tracker.stateRetentionMs (default 30 days) without an update: the current state of each message, keyed by the message id and co-partitioned with send-results and delivery_status; each change publishes the whole new state, and the status never goes back. Written by the tracker from send-results (accepted ones) and delivery_status. ${readCommitted}`,
      messages: { messageState: { $ref: '#/components/messages/messageStateRecord' } },
      bindings: compacted,
    },
    conversations: {
      address: 'conversations',
      servers: [{ $ref: '#/servers/kafka' }],
      description: `Compacted, and deleted after tracker.conversationRetentionMs (default 26 h): the 24-hour customer-service window of each conversation, keyed by <businessId>:<customer>, in the partition of the customer's messages (the hash of the customer, not of the whole key; records of earlier releases used the key's hash: a reader takes the latest window of a key across partitions). Written by the tracker from messages (the latest inbound timestamp; never moves back). ${readCommitted}`,
      messages: { conversationWindow: { $ref: '#/components/messages/conversationWindowRecord' } },
      bindings: compacted,
    },
    requestOutcomes: {
      address: 'request-outcomes',
      servers: [{ $ref: '#/servers/kafka' }],
      description: `Compacted, and deleted after tracker.stateRetentionMs (default 30 days) without an update: the last rejected or expired result of each request, keyed by the request id, in the partition of the send-results record it came from. Written by the tracker from send-results (the results that created no message), so that such a request can be found by its id; an accepted request is on message-state instead. The tracker's changelog of these outcomes. ${readCommitted}`,
      messages: { requestOutcome: { $ref: '#/components/messages/requestOutcomeRecord' } },
      bindings: compacted,
    },
    inboundMessages: {
      address: 'inbound-messages',
      servers: [{ $ref: '#/servers/kafka' }],
      description: `Compacted, and deleted after tracker.stateRetentionMs (default 30 days): each inbound message (text, button reply) as the tracker keeps it for the customer's conversation, bounded (who, when, the text cut at 1,000 characters, a button's payload), keyed by the event-id of its messages record, in the partition of its customer's messages. Written by the tracker from messages, once per event. The tracker's changelog of these records; the webhook itself stays on messages. ${readCommitted}`,
      messages: { inboundMessageRecord: { $ref: '#/components/messages/keptInboundMessageRecord' } },
      bindings: compacted,
    },
  };
}

/** The ingress's webhook addresses. */
function webhookChannels(): Record<string, unknown> {
  return {
    webhookMessagesEndpoint: {
      address: '/webhooks/{businessId}/messages',
      servers: [{ $ref: '#/servers/ingress' }],
      parameters: { businessId: { description: 'The business id the address was registered for.' } },
      messages: { inboundMessageWebhook: { $ref: '#/components/messages/inboundMessageWebhook' } },
    },
    webhookDeliveryStatusEndpoint: {
      address: '/webhooks/{businessId}/delivery_status',
      servers: [{ $ref: '#/servers/ingress' }],
      parameters: { businessId: { description: 'The business id the address was registered for.' } },
      messages: { deliveryStatusWebhook: { $ref: '#/components/messages/deliveryStatusWebhook' } },
    },
    webhookAnyTopicEndpoint: {
      address: '/webhooks/{businessId}',
      servers: [{ $ref: '#/servers/ingress' }],
      description:
        'One address for both topics: statusUpdate or topic "delivery_status" means delivery status, message means an inbound message.',
      parameters: { businessId: { description: 'The business id the address was registered for.' } },
      messages: {
        inboundMessageWebhook: { $ref: '#/components/messages/inboundMessageWebhook' },
        deliveryStatusWebhook: { $ref: '#/components/messages/deliveryStatusWebhook' },
      },
    },
  };
}

function asyncApiOperations(): Record<string, unknown> {
  return {
    receiveInboundMessageWebhook: {
      action: 'receive',
      channel: { $ref: '#/channels/webhookMessagesEndpoint' },
      summary:
        'The provider POSTs an inbound message. 200 once in Kafka; 403 bad signature; 413 too large; 415 encoded; 503 retry later.',
      bindings: { http: { method: 'POST', bindingVersion: '0.3.0' } },
    },
    receiveDeliveryStatusWebhook: {
      action: 'receive',
      channel: { $ref: '#/channels/webhookDeliveryStatusEndpoint' },
      bindings: { http: { method: 'POST', bindingVersion: '0.3.0' } },
    },
    receiveAnyTopicWebhook: {
      action: 'receive',
      channel: { $ref: '#/channels/webhookAnyTopicEndpoint' },
      bindings: { http: { method: 'POST', bindingVersion: '0.3.0' } },
    },
    publishInboundMessage: { action: 'send', channel: { $ref: '#/channels/messages' } },
    publishDeliveryStatus: { action: 'send', channel: { $ref: '#/channels/deliveryStatus' } },
    publishRejectedWebhook: { action: 'send', channel: { $ref: '#/channels/webhooksDlq' } },
    consumeSendRequest: { action: 'receive', channel: { $ref: '#/channels/sendRequests' } },
    publishSendResult: { action: 'send', channel: { $ref: '#/channels/sendResults' } },
    publishInvalidSendRequest: { action: 'send', channel: { $ref: '#/channels/sendRequestsDlq' } },
    trackSendResult: {
      action: 'receive',
      channel: { $ref: '#/channels/sendResults' },
      summary:
        'The tracker reads the send results (consumer group tracker.groupId): accepted ones into message-state, the others into request-outcomes.',
    },
    trackDeliveryStatus: {
      action: 'receive',
      channel: { $ref: '#/channels/deliveryStatus' },
      summary: 'The tracker reads the delivery statuses (consumer group tracker.groupId).',
    },
    trackInboundMessage: {
      action: 'receive',
      channel: { $ref: '#/channels/messages' },
      summary: 'The tracker reads the inbound messages (consumer group tracker.groupId).',
    },
    publishMessageState: {
      action: 'send',
      channel: { $ref: '#/channels/messageState' },
      summary: "The tracker publishes a message's new state, in the transaction that commits its input offsets.",
    },
    publishRequestOutcome: {
      action: 'send',
      channel: { $ref: '#/channels/requestOutcomes' },
      summary:
        "The tracker publishes a request's rejected or expired outcome, in the transaction that commits its input offsets.",
    },
    publishInboundMessageRecord: {
      action: 'send',
      channel: { $ref: '#/channels/inboundMessages' },
      summary:
        'The tracker publishes each new inbound message for the conversation view, in the transaction that commits its input offsets.',
    },
    publishConversationWindow: {
      action: 'send',
      channel: { $ref: '#/channels/conversations' },
      summary:
        "The tracker publishes a conversation's moved window, in the transaction that commits its input offsets.",
    },
  };
}

function componentSchemas(): Record<string, unknown> {
  return {
    InboundMessageEvent: schemaOf(inboundMessageEventSchema),
    DeliveryStatusEvent: schemaOf(deliveryStatusEventSchema),
    SendRequest: schemaOf(sendRequestSchema),
    SendResult: schemaOf(sendResultSchema),
    ProviderError: schemaOf(providerErrorSchema),
    MessageState: messageStateJsonSchema(),
    ConversationWindow: schemaOf(conversationWindowSchema),
    RequestOutcome: schemaOf(requestOutcomeSchema),
    InboundMessageRecord: schemaOf(inboundMessageRecordSchema),
  };
}

/** The records of the Kafka topics. */
function kafkaRecordMessages(): Record<string, unknown> {
  return {
    inboundMessageRecord: {
      name: SCHEMA_ID.messages,
      contentType: 'application/json',
      headers: webhookHeaders,
      payload: { $ref: '#/components/schemas/InboundMessageEvent' },
      bindings: kafkaKey(
        'the customer: sender.id in its canonical form (a number without its leading +, any other id as it is), so both forms of one customer are one partition, in order',
      ),
    },
    deliveryStatusRecord: {
      name: SCHEMA_ID.delivery_status,
      contentType: 'application/json',
      headers: webhookHeaders,
      payload: { $ref: '#/components/schemas/DeliveryStatusEvent' },
      bindings: kafkaKey('statusUpdate.id, the message id'),
    },
    webhookDlqRecord: {
      name: SCHEMA_ID.webhooksDlq,
      contentType: 'application/octet-stream',
      headers: relayHeaders(
        {
          [HEADER.errorReason]: stringHeader('Why the body was rejected.'),
          [HEADER.signature]: stringHeader('The signature as received.'),
          [DLQ_HEADER.errorCode]: stringHeader(
            'The reason as a code (for example SCHEMA_INVALID); absent on records of 0.1.0.',
          ),
          [DLQ_HEADER.webhookTopic]: stringHeader(
            'The topic of the webhook address the body was posted to, when it named one.',
          ),
          [DLQ_HEADER.originalTopic]: stringHeader(
            'The Kafka topic the event was meant for, when it could be told; absent on records of 0.1.0.',
          ),
        },
        [HEADER.errorReason],
      ),
      payload: { description: 'The raw webhook body, byte for byte.' },
      bindings: kafkaKey('business id'),
    },
    sendRequestRecord: {
      name: SCHEMA_ID.sendRequest,
      contentType: 'application/json',
      headers: {
        type: 'object',
        properties: {
          [HEADER.contentType]: stringHeader('Media type of the value: application/json.'),
          [HEADER.schema]: stringHeader(
            'send-request/v1 when msgbridge send wrote it; other producers may leave it out.',
          ),
          [HEADER.traceparent]: stringHeader('W3C trace context; the sender continues it.'),
          ...redriveHeaders,
        },
      },
      payload: { $ref: '#/components/schemas/SendRequest' },
      bindings: kafkaKey('the recipient'),
    },
    sendResultRecord: {
      name: SCHEMA_ID.sendResult,
      contentType: 'application/json',
      headers: relayHeaders(
        {},
        [],
        'on the rejected result of a dead-lettered request whose businessId could not be read',
      ),
      payload: { $ref: '#/components/schemas/SendResult' },
      bindings: kafkaKey('the created message id; the request id when there is none'),
    },
    sendRequestDlqRecord: {
      name: SCHEMA_ID.sendRequestsDlq,
      headers: relayHeaders(
        {
          [HEADER.errorReason]: stringHeader('Why the request can never be sent.'),
          [DLQ_HEADER.errorCode]: stringHeader('The reason as a code (for example RELAY_UNKNOWN_BUSINESS).'),
          [DLQ_HEADER.sourceTopic]: stringHeader('The topic the request was read from.'),
          [DLQ_HEADER.sourcePartition]: stringHeader('Its partition.'),
          [DLQ_HEADER.sourceOffset]: stringHeader('Its offset.'),
          [DLQ_HEADER.dlqValue]: stringHeader(
            '"reference" when the request was too large for the DLQ topic and the value only points to the source record.',
          ),
        },
        [HEADER.errorReason],
        'when the request has no businessId that could be read',
      ),
      payload: { description: 'The original bytes of the request.' },
      bindings: kafkaKey('the original key'),
    },
    messageStateRecord: {
      name: SCHEMA_ID.messageState,
      contentType: 'application/json',
      headers: trackerHeaders('Id of this version of the state: hex SHA-256 of the message id, events and updatedAt.'),
      payload: { $ref: '#/components/schemas/MessageState' },
      bindings: kafkaKey('the message id'),
    },
    conversationWindowRecord: {
      name: SCHEMA_ID.conversations,
      contentType: 'application/json',
      headers: trackerHeaders('Id of this version of the window: hex SHA-256 of the key and lastInboundAt.'),
      payload: { $ref: '#/components/schemas/ConversationWindow' },
      bindings: kafkaKey(
        "<businessId>:<customer>, the customer being the sender.id of the inbound messages in its canonical form (a number without its leading +; records of earlier releases kept the provider's form)",
      ),
    },
    requestOutcomeRecord: {
      name: SCHEMA_ID.requestOutcomes,
      contentType: 'application/json',
      headers: trackerHeaders(
        'Id of this version of the outcome: hex SHA-256 of the request id, outcome and time.',
        'when the result named no business (a dead letter whose business could not be read)',
      ),
      payload: { $ref: '#/components/schemas/RequestOutcome' },
      bindings: kafkaKey('the request id'),
    },
    keptInboundMessageRecord: {
      name: SCHEMA_ID.inboundMessages,
      contentType: 'application/json',
      headers: trackerHeaders('Id of the record: hex SHA-256 of the event-id of the messages record it summarises.'),
      payload: { $ref: '#/components/schemas/InboundMessageRecord' },
      bindings: kafkaKey('the event-id of the messages record'),
    },
  };
}

/** The webhook bodies the provider POSTs. */
function webhookMessages(): Record<string, unknown> {
  return {
    inboundMessageWebhook: {
      name: 'inbound-message-webhook',
      contentType: 'text/plain',
      headers: webhookHttpHeaders,
      payload: { $ref: '#/components/schemas/InboundMessageEvent' },
    },
    deliveryStatusWebhook: {
      name: 'delivery-status-webhook',
      contentType: 'text/plain',
      headers: webhookHttpHeaders,
      payload: { $ref: '#/components/schemas/DeliveryStatusEvent' },
    },
  };
}
