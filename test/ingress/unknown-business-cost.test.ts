import { afterEach, describe, expect, it, vi } from 'vitest';
import { createWebhookHandler } from '../../src/ingress/handle-webhook.js';
import * as verification from '../../src/ingress/verify-signature.js';
import { statusEvent } from './fixtures.js';

vi.mock('../../src/ingress/verify-signature.js', async (importOriginal) => {
  const actual = await importOriginal<typeof import('../../src/ingress/verify-signature.js')>();
  return { ...actual, verifySignature: vi.fn(actual.verifySignature) };
});

describe('an unknown business id costs what a known one does', () => {
  afterEach(() => vi.mocked(verification.verifySignature).mockClear());

  it('verifies the signature against one (decoy) secret before answering 403, so timing does not reveal which ids exist', () => {
    const handler = createWebhookHandler({
      businesses: new Map([['biz_1', ['secret']]]),
      topics: { messages: 'm', deliveryStatus: 's', webhooksDlq: 'd' },
      maxBodyBytes: 4096,
    });
    const body = Buffer.from(statusEvent('01HZY3J5V7W9X1Y3Z5A7B9C1D3'));
    const signature = verification.signBody('secret', body);
    const verify = vi.mocked(verification.verifySignature);

    const known = handler.handle({ businessId: 'biz_1', pathTopic: 'delivery_status', body, signature: `${signature.slice(0, 40)}AA=`, contentType: 'application/json', traceparent: undefined, receivedAt: 1 });
    expect(known).toMatchObject({ kind: 'reject', code: 'SIGNATURE_INVALID', reason: 'bad-signature' });
    expect(verify).toHaveBeenCalledTimes(1);
    expect(verify.mock.calls[0]![0]).toEqual(['secret']);

    verify.mockClear();
    const unknown = handler.handle({ businessId: 'biz_404', pathTopic: 'delivery_status', body, signature, contentType: 'application/json', traceparent: undefined, receivedAt: 1 });
    expect(unknown).toMatchObject({ kind: 'reject', code: 'SIGNATURE_INVALID', reason: 'unknown-business' });
    expect(verify).toHaveBeenCalledTimes(1);
    const [secrets] = verify.mock.calls[0]!;
    expect(secrets).toHaveLength(1);
    expect(secrets[0]).not.toBe('secret');
    expect(verify.mock.results[0]!.value).toBe(false);
  });
});
