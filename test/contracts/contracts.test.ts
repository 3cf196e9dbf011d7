import { describe, expect, it } from 'vitest';
import {
  deliveryStatusEventSchema,
  detectWebhookTopic,
  inboundMessageEventSchema,
  partySchema,
  providerErrorSchema,
  sendRequestSchema,
  sendResultSchema,
} from '../../src/contracts/index.js';

// The example shapes of the provider's API documentation, and the extra fields it sends in practice.
const party = { channelType: 'whatsapp', id: '+15550001111' };
const inbound = {
  timestamp: '1700000000',
  sender: { channelType: 'whatsapp', id: '+15550002222' },
  recipient: party,
  message: { text: 'Hello' },
};
const errorObject = {
  message: 'template inputs invalid',
  type: 'ERROR_TYPE_INVALID_REQUEST',
  code: 'ERROR_CODE_MESSAGE_TEMPLATE_INPUT_INVALID',
  userTitle: 'Invalid template',
  userMessage: 'Please pass the trace id 1234567 to the team',
  cntTraceId: '1234567',
  details: {},
};
const status = (s: string, error: unknown = null) => ({
  topic: 'delivery_status',
  timestamp: '1700000001',
  sender: party,
  recipient: { channelType: 'whatsapp', id: '15550002222' },
  statusUpdate: { id: '01HZY3J5V7W9X1Y3Z5A7B9C1D3', status: s, error },
});

function without<T extends object>(value: T, key: string): Record<string, unknown> {
  const copy: Record<string, unknown> = { ...(value as Record<string, unknown>) };
  delete copy[key];
  return copy;
}

describe('party', () => {
  it('accepts both address forms and keeps unknown fields such as name', () => {
    expect(partySchema.parse({ ...party, name: null, extra: 1 })).toEqual({ ...party, name: null, extra: 1 });
    expect(partySchema.parse({ channelType: 'whatsapp', id: '4915112345678', name: 'Ana' }).name).toBe('Ana');
  });
  it.each([
    ['missing id', { channelType: 'whatsapp' }],
    ['empty id', { channelType: 'whatsapp', id: '' }],
    ['numeric id', { channelType: 'whatsapp', id: 15550001111 }],
    ['missing channelType', { id: '+1555' }],
    ['name not a string', { ...party, name: 5 }],
  ])('rejects %s', (_, value) => {
    expect(partySchema.safeParse(value).success).toBe(false);
  });
});

describe('inbound message event', () => {
  it('accepts the spec example', () => {
    expect(inboundMessageEventSchema.parse(inbound)).toEqual(inbound);
  });
  it('keeps the fields comparable providers add', () => {
    const rich = {
      ...inbound,
      sender: { ...inbound.sender, name: 'Ana' },
      message: {
        text: 'see',
        attachments: [{ type: 'image', url: 'https://x/y.png' }],
        location: { lat: 1, lng: 2 },
        isButtonResponse: true,
      },
      context: { id: 'prev' },
      callbackData: 'cb',
      referral: null,
    };
    expect(inboundMessageEventSchema.parse(rich)).toEqual(rich);
  });
  it.each([
    ['timestamp as number', { ...inbound, timestamp: 1700000000 }],
    ['timestamp not digits', { ...inbound, timestamp: '2024-01-01' }],
    ['missing timestamp', without(inbound, 'timestamp')],
    ['missing sender', without(inbound, 'sender')],
    ['bad recipient', { ...inbound, recipient: 'biz' }],
    ['missing message', without(inbound, 'message')],
    ['text not a string', { ...inbound, message: { text: 42 } }],
    ['wrong topic', { ...inbound, topic: 'delivery_status' }],
  ])('rejects %s', (_, value) => {
    expect(inboundMessageEventSchema.safeParse(value).success).toBe(false);
  });
});

describe('delivery status event', () => {
  it.each(['sent', 'delivered', 'read'])('accepts status %s with a null error', (s) => {
    expect(deliveryStatusEventSchema.parse(status(s))).toEqual(status(s));
  });
  it('accepts delivery_failed with the full error object', () => {
    expect(deliveryStatusEventSchema.parse(status('delivery_failed', errorObject)).statusUpdate.error).toEqual(
      errorObject,
    );
  });
  it('keeps metadata wherever it appears, null included', () => {
    const event = {
      ...status('sent'),
      metadata: null,
      statusUpdate: { ...status('sent').statusUpdate, metadata: { a: 1 } },
    };
    expect(deliveryStatusEventSchema.parse(event)).toEqual(event);
  });
  it('accepts an event without the topic field', () => {
    expect(deliveryStatusEventSchema.safeParse(without(status('read'), 'topic')).success).toBe(true);
  });
  it.each([
    ['unknown status', status('bounced')],
    ['delivery_failed without error', status('delivery_failed', null)],
    ['error on a sent status', status('sent', errorObject)],
    ['error missing its code', status('delivery_failed', without(errorObject, 'code'))],
    ['missing statusUpdate.id', { ...status('sent'), statusUpdate: { status: 'sent', error: null } }],
    ['empty statusUpdate.id', { ...status('sent'), statusUpdate: { id: '', status: 'sent', error: null } }],
    ['wrong topic', { ...status('sent'), topic: 'messages' }],
    ['missing recipient', without(status('sent'), 'recipient')],
  ])('rejects %s', (_, value) => {
    expect(deliveryStatusEventSchema.safeParse(value).success).toBe(false);
  });
});

