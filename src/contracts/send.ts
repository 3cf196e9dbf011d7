import { z } from 'zod';
import { partySchema, providerErrorSchema, recipientNumber } from './common.js';
import { CHANNEL, channelOf } from './customer-id.js';

const requestIdSchema = z.string().min(1).max(256);
const businessIdSchema = z.string().min(1).max(128);

/** Longest time-to-live a request may ask for: a week, the longest a send is worth making late. */
export const MAX_TTL_MS = 7 * 24 * 3600 * 1000;

export const templateParameterSchema = z.looseObject({
  name: z.string().min(1),
  value: z.string(),
});

/**
 * Fields of a request that belong to the relay and never reach the provider: `expiresAt` (ISO
 * time with an offset) or `ttlMs` (from the record's timestamp) say when it stops being worth
 * sending; `conversationWindow: "ignore"` sends a text whatever the sender knows of the
 * customer's 24-hour window (src/sender/README.md "Conversation window"); it changes nothing
 * for a template, which may always be sent.
 */
const relayFields = {
  requestId: requestIdSchema,
  businessId: businessIdSchema.optional(),
  expiresAt: z.iso
    .datetime({ offset: true, message: 'expected an ISO 8601 time with a zone (2026-11-23T10:00:00Z)' })
    .optional(),
  ttlMs: z
    .number()
    .int('expected whole milliseconds')
    .positive('expected a positive number of milliseconds')
    .max(MAX_TTL_MS, `at most ${MAX_TTL_MS} (7 days)`)
    .optional(),
  conversationWindow: z
    .enum(['ignore'], {
      error: 'expected "ignore" (send the text whatever the conversation window), or leave the field out',
    })
    .optional(),
};

/**
 * The template a text request names to be sent instead when the customer's 24-hour window is
 * known closed (`sentAs: "template"` in the result). Other fields (`language`...) pass through
 * to the provider with it.
 */
export const fallbackTemplateSchema = z.looseObject(
  {
    templateName: z
      .string({ error: 'expected the name of an approved template' })
      .min(1, 'expected the name of an approved template'),
    parameters: z.array(templateParameterSchema).max(100).default([]),
  },
  { error: 'expected an object {"templateName": "...", "parameters": [{"name": "...", "value": "..."}]}' },
);
export type FallbackTemplate = z.infer<typeof fallbackTemplateSchema>;

/** Text send request. Unknown fields (callbackData, sender, campaignName...) pass through to the provider. */
export const textSendRequestSchema = z.looseObject({
  ...relayFields,
  type: z.literal('text'),
  recipient: partySchema.extend({ id: recipientNumber }),
  message: z.looseObject({ text: z.string().min(1, 'message text must not be empty') }),
  fallbackTemplate: fallbackTemplateSchema.optional(),
});

/** Template send request. `language` and other optional fields pass through. */
export const templateSendRequestSchema = z.looseObject({
  ...relayFields,
  type: z.literal('template'),
  number: recipientNumber,
  templateName: z.string().min(1),
  parameters: z.array(templateParameterSchema).max(100).default([]),
  fallbackTemplate: z
    .never({
      error: 'fallbackTemplate applies to text requests only: a template is sent whatever the conversation window',
    })
    .optional(),
});

export const sendRequestSchema = z.discriminatedUnion('type', [textSendRequestSchema, templateSendRequestSchema]);
export type TextSendRequest = z.infer<typeof textSendRequestSchema>;
export type TemplateSendRequest = z.infer<typeof templateSendRequestSchema>;
export type SendRequest = z.infer<typeof sendRequestSchema>;

export function sendRequestRecipient(request: SendRequest): string {
  return request.type === 'text' ? request.recipient.id : request.number;
}

/** The channel a request goes out on: a text's `recipient.channelType` (lower case); a template is WhatsApp's. */
export function sendRequestChannel(request: SendRequest): string {
  return request.type === 'text' ? channelOf(request.recipient.channelType) : CHANNEL.whatsapp;
}

/**
 * What a request asked to send, as its result carries it (`content`): the text, or the
 * template's name and parameters, and for a text its fallback template. Bounded by the writer
 * (`REQUEST_CONTENT_LIMITS`, `requestContentOf`) so that a result stays small: `truncated` says
 * something was cut. Absent in results of releases before it existed, and in the rejected result
 * of a request that could not be read: "not recorded". Read leniently (no length checks): a
 * later release may keep more.
 */
export const REQUEST_CONTENT_LIMITS = {
  textChars: 1000,
  templateNameChars: 256,
  parameters: 20,
  parameterNameChars: 64,
  parameterValueChars: 256,
} as const;

const contentParameterSchema = z.object({ name: z.string(), value: z.string() });
const contentTemplateSchema = z.object({
  templateName: z.string(),
  parameters: z.array(contentParameterSchema).default([]),
});

export const requestContentSchema = z.object({
  text: z.string().optional(),
  templateName: z.string().optional(),
  parameters: z.array(contentParameterSchema).optional(),
  fallbackTemplate: contentTemplateSchema.optional(),
  /** True when the writer cut something to its limits (a text, a value, the list of parameters). */
  truncated: z.boolean().optional(),
});
export type RequestContent = z.infer<typeof requestContentSchema>;

