import { z } from 'zod';
import { partySchema, providerErrorSchema, recipientNumber } from './common.js';

const requestIdSchema = z.string().min(1).max(256);
const businessIdSchema = z.string().min(1).max(128);

/** Text send request. Unknown fields (callbackData, sender, campaignName...) pass through to the provider. */
export const textSendRequestSchema = z.looseObject({
  requestId: requestIdSchema,
  businessId: businessIdSchema.optional(),
  type: z.literal('text'),
  recipient: partySchema.extend({ id: recipientNumber }),
  message: z.looseObject({ text: z.string().min(1, 'message text must not be empty') }),
});

export const templateParameterSchema = z.looseObject({
  name: z.string().min(1),
  value: z.string(),
});

/** Template send request. `language` and other optional fields pass through. */
export const templateSendRequestSchema = z.looseObject({
  requestId: requestIdSchema,
  businessId: businessIdSchema.optional(),
  type: z.literal('template'),
  number: recipientNumber,
  templateName: z.string().min(1),
  parameters: z.array(templateParameterSchema).max(100).default([]),
});

export const sendRequestSchema = z.discriminatedUnion('type', [textSendRequestSchema, templateSendRequestSchema]);
export type TextSendRequest = z.infer<typeof textSendRequestSchema>;
export type TemplateSendRequest = z.infer<typeof templateSendRequestSchema>;
export type SendRequest = z.infer<typeof sendRequestSchema>;

export function sendRequestRecipient(request: SendRequest): string {
  return request.type === 'text' ? request.recipient.id : request.number;
}

export const acceptedSendResultSchema = z.object({
  requestId: requestIdSchema,
  businessId: businessIdSchema,
  outcome: z.literal('accepted'),
  messageId: z.string().min(1),
  type: z.enum(['text', 'template']),
  recipient: z.string(),
  attempts: z.number().int().min(1),
  acceptedAt: z.iso.datetime(),
});

export const sendFailureSchema = providerErrorSchema.extend({
  httpStatus: z.number().int().optional(),
  retriable: z.boolean(),
});

export const rejectedSendResultSchema = z.object({
  requestId: requestIdSchema,
  businessId: businessIdSchema.optional(),
  outcome: z.literal('rejected'),
  type: z.enum(['text', 'template']).optional(),
  recipient: z.string().optional(),
  attempts: z.number().int().min(0),
  rejectedAt: z.iso.datetime().optional(),
  error: sendFailureSchema,
});

export const sendResultSchema = z.discriminatedUnion('outcome', [acceptedSendResultSchema, rejectedSendResultSchema]);
export type AcceptedSendResult = z.infer<typeof acceptedSendResultSchema>;
export type RejectedSendResult = z.infer<typeof rejectedSendResultSchema>;
export type SendResult = z.infer<typeof sendResultSchema>;
export type SendFailure = z.infer<typeof sendFailureSchema>;
