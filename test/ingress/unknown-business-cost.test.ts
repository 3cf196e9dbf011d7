import { afterEach, describe, expect, it, vi } from 'vitest';
import { createWebhookHandler } from '../../src/ingress/handle-webhook.js';
import * as verification from '../../src/contracts/signature.js';
import { statusEvent } from './fixtures.js';

vi.mock('../../src/contracts/signature.js', async (importOriginal) => {
  const actual = await importOriginal<typeof import('../../src/contracts/signature.js')>();
  return { ...actual, verifySignature: vi.fn(actual.verifySignature) };
});

describe('verification costs the same for every business id', () => {
  afterEach(() => vi.mocked(verification.verifySignature).mockClear());

  const handler = createWebhookHandler({
    businesses: new Map([
      ['biz_1', ['secret']],
      ['biz_rotating', ['new-secret', 'old-secret', 'older-secret']],
      ['biz_none', []],
    ]),
    topics: { messages: 'm', deliveryStatus: 's', webhooksDlq: 'd' },
    maxBodyBytes: 4096,
  });
  const body = Buffer.from(statusEvent('01HZY3J5V7W9X1Y3Z5A7B9C1D3'));
  const request = (businessId: string, signature: string) => ({
    businessId,
    pathTopic: 'delivery_status',
    body,
    signature,
    contentType: 'application/json',
    traceparent: undefined,
    receivedAt: 1,
  });

  /** The secrets (= HMACs computed) of each verification the handler made. */
  const work = () => vi.mocked(verification.verifySignature).mock.calls.map(([secrets]) => secrets);

  it('every id, known (with one or three secrets), unknown or without a secret, costs as many HMACs as the business with the most secrets', () => {
    const signature = verification.signBody('secret', body);
    const wrong = `${signature.slice(0, 40)}AA=`;
    expect(handler.handle(request('biz_1', signature))).toMatchObject({ kind: 'publish' });
    expect(handler.handle(request('biz_1', wrong))).toMatchObject({ kind: 'reject', reason: 'bad-signature' });
    expect(handler.handle(request('biz_rotating', verification.signBody('old-secret', body)))).toMatchObject({
      kind: 'publish',
    });
    expect(handler.handle(request('biz_rotating', wrong))).toMatchObject({ kind: 'reject', reason: 'bad-signature' });
    expect(handler.handle(request('biz_404', signature))).toMatchObject({ kind: 'reject', reason: 'unknown-business' });
    expect(handler.handle(request('biz_none', signature))).toMatchObject({
      kind: 'reject',
      reason: 'no-signing-secret',
    });
    const calls = work();
    expect(calls).toHaveLength(6);
    expect(calls.map((secrets) => secrets.length)).toEqual([3, 3, 3, 3, 3, 3]);
    // The padding is decoys: a business's own secrets come first, nobody else's are used.
    expect(calls[0]!.slice(0, 1)).toEqual(['secret']);
    expect(calls[0]).not.toContain('new-secret');
    expect(calls[2]).toEqual(['new-secret', 'old-secret', 'older-secret']);
    expect(calls[4]).not.toContain('secret');
    // An unknown id is refused even with a signature that is right for another business.
    expect(vi.mocked(verification.verifySignature).mock.results[4]!.value).toBe(false);
  });
});
