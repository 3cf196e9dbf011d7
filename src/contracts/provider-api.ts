import { z } from 'zod';
import { partySchema, recipientNumber } from './common.js';
import { templateParameterSchema } from './send.js';
import { webhookTopicSchema } from './webhook-events.js';

/**
 * The provider's two send operations and the last segment of their paths, `POST /v1/businesses/{id}/send/{segment}`.
 */
export type SendOperation = 'text' | 'template';
export const SEND_PATH_SEGMENT: Record<SendOperation, string> = {
  text: 'messages',
  template: 'whatsapp_templated_messages',
};

/** Body of `POST /v1/businesses/{id}/send/messages`. */
export const sendTextBodySchema = z.looseObject({
  recipient: partySchema.extend({ id: recipientNumber }),
  message: z.looseObject({ text: z.string() }),
});

/** Body of `POST /v1/businesses/{id}/send/whatsapp_templated_messages`. */
export const sendTemplateBodySchema = z.looseObject({
  parameters: z.array(templateParameterSchema),
  number: recipientNumber,
  templateName: z.string().min(1),
});

/** Answer of both send operations: any 2xx with an `id` is success. */
export const createdMessageSchema = z.looseObject({ id: z.string().min(1) });

/** Body of `POST /v1/businesses/{id}/create/webhooks`. */
export const webhookRegistrationSchema = z.object({
  topic: webhookTopicSchema,
  address: z.url({ protocol: /^https?$/ }),
});
export type WebhookRegistration = z.infer<typeof webhookRegistrationSchema>;
