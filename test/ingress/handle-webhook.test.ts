import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createWebhookHandler, type Publication, type WebhookRequest } from '../../src/ingress/handle-webhook.js';
import { hmacBase64 } from '../helpers/signing.js';
import { inboundEvent, statusEvent } from './fixtures.js';

const handler = createWebhookHandler({
  businesses: new Map([
    ['biz_1', ['new-secret', 'old-secret']],
    ['biz_2', ['other']],
    ['biz_none', []],
  ]),
  topics: { messages: 'k-messages', deliveryStatus: 'k-status', webhooksDlq: 'k-dlq' },
  maxBodyBytes: 2048,
});

function request(body: string | Buffer, overrides: Partial<WebhookRequest> = {}): WebhookRequest {
  const bytes = Buffer.isBuffer(body) ? body : Buffer.from(body);
  return {
    businessId: 'biz_1',
    pathTopic: 'delivery_status',
    body: bytes,
    signature: hmacBase64('new-secret', bytes),
    contentType: 'text/plain; charset=utf-8',
    traceparent: undefined,
    receivedAt: 1_700_000_000_123,
    ...overrides,
  };
}

function publication(body: string, overrides: Partial<WebhookRequest> = {}): Publication {
  const decision = handler.handle(request(body, overrides));
  if (decision.kind !== 'publish') throw new Error(`expected a publication, got ${JSON.stringify(decision)}`);
  return decision;
}

describe('handleWebhook: verified events', () => {
  it('publishes a delivery status keyed by statusUpdate.id, value byte for byte, with every header', () => {
    const body = statusEvent('01HZY3J5V7W9X1Y3Z5A7B9C1D3', 'read', { metadata: null });
    const traceparent = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
    const d = publication(body, { traceparent });
    expect(d.destination).toBe('event');
    expect(d.record.topic).toBe('k-status');
    expect(d.record.key).toBe('01HZY3J5V7W9X1Y3Z5A7B9C1D3');
    expect(d.record.value.equals(Buffer.from(body))).toBe(true);
    expect(d.record.headers).toEqual({
      'event-id': createHash('sha256').update(body).digest('hex'),
      'business-id': 'biz_1',
      'received-at': '1700000000123',
      'content-type': 'application/json',
      schema: 'delivery_status/v1',
      'x-service-hmac-sha256': hmacBase64('new-secret', body),
      traceparent,
    });
  });

  it('publishes an inbound message keyed by its customer in the canonical form, the body byte for byte', () => {
    const body = inboundEvent('+15550009999', 'hi', { attachments: [{ type: 'image', url: 'https://x' }] });
    const d = publication(body, { pathTopic: 'messages' });
    // One customer with or without the +: both forms land on one partition, in order.
    expect(d.record).toMatchObject({ topic: 'k-messages', key: '15550009999' });
    expect(d.record.value.toString()).toBe(body);
    expect(d.record.headers.schema).toBe('messages/v1');
    expect(d.record.headers).not.toHaveProperty('traceparent');
    expect(publication(inboundEvent('15550009999'), { pathTopic: 'messages' }).record.key).toBe('15550009999');
    // An opaque id is the key as it is.
    expect(publication(inboundEvent('US.1349120865'), { pathTopic: 'messages' }).record.key).toBe('US.1349120865');
  });

  it('detects the topic from the body on the per-business address', () => {
    expect(publication(statusEvent('m1'), { pathTopic: undefined }).record.topic).toBe('k-status');
    expect(publication(inboundEvent('+1555000'), { pathTopic: undefined }).record.topic).toBe('k-messages');
  });

  it('accepts a signature made with any active secret (rotation)', () => {
    const body = statusEvent('m2');
    expect(publication(body, { signature: hmacBase64('old-secret', body) }).destination).toBe('event');
  });

  it('drops a malformed traceparent instead of copying it', () => {
    expect(publication(statusEvent('m3'), { traceparent: 'garbage\nx' }).record.headers).not.toHaveProperty(
      'traceparent',
    );
  });
});

