import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { signBody, verifySignature } from '../../src/contracts/signature.js';
import { hmacBase64 } from '../helpers/signing.js';

const body = Buffer.from('{"topic":"delivery_status","timestamp":"1700000000"}');

describe('webhook signature', () => {
  it('computes the provider signature: Base64 (padded) HMAC-SHA256 of the raw bytes', () => {
    expect(signBody('s3cret', body)).toBe(hmacBase64('s3cret', body));
    expect(signBody('s3cret', body)).toMatch(/^[A-Za-z0-9+/]{43}=$/);
  });
  it('accepts a signature made with any active secret (rotation)', () => {
    expect(verifySignature(['new', 'old'], body, hmacBase64('old', body))).toBe(true);
    expect(verifySignature(['new', 'old'], body, hmacBase64('new', body))).toBe(true);
  });
  it.each([
    ['missing', undefined],
    ['empty', ''],
    ['wrong secret', hmacBase64('other', body)],
    ['other body', hmacBase64('new', Buffer.concat([body, Buffer.from(' ')]))],
    ['hex encoding', createHmac('sha256', 'new').update(body).digest('hex')],
    ['sha256= prefix', `sha256=${hmacBase64('new', body)}`],
    ['unpadded', hmacBase64('new', body).replace(/=$/, '')],
    ['truncated', hmacBase64('new', body).slice(0, 20)],
  ])('rejects a %s signature', (_, signature) => {
    expect(verifySignature(['new', 'old'], body, signature)).toBe(false);
  });
  it('rejects everything when the business has no secret', () => {
    expect(verifySignature([], body, hmacBase64('new', body))).toBe(false);
  });
});