describe('provider error object', () => {
  it('accepts the full object and keeps extra fields', () => {
    expect(providerErrorSchema.parse({ ...errorObject, extra: true })).toEqual({ ...errorObject, extra: true });
  });
  it.each(['message', 'type', 'code'])('requires %s', (field) => {
    expect(providerErrorSchema.safeParse(without(errorObject, field)).success).toBe(false);
  });
});

describe('topic detection for the per-business address', () => {
  it.each([
    [status('sent'), 'delivery_status'],
    [without(status('sent'), 'topic'), 'delivery_status'],
    [{ topic: 'delivery_status' }, 'delivery_status'],
    [inbound, 'messages'],
    [{ foo: 1 }, undefined],
    [[1, 2], undefined],
    ['text', undefined],
    [null, undefined],
  ])('%j → %s', (body, topic) => {
    expect(detectWebhookTopic(body)).toBe(topic);
  });
});

describe('send request', () => {
  const text = {
    requestId: 'order-42',
    businessId: 'biz_1',
    type: 'text',
    recipient: { channelType: 'whatsapp', id: '+15550002222' },
    message: { text: 'Your order shipped' },
  };
  const template = {
    requestId: 'r-2',
    type: 'template',
    number: '+15550002222',
    templateName: 'order_update',
    parameters: [{ name: 'order', value: '42' }],
  };
  it('accepts both example requests and passes unknown fields through', () => {
    expect(sendRequestSchema.parse({ ...text, callbackData: 'x' })).toEqual({ ...text, callbackData: 'x' });
    expect(sendRequestSchema.parse({ ...template, language: 'en' })).toEqual({ ...template, language: 'en' });
  });
  it('defaults template parameters to an empty list', () => {
    expect(sendRequestSchema.parse(without(template, 'parameters'))).toMatchObject({ parameters: [] });
  });
  it.each([
    ['missing requestId', without(text, 'requestId')],
    ['empty requestId', { ...text, requestId: '' }],
    ['unknown type', { ...text, type: 'image' }],
    ['missing type', without(text, 'type')],
    ['text without message', without(text, 'message')],
    ['empty text', { ...text, message: { text: '' } }],
    ['bad phone number', { ...text, recipient: { channelType: 'whatsapp', id: 'not-a-number' } }],
    ['template without number', without(template, 'number')],
    ['template without templateName', without(template, 'templateName')],
    ['parameter without name', { ...template, parameters: [{ value: '1' }] }],
    ['parameter value not a string', { ...template, parameters: [{ name: 'a', value: 1 }] }],
    ['businessId not a string', { ...text, businessId: 7 }],
  ])('rejects %s', (_, value) => {
    expect(sendRequestSchema.safeParse(value).success).toBe(false);
  });
});

describe('send result', () => {
  it('accepts the accepted, rejected and expired examples', () => {
    const accepted = {
      requestId: 'r',
      businessId: 'b',
      outcome: 'accepted',
      messageId: '01J',
      type: 'text',
      recipient: '+15550002222',
      attempts: 1,
      maybeSent: false,
      acceptedAt: new Date().toISOString(),
    };
    const rejected = {
      requestId: 'r',
      outcome: 'rejected',
      attempts: 3,
      maybeSent: false,
      error: {
        httpStatus: 400,
        type: 'ERROR_TYPE_INVALID_REQUEST',
        code: 'ERROR_CODE_X',
        message: 'm',
        cntTraceId: '1',
        retriable: false,
      },
    };
    const at = new Date().toISOString();
    const expired = {
      requestId: 'r',
      businessId: 'b',
      outcome: 'expired',
      type: 'text',
      recipient: '+15550002222',
      attempts: 0,
      maybeSent: false,
      expiresAt: at,
      expiredBy: 'ttlMs',
      expiredAt: at,
    };
    expect(sendResultSchema.parse(accepted)).toEqual(accepted);
    expect(sendResultSchema.parse(rejected)).toEqual(rejected);
    expect(sendResultSchema.parse(expired)).toEqual(expired);
    expect(sendResultSchema.safeParse({ ...expired, expiredBy: 'whim' }).success).toBe(false);
    // The sender writes maybeSent on every result; a result of a release before it existed is
    // still read (compatibility rule, docs/topics.md), as false.
    const { maybeSent: _absent, ...previousRelease } = accepted;
    expect(sendResultSchema.parse(previousRelease)).toEqual({ ...previousRelease, maybeSent: false });
    expect(sendResultSchema.parse({ ...rejected, maybeSent: undefined })).toMatchObject({ maybeSent: false });
    expect(sendResultSchema.safeParse({ ...rejected, maybeSent: 'no' }).success).toBe(false);
    expect(sendResultSchema.safeParse({ ...accepted, attempts: 0 }).success).toBe(false);
    expect(
      sendResultSchema.safeParse({ ...rejected, error: { ...rejected.error, retriable: undefined } }).success,
    ).toBe(false);
    expect(sendResultSchema.safeParse({ ...accepted, outcome: 'maybe' }).success).toBe(false);
  });
});