describe('handleWebhook: refusals (nothing to publish)', () => {
  const body = statusEvent('m4');
  it.each([
    ['unknown business', { businessId: 'nobody' }, 'unknown-business'],
    ['business without a secret', { businessId: 'biz_none' }, 'no-signing-secret'],
    ['missing signature', { signature: undefined }, 'missing-signature'],
    ['signature of another business', { businessId: 'biz_2' }, 'bad-signature'],
    ['signature over other bytes', { signature: hmacBase64('new-secret', `${body} `) }, 'bad-signature'],
    ['hex signature', { signature: createHash('sha256').update(body).digest('hex') }, 'bad-signature'],
  ] as const)('403 for %s', (_, overrides, reason) => {
    const d = handler.handle(request(body, overrides));
    expect(d).toMatchObject({
      kind: 'reject',
      code: 'SIGNATURE_INVALID',
      reason,
      message: 'signature verification failed',
    });
  });

  it('413 for a body over the limit, before the signature is even looked at', () => {
    const big = Buffer.alloc(2049, 0x20);
    expect(handler.handle(request(big, { signature: undefined }))).toMatchObject({
      kind: 'reject',
      code: 'BODY_TOO_LARGE',
    });
  });

  it('checks what it can before the body arrives', () => {
    const pre = { businessId: 'biz_1', pathTopic: 'messages', contentLength: '10', contentEncoding: '' };
    expect(handler.precheck(pre)).toBeUndefined();
    expect(handler.precheck({ ...pre, contentEncoding: 'identity' })).toBeUndefined();
    expect(handler.precheck({ ...pre, pathTopic: 'other' })).toMatchObject({ code: 'NOT_FOUND' });
    expect(handler.precheck({ ...pre, businessId: '' })).toMatchObject({ code: 'NOT_FOUND' });
    expect(handler.precheck({ ...pre, contentEncoding: 'gzip' })).toMatchObject({ code: 'UNSUPPORTED_ENCODING' });
    expect(handler.precheck({ ...pre, contentLength: '2049' })).toMatchObject({ code: 'BODY_TOO_LARGE' });
    expect(handler.precheck({ ...pre, contentLength: '2048' })).toBeUndefined();
    // An unknown business is only refused after the body: the size limit comes first.
    expect(handler.precheck({ ...pre, businessId: 'nobody' })).toBeUndefined();
  });
});

describe('handleWebhook: authentic but unusable → dead letter', () => {
  it.each([
    ['not JSON', '{"topic": "delivery_status", ', 'delivery_status', 'not-json'],
    [
      'wrong shape',
      JSON.stringify({ topic: 'delivery_status', statusUpdate: { id: 'x', status: 'lost' } }),
      'delivery_status',
      'schema',
    ],
    ['a JSON array', '[1,2,3]', 'messages', 'schema'],
    ['a status event on the messages address', statusEvent('m5'), 'messages', 'topic-mismatch'],
    ['an inbound message on the delivery_status address', inboundEvent('+1555'), 'delivery_status', 'topic-mismatch'],
    ['a body that names no topic on the per-business address', '{"timestamp":"1"}', undefined, 'topic-undetectable'],
  ] as const)('%s', (_, body, pathTopic, reason) => {
    const d = publication(body, { pathTopic });
    expect(d.destination).toBe('dlq');
    expect(d.deadLetter?.reason).toBe(reason);
    expect(d.record.topic).toBe('k-dlq');
    expect(d.record.key).toBe('biz_1');
    expect(d.record.value.equals(Buffer.from(body))).toBe(true);
    expect(d.record.headers['error-reason']).toMatch(new RegExp(`^${reason}: `));
    expect(d.record.headers.schema).toBe('webhooks-dlq/v1');
    expect(d.record.headers['content-type']).toBe('text/plain; charset=utf-8');
    expect(d.record.headers['event-id']).toBe(createHash('sha256').update(body).digest('hex'));
    expect(d.record.headers['x-service-hmac-sha256']).toBe(hmacBase64('new-secret', body));
  });

  it('never dead-letters unsigned bytes', () => {
    expect(handler.handle(request('not json', { signature: hmacBase64('wrong', 'not json') })).kind).toBe('reject');
  });
});
