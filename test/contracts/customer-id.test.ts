import { describe, expect, it } from 'vitest';
import { canonicalCustomerId, channelOf, isSms, sameCustomer, sendRequestSchema } from '../../src/contracts/index.js';

describe('canonicalCustomerId', () => {
  it('takes a numeric id with or without its leading + as one customer, in the form without it', () => {
    expect(canonicalCustomerId('+15550002222')).toBe('15550002222');
    expect(canonicalCustomerId('15550002222')).toBe('15550002222');
    expect(sameCustomer('+15550002222', '15550002222')).toBe(true);
    expect(sameCustomer('+15550002222', '+15550002223')).toBe(false);
  });

  it('compares any other id as it is: an opaque id, or a number written with other characters', () => {
    for (const id of ['US.13491208655302741918', 'abc', '+1 555 000 2222', '++15550002222', '+', '1555-000-2222'])
      expect(canonicalCustomerId(id)).toBe(id);
    expect(sameCustomer('US.1', 'us.1')).toBe(false);
  });

  it('is idempotent', () => {
    for (const id of ['+15550002222', '15550002222', 'US.1', '+'])
      expect(canonicalCustomerId(canonicalCustomerId(id))).toBe(canonicalCustomerId(id));
  });
});

describe('channels', () => {
  it('reads the channel type in any case; only sms is SMS', () => {
    expect(channelOf('SMS')).toBe('sms');
    expect(isSms('sms')).toBe(true);
    expect(isSms('Sms')).toBe(true);
    expect(isSms('whatsapp')).toBe(false);
    expect(isSms(null)).toBe(false);
    expect(isSms(undefined)).toBe(false);
  });
});

describe('a recipient of neither form is refused at the edge, with one clear error', () => {
  it.each(['abc', '+1 555 000 2222', '1234', '', '+'])('%j', (id) => {
    const parsed = sendRequestSchema.safeParse({
      requestId: 'r1',
      type: 'text',
      recipient: { channelType: 'sms', id },
      message: { text: 'hi' },
    });
    expect(parsed.success).toBe(false);
    const issues = parsed.error!.issues;
    expect(issues).toHaveLength(1);
    expect(issues[0]!.path).toEqual(['recipient', 'id']);
    expect(issues[0]!.message).toBe('expected a phone number in international format (+ and 5-20 digits)');
  });
});
