import { randomUUID } from 'node:crypto';
import { hmacBase64 } from '../helpers/signing.js';

/** Webhook bodies in the provider's shapes (as its API documentation gives them), with a few extra fields. */
export function statusEvent(messageId: string, status = 'delivered', extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    topic: 'delivery_status',
    timestamp: '1700000001',
    sender: { channelType: 'whatsapp', id: '+15550001111' },
    recipient: { channelType: 'whatsapp', id: '15550002222' },
    statusUpdate: {
      id: messageId,
      status,
      error:
        status === 'delivery_failed'
          ? {
              message: 'failed',
              type: 'ERROR_TYPE_INVALID_REQUEST',
              code: 'ERROR_CODE_MESSAGE_TEMPLATE_INPUT_INVALID',
              userTitle: 't',
              userMessage: 'm',
              cntTraceId: '123',
              details: {},
            }
          : null,
    },
    ...extra,
  });
}

export function inboundEvent(senderId: string, text = 'hello', extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    timestamp: '1700000000',
    sender: { channelType: 'whatsapp', id: senderId, name: null },
    recipient: { channelType: 'whatsapp', id: '+15550001111' },
    message: { text },
    ...extra,
  });
}

export function messageId(): string {
  return `01J${randomUUID().replace(/-/g, '').slice(0, 23).toUpperCase()}`;
}

export function signedHeaders(
  secret: string,
  body: string | Buffer,
  extra: Record<string, string> = {},
): Record<string, string> {
  return { 'content-type': 'text/plain; charset=utf-8', 'x-service-hmac-sha256': hmacBase64(secret, body), ...extra };
}
