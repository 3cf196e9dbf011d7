import { z } from 'zod';
import { epochSecondsString, partySchema, providerErrorSchema } from './common.js';

export const WEBHOOK_TOPICS = ['messages', 'delivery_status'] as const;
export type WebhookTopic = (typeof WEBHOOK_TOPICS)[number];
export const webhookTopicSchema = z.enum(WEBHOOK_TOPICS);

export const DELIVERY_STATUSES = ['sent', 'delivered', 'read', 'delivery_failed'] as const;
export type DeliveryStatus = (typeof DELIVERY_STATUSES)[number];

/**
 * Inbound customer message (topic `messages`). The example carries no `topic`; inbound
 * messages may carry attachments, location, button responses, context, callbackData...
 * all kept. `message.text` is the only body field the contract names.
 */
export const inboundMessageEventSchema = z.looseObject({
  topic: z.literal('messages').optional(),
  timestamp: epochSecondsString,
  sender: partySchema,
  recipient: partySchema,
  message: z.looseObject({
    text: z.string().optional(),
  }),
});
export type InboundMessageEvent = z.infer<typeof inboundMessageEventSchema>;

export const statusUpdateSchema = z
  .looseObject({
    id: z.string().min(1),
    status: z.enum(DELIVERY_STATUSES),
    error: providerErrorSchema.nullable().optional(),
  })
  .superRefine((update, ctx) => {
    if (update.status === 'delivery_failed' && (update.error === null || update.error === undefined)) {
      ctx.addIssue({
        code: 'custom',
        path: ['error'],
        message: 'a delivery_failed status must carry the error object',
      });
    }
    if (update.status !== 'delivery_failed' && update.error !== null && update.error !== undefined) {
      ctx.addIssue({ code: 'custom', path: ['error'], message: `error must be null when status is ${update.status}` });
    }
  });

/** Delivery status event (topic `delivery_status`). `metadata` may appear anywhere; kept. */
export const deliveryStatusEventSchema = z.looseObject({
  topic: z.literal('delivery_status').optional(),
  timestamp: epochSecondsString,
  sender: partySchema,
  recipient: partySchema,
  statusUpdate: statusUpdateSchema,
});
export type DeliveryStatusEvent = z.infer<typeof deliveryStatusEventSchema>;

/**
 * Which topic an event addressed to `POST /webhooks/{businessId}` belongs to:
 * `topic: "delivery_status"` or a `statusUpdate` means delivery status, a `message` means
 * an inbound message. Undefined when the body says neither.
 */
export function detectWebhookTopic(body: unknown): WebhookTopic | undefined {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined;
  const record = body as Record<string, unknown>;
  if (record.topic === 'delivery_status' || 'statusUpdate' in record) return 'delivery_status';
  if (record.topic === 'messages' || 'message' in record) return 'messages';
  return undefined;
}

export const webhookEventSchemas = {
  messages: inboundMessageEventSchema,
  delivery_status: deliveryStatusEventSchema,
} as const;
