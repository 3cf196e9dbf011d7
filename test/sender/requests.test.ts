import { describe, expect, it } from 'vitest';
import { sendResultSchema } from '../../src/contracts/index.js';
import {
  expiryOf,
  prepareJob as prepare,
  resolveBusiness,
  type DlqJob,
  type IncomingRecord,
  type SendJob,
} from '../../src/sender/requests.js';

const DAY = 86_400_000;
const prepareJob = (
  r: IncomingRecord,
  businesses: ReadonlyMap<string, string>,
  receivedAt: number,
  producedAt?: number,
) => prepare(r, businesses, { receivedAt, producedAt, maxRequestAgeMs: DAY });

const one = new Map([['biz_1', 'k1']]);
const two = new Map([
  ['biz_1', 'k1'],
  ['biz_2', 'k2'],
]);

function record(value: unknown, headers: IncomingRecord['headers'] = {}): IncomingRecord {
  return {
    topic: 'send-requests',
    partition: 2,
    offset: '41',
    key: Buffer.from('+15550002222'),
    value: typeof value === 'string' ? Buffer.from(value) : Buffer.from(JSON.stringify(value)),
    headers,
  };
}

describe('send requests', () => {
  it('maps a text request to the provider body, stripping only the relay fields', () => {
    const job = prepareJob(
      record({
        requestId: 'r1',
        type: 'text',
        recipient: { channelType: 'whatsapp', id: '+15550002222' },
        message: { text: 'hi' },
        callbackData: 'x',
        sender: { id: 'y' },
      }),
      one,
      1000,
    ) as SendJob;
    expect(job.kind).toBe('send');
    expect(job.businessId).toBe('biz_1');
    expect(job.operation).toBe('text');
    expect(job.recipient).toBe('+15550002222');
    expect(job.body).toEqual({
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      message: { text: 'hi' },
      callbackData: 'x',
      sender: { id: 'y' },
    });
  });

  it('maps a template request, parameters defaulting to none', () => {
    const job = prepareJob(
      record({
        requestId: 'r2',
        businessId: 'biz_2',
        type: 'template',
        number: '+15550003333',
        templateName: 'welcome',
        language: 'en',
      }),
      two,
      1000,
    ) as SendJob;
    expect(job).toMatchObject({ kind: 'send', businessId: 'biz_2', operation: 'template', recipient: '+15550003333' });
    expect(job.body).toEqual({ number: '+15550003333', templateName: 'welcome', parameters: [], language: 'en' });
  });

  it('resolves the business: named, or the only one; never a guess', () => {
    expect(resolveBusiness(undefined, one)).toEqual({ id: 'biz_1' });
    expect(resolveBusiness('biz_2', two)).toEqual({ id: 'biz_2' });
    expect(resolveBusiness(undefined, two)).toMatchObject({ error: expect.stringMatching(/businessId is missing/) });
    expect(resolveBusiness('nope', one)).toMatchObject({ error: expect.stringMatching(/unknown business "nope"/) });
  });

  it('turns unusable records into DLQ jobs with the original key, bytes and headers', () => {
    const raw = '{"requestId":';
    const job = prepareJob(
      record(raw, { traceparent: 'tp', 'error-reason': 'spoofed', 'event-id': 'spoofed' }),
      one,
      1234,
    );
    expect(job.kind).toBe('dlq');
    if (job.kind !== 'dlq') return;
    expect(job.record.key?.toString()).toBe('+15550002222');
    expect(job.record.value.toString()).toBe(raw);
    expect(job.record.headers).toMatchObject({
      traceparent: 'tp',
      'received-at': '1234',
      'content-type': 'application/octet-stream',
      schema: 'send-requests-dlq/v1',
      'source-topic': 'send-requests',
      'source-partition': '2',
      'source-offset': '41',
    });
    expect(job.record.headers['error-reason']).toMatch(/^not valid JSON/);
    expect(job.record.headers['event-id']).toMatch(/^[0-9a-f]{64}$/);
    const invalid = prepareJob(
      record({
        requestId: 'r',
        businessId: 'biz_1',
        type: 'text',
        recipient: { channelType: 'whatsapp', id: 'not-a-number' },
        message: { text: 'x' },
      }),
      one,
      1,
    );
    expect(invalid.kind === 'dlq' && invalid.record.headers['error-reason']).toMatch(/recipient\.id/);
    expect(invalid.kind === 'dlq' && invalid.record.headers['business-id']).toBe('biz_1');
  });

  it('gives every DLQ job with a readable request id its rejected result, with a code per cause', () => {
    const text = (extra: Record<string, unknown>) => ({
      requestId: 'r9',
      type: 'text',
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      message: { text: 'hi' },
      ...extra,
    });
    const cases: [unknown, string][] = [
      ['{"requestId": "r9", "type": "text", ', 'RELAY_INVALID_JSON'],
      [{ requestId: 'r9', type: 'video' }, 'RELAY_UNKNOWN_TYPE'],
      [text({ message: { text: '' } }), 'RELAY_INVALID_FIELD'],
      [text({ expiresAt: 'tomorrow' }), 'RELAY_INVALID_EXPIRY'],
      [text({ ttlMs: -5 }), 'RELAY_INVALID_EXPIRY'],
      [text({ ttlMs: 8 * DAY }), 'RELAY_INVALID_EXPIRY'],
      [text({ ttlMs: 1.5 }), 'RELAY_INVALID_EXPIRY'],
      [text({ ttlMs: '60000' }), 'RELAY_INVALID_EXPIRY'],
      [text({ expiresAt: '2026-11-23T10:00:00' }), 'RELAY_INVALID_EXPIRY'],
      [text({ businessId: 'nope' }), 'RELAY_UNKNOWN_BUSINESS'],
      ['[1,2]', 'RELAY_INVALID_REQUEST'],
    ];
    for (const [value, code] of cases) {
      const job = prepareJob(record(value), one, 7) as DlqJob;
      expect(job.kind, String(code)).toBe('dlq');
      expect(job.code).toBe(code);
      expect(job.record.headers['error-code']).toBe(code);
      if (code === 'RELAY_INVALID_REQUEST') {
        expect(job.result).toBeUndefined();
        continue;
      }
      const result = sendResultSchema.parse(JSON.parse(job.result!.value.toString()));
      expect(result).toMatchObject({
        requestId: 'r9',
        outcome: 'rejected',
        attempts: 0,
        maybeSent: false,
        error: { code, retriable: false },
      });
      expect(job.result!.key).toBe('r9');
    }
    const ambiguous = prepareJob(record(text({})), two, 7) as DlqJob;
    expect(ambiguous.code).toBe('RELAY_AMBIGUOUS_BUSINESS');
    // No readable id: nothing to correlate a result with.
    expect((prepareJob(record('garbage'), one, 7) as DlqJob).result).toBeUndefined();
    expect((prepareJob(record({ type: 'text' }), one, 7) as DlqJob).result).toBeUndefined();
  });

  it("takes the earliest expiry: the request's expiresAt or ttlMs, or the sender's age limit, and keeps them from the provider", () => {
    const base = {
      requestId: 'r',
      type: 'text',
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      message: { text: 'hi' },
    };
    expect(expiryOf({}, 1000, DAY)).toEqual({ at: 1000 + DAY, by: 'maxRequestAgeMs' });
    expect(expiryOf({ ttlMs: 5000 }, 1000, DAY)).toEqual({ at: 6000, by: 'ttlMs' });
    expect(expiryOf({ expiresAt: '1970-01-01T00:00:03Z', ttlMs: 5000 }, 1000, DAY)).toEqual({
      at: 3000,
      by: 'expiresAt',
    });
    expect(expiryOf({ expiresAt: '2999-01-01T00:00:00Z' }, 1000, DAY).by).toBe('maxRequestAgeMs');
    const job = prepareJob(
      record({ ...base, ttlMs: 60_000, expiresAt: '2999-01-01T00:00:00+02:00' }),
      one,
      50_000,
      40_000,
    ) as SendJob;
    expect(job.expiry).toEqual({ at: 100_000, by: 'ttlMs' });
    expect(job.body).not.toHaveProperty('ttlMs');
    expect(job.body).not.toHaveProperty('expiresAt');
    // No record timestamp: the time the sender took it.
    expect((prepareJob(record({ ...base, ttlMs: 10 }), one, 50_000) as SendJob).expiry).toEqual({
      at: 50_010,
      by: 'ttlMs',
    });
  });
});
