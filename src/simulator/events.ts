import { eventIdOf, type DeliveryStatus, type ProviderError, type WebhookTopic } from '../contracts/index.js';

/** A webhook event as delivered: its topic, its exact body text and its id. */
export interface SimEvent {
  businessId: string;
  topic: WebhookTopic;
  body: string;
  /** Hex SHA-256 of the body: the same `event-id` the ingress derives. */
  eventId: string;
  /** `statusUpdate.id` for status events. */
  messageId: string | null;
  /** `statusUpdate.status` for status events. */
  status: DeliveryStatus | null;
}

export function epochSeconds(ms: number): string {
  return String(Math.floor(ms / 1000));
}

/** A delivery status event, fields in the spec's order. `callbackData` of the send is echoed back. */
export function deliveryStatusEvent(input: {
  businessId: string;
  businessNumber: string;
  recipient: string;
  channelType: string;
  messageId: string;
  status: DeliveryStatus;
  error: ProviderError | null;
  at: number;
  callbackData?: unknown;
}): SimEvent {
  const body = JSON.stringify({
    topic: 'delivery_status',
    timestamp: epochSeconds(input.at),
    sender: { channelType: input.channelType, id: input.businessNumber },
    recipient: { channelType: input.channelType, id: input.recipient },
    statusUpdate: { id: input.messageId, status: input.status, error: input.error },
    ...(input.callbackData !== undefined ? { callbackData: input.callbackData } : {}),
  });
  return {
    businessId: input.businessId,
    topic: 'delivery_status',
    body,
    eventId: eventIdOf(body),
    messageId: input.messageId,
    status: input.status,
  };
}

/**
 * An inbound customer message: no `topic` field, as in the spec's example. A button reply
 * (`button`) is the same event with `isButtonResponse: true`, the button's text as the message
 * text and its payload, when it has one, in `callbackData` (the provider's documented behaviour: the payload
 * comes in the text or in `context`/`callbackData`).
 */
export function inboundMessageEvent(input: {
  businessId: string;
  businessNumber: string;
  from: string;
  name?: string | undefined;
  text: string;
  at: number;
  button?: { payload?: string | undefined } | undefined;
}): SimEvent {
  const body = JSON.stringify({
    timestamp: epochSeconds(input.at),
    sender: { channelType: 'whatsapp', id: input.from, ...(input.name !== undefined ? { name: input.name } : {}) },
    recipient: { channelType: 'whatsapp', id: input.businessNumber },
    message: { text: input.text },
    ...(input.button
      ? {
          isButtonResponse: true,
          ...(input.button.payload !== undefined ? { callbackData: input.button.payload } : {}),
        }
      : {}),
  });
  return {
    businessId: input.businessId,
    topic: 'messages',
    body,
    eventId: eventIdOf(body),
    messageId: null,
    status: null,
  };
}