/** A request's content within REQUEST_CONTENT_LIMITS (idempotent: a bounded content comes back equal). */
export function requestContentOf(request: SendRequest): RequestContent {
  if (request.type === 'template')
    return boundedContent({ templateName: request.templateName, parameters: request.parameters });
  const fallback = request.fallbackTemplate;
  return boundedContent({
    text: request.message.text,
    ...(fallback ? { fallbackTemplate: { templateName: fallback.templateName, parameters: fallback.parameters } } : {}),
  });
}

/** Cuts a content to REQUEST_CONTENT_LIMITS, marking it `truncated` when anything was cut. */
export function boundedContent(content: RequestContent): RequestContent {
  const L = REQUEST_CONTENT_LIMITS;
  let truncated = content.truncated === true;
  const cut = (text: string, max: number) => {
    if (text.length <= max) return text;
    truncated = true;
    return `${text.slice(0, max - 1)}…`;
  };
  const params = (list: { name: string; value: string }[]) => {
    if (list.length > L.parameters) truncated = true;
    return list.slice(0, L.parameters).map((p) => ({
      name: cut(String(p.name), L.parameterNameChars),
      value: cut(String(p.value), L.parameterValueChars),
    }));
  };
  const out: RequestContent = {};
  if (content.text !== undefined) out.text = cut(content.text, L.textChars);
  if (content.templateName !== undefined) out.templateName = cut(content.templateName, L.templateNameChars);
  if (content.parameters !== undefined) out.parameters = params(content.parameters);
  if (content.fallbackTemplate !== undefined) {
    out.fallbackTemplate = {
      templateName: cut(content.fallbackTemplate.templateName, L.templateNameChars),
      parameters: params(content.fallbackTemplate.parameters ?? []),
    };
  }
  if (truncated) out.truncated = true;
  return out;
}

/**
 * What went out when it was not what the request asked for: `"template"` when a text request's
 * `fallbackTemplate` was sent instead, its customer's conversation window being closed. Absent
 * when the request was sent as it is.
 */
const sentAsSchema = z.enum(['text', 'template']);

export const acceptedSendResultSchema = z.object({
  requestId: requestIdSchema,
  businessId: businessIdSchema,
  outcome: z.literal('accepted'),
  messageId: z.string().min(1),
  type: z.enum(['text', 'template']),
  recipient: z.string(),
  /**
   * The channel it went out on: the text's `recipient.channelType` (lower case), `whatsapp` for
   * a template. Absent in results of releases before it: not recorded. On `sms` the provider
   * sends no delivery status: `accepted` is the last state such a message has.
   */
  channel: z.string().min(1).optional(),
  attempts: z.number().int().min(1),
  /**
   * An earlier attempt may have created another message for this request (lost answer). Absent
   * in results of releases before it existed: read as false (they retried only what was answered).
   */
  maybeSent: z.boolean().default(false),
  acceptedAt: z.iso.datetime(),
  sentAs: sentAsSchema.optional(),
  content: requestContentSchema.optional(),
});

export const sendFailureSchema = providerErrorSchema.extend({
  httpStatus: z.number().int().optional(),
  retriable: z.boolean(),
  /** Set when an attempt may have created the message: do not resend blindly. */
  maybeSent: z.boolean().optional(),
});

export const rejectedSendResultSchema = z.object({
  requestId: requestIdSchema,
  businessId: businessIdSchema.optional(),
  outcome: z.literal('rejected'),
  type: z.enum(['text', 'template']).optional(),
  recipient: z.string().optional(),
  attempts: z.number().int().min(0),
  /**
   * An attempt may have reached the provider without an answer: the message may exist. Absent (earlier releases):
   * false.
   */
  maybeSent: z.boolean().default(false),
  rejectedAt: z.iso.datetime().optional(),
  error: sendFailureSchema,
  sentAs: sentAsSchema.optional(),
  /** Absent when the request could not be read (a dead letter), or in results of earlier releases. */
  content: requestContentSchema.optional(),
});

export const expiredSendResultSchema = z.object({
  requestId: requestIdSchema,
  businessId: businessIdSchema,
  outcome: z.literal('expired'),
  type: z.enum(['text', 'template']),
  recipient: z.string(),
  attempts: z.number().int().min(0),
  /** Absent (earlier releases): false. */
  maybeSent: z.boolean().default(false),
  /** When the request stopped being worth sending. */
  expiresAt: z.iso.datetime(),
  /** What set that time: the request's `expiresAt` or `ttlMs`, or the sender's `maxRequestAgeMs`. */
  expiredBy: z.enum(['expiresAt', 'ttlMs', 'maxRequestAgeMs']),
  expiredAt: z.iso.datetime(),
  sentAs: sentAsSchema.optional(),
  content: requestContentSchema.optional(),
});

export const sendResultSchema = z.discriminatedUnion('outcome', [
  acceptedSendResultSchema,
  rejectedSendResultSchema,
  expiredSendResultSchema,
]);
export type AcceptedSendResult = z.infer<typeof acceptedSendResultSchema>;
export type RejectedSendResult = z.infer<typeof rejectedSendResultSchema>;
export type ExpiredSendResult = z.infer<typeof expiredSendResultSchema>;
export type SendResult = z.infer<typeof sendResultSchema>;
export type SendFailure = z.infer<typeof sendFailureSchema>;
