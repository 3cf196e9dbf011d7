import { describe, expect, it } from 'vitest';
import { sendResultSchema } from '../../src/contracts/index.js';
import { decodeCompleted, encodeCompleted } from '../../src/sender/offset-metadata.js';
import {
  acceptedResult,
  expiredResult,
  expiryOf,
  failureOf,
  fitDlqRecord,
  prepareJob as prepare,
  rejectedResult,
  resolveBusiness,
  resultHeaders,
  resultRecord,
  storedResult,
  type DlqJob,
  type IncomingRecord,
  type SendJob,
} from '../../src/sender/requests.js';

const DAY = 86_400_000;
const prepareJob = (r: IncomingRecord, businesses: ReadonlyMap<string, string>, receivedAt: number, producedAt?: number) => prepare(r, businesses, { receivedAt, producedAt, maxRequestAgeMs: DAY });

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
      record({ requestId: 'r1', type: 'text', recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hi' }, callbackData: 'x', sender: { id: 'y' } }),
      one,
      1000,
    ) as SendJob;
    expect(job.kind).toBe('send');
    expect(job.businessId).toBe('biz_1');
    expect(job.operation).toBe('text');
    expect(job.recipient).toBe('+15550002222');
    expect(job.body).toEqual({ recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hi' }, callbackData: 'x', sender: { id: 'y' } });
  });

  it('maps a template request, parameters defaulting to none', () => {
    const job = prepareJob(record({ requestId: 'r2', businessId: 'biz_2', type: 'template', number: '+15550003333', templateName: 'welcome', language: 'en' }), two, 1000) as SendJob;
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
    const job = prepareJob(record(raw, { traceparent: 'tp', 'error-reason': 'spoofed', 'event-id': 'spoofed' }), one, 1234);
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
    const invalid = prepareJob(record({ requestId: 'r', businessId: 'biz_1', type: 'text', recipient: { channelType: 'whatsapp', id: 'not-a-number' }, message: { text: 'x' } }), one, 1);
    expect(invalid.kind === 'dlq' && invalid.record.headers['error-reason']).toMatch(/recipient\.id/);
    expect(invalid.kind === 'dlq' && invalid.record.headers['business-id']).toBe('biz_1');
  });

  it('builds results that match the contract, keyed by message id (request id when rejected)', () => {
    const job = prepareJob(
      record({ requestId: 'r1', type: 'text', recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hi' } }, { traceparent: 'tp', 'correlation-id': 'c' }),
      one,
      5,
    ) as SendJob;
    const accepted = acceptedResult(job, 'm-1', 2, false, new Date(0));
    expect(sendResultSchema.parse(accepted)).toEqual(accepted);
    expect(resultRecord(accepted).key).toBe('m-1');
    const rejected = rejectedResult(
      job,
      failureOf({ kind: 'http-error', status: 400, error: { message: 'bad', type: 'ERROR_TYPE_INVALID_REQUEST', code: 'ERROR_CODE_X', cntTraceId: '9' } }, false),
      1,
      false,
      new Date(0),
    );
    expect(sendResultSchema.parse(rejected)).toEqual(rejected);
    expect(rejected.error).toEqual({ httpStatus: 400, message: 'bad', type: 'ERROR_TYPE_INVALID_REQUEST', code: 'ERROR_CODE_X', cntTraceId: '9', retriable: false });
    expect(resultRecord(rejected).key).toBe('r1');
    const stored = storedResult(accepted);
    expect(resultHeaders(stored, job.headers, 5)).toMatchObject({
      traceparent: 'tp',
      'correlation-id': 'c',
      'business-id': 'biz_1',
      schema: 'send-result/v1',
      'content-type': 'application/json',
      'received-at': '5',
    });
    for (const outcome of [
      { kind: 'timeout', message: 't', requestWritten: true },
      { kind: 'network', code: 'ECONNRESET', message: 'reset', requestWritten: false },
      { kind: 'http-error', status: 503, bodySnippet: 'oops' },
      { kind: 'invalid-response', status: 200 },
    ] as const) {
      sendResultSchema.parse(rejectedResult(job, failureOf(outcome, true), 3, false, new Date(0)));
    }
    const unsure = rejectedResult(job, failureOf({ kind: 'timeout', message: 'no answer', requestWritten: true }, true), 2, true, new Date(0));
    expect(unsure).toMatchObject({ maybeSent: true, error: { maybeSent: true, message: expect.stringMatching(/may have created the message/) } });
    sendResultSchema.parse(unsure);
    const expired = expiredResult(job, 0, false, new Date(0));
    expect(sendResultSchema.parse(expired)).toEqual(expired);
    expect(resultRecord(expired).key).toBe('r1');
  });

  it('derives the event-id from business, request id and outcome, not from the bytes', () => {
    const job = prepareJob(record({ requestId: 'r1', type: 'text', recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hi' } }), one, 5) as SendJob;
    const first = storedResult(acceptedResult(job, 'm-1', 1, false, new Date(0)));
    const again = storedResult(acceptedResult(job, 'm-2', 3, true, new Date(99)));
    expect(again.eventId).toBe(first.eventId);
    expect(again.value.equals(first.value)).toBe(false);
    const rejected = storedResult(rejectedResult(job, failureOf({ kind: 'http-error', status: 503 }, true), 1, false, new Date(0)));
    expect(rejected.eventId).not.toBe(first.eventId);
    const other = prepareJob(record({ requestId: 'r2', type: 'text', recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hi' } }), one, 5) as SendJob;
    expect(storedResult(acceptedResult(other, 'm-1', 1, false, new Date(0))).eventId).not.toBe(first.eventId);
  });

  it('gives every DLQ job with a readable request id its rejected result, with a code per cause', () => {
    const text = (extra: Record<string, unknown>) => ({ requestId: 'r9', type: 'text', recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hi' }, ...extra });
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
      expect(result).toMatchObject({ requestId: 'r9', outcome: 'rejected', attempts: 0, maybeSent: false, error: { code, retriable: false } });
      expect(job.result!.key).toBe('r9');
    }
    const ambiguous = prepareJob(record(text({})), two, 7) as DlqJob;
    expect(ambiguous.code).toBe('RELAY_AMBIGUOUS_BUSINESS');
    // No readable id: nothing to correlate a result with.
    expect((prepareJob(record('garbage'), one, 7) as DlqJob).result).toBeUndefined();
    expect((prepareJob(record({ type: 'text' }), one, 7) as DlqJob).result).toBeUndefined();
  });

  it("takes the earliest expiry: the request's expiresAt or ttlMs, or the sender's age limit, and keeps them from the provider", () => {
    const base = { requestId: 'r', type: 'text', recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hi' } };
    expect(expiryOf({}, 1000, DAY)).toEqual({ at: 1000 + DAY, by: 'maxRequestAgeMs' });
    expect(expiryOf({ ttlMs: 5000 }, 1000, DAY)).toEqual({ at: 6000, by: 'ttlMs' });
    expect(expiryOf({ expiresAt: '1970-01-01T00:00:03Z', ttlMs: 5000 }, 1000, DAY)).toEqual({ at: 3000, by: 'expiresAt' });
    expect(expiryOf({ expiresAt: '2999-01-01T00:00:00Z' }, 1000, DAY).by).toBe('maxRequestAgeMs');
    const job = prepareJob(record({ ...base, ttlMs: 60_000, expiresAt: '2999-01-01T00:00:00+02:00' }), one, 50_000, 40_000) as SendJob;
    expect(job.expiry).toEqual({ at: 100_000, by: 'ttlMs' });
    expect(job.body).not.toHaveProperty('ttlMs');
    expect(job.body).not.toHaveProperty('expiresAt');
    // No record timestamp: the time the sender took it.
    expect((prepareJob(record({ ...base, ttlMs: 10 }), one, 50_000) as SendJob).expiry).toEqual({ at: 50_010, by: 'ttlMs' });
  });

  it('fits a DLQ copy that would not fit in the topic by replacing its value with a reference', () => {
    const big = { key: 'k', value: Buffer.alloc(2_000_000, 'a'), headers: { 'error-reason': 'x', 'source-topic': 't', 'source-partition': '3', 'source-offset': '99', traceparent: 'tp' } };
    expect(fitDlqRecord({ ...big, value: Buffer.from('small') }, 1_000_000).value.toString()).toBe('small');
    const fitted = fitDlqRecord(big, 1_000_000);
    expect(JSON.parse(fitted.value.toString())).toEqual({ truncated: true, originalBytes: 2_000_000, sourceTopic: 't', sourcePartition: 3, sourceOffset: '99' });
    const headers = fitted.headers as Record<string, unknown>;
    expect(headers['dlq-value']).toBe('reference');
    expect(String(headers['error-reason'])).toMatch(/do not fit/);
    expect(headers.traceparent).toBe('tp');
  });
});

describe('commit metadata', () => {
  it('round-trips the finished offsets above a commit point', () => {
    const encoded = encodeCompleted(100, [101, 103, 108, 250]);
    expect(encoded).toMatch(/^mb1:100:[A-Za-z0-9_-]+$/);
    expect(decodeCompleted(encoded, 100)).toEqual([101, 103, 108, 250]);
    expect(encodeCompleted(100, [])).toBeNull();
    expect(encodeCompleted(100, [99, 100])).toBeNull();
  });

  it('ignores metadata written for another offset or in another format', () => {
    const encoded = encodeCompleted(100, [101]);
    expect(decodeCompleted(encoded, 101)).toEqual([]);
    expect(decodeCompleted('', 100)).toEqual([]);
    expect(decodeCompleted(null, 100)).toEqual([]);
    expect(decodeCompleted('something else', 100)).toEqual([]);
    expect(decodeCompleted('mb1:100:!!', 100)).toEqual([]);
  });

  it('stays under the size limit by dropping the highest offsets (which then run again, never lost)', () => {
    const offsets = Array.from({ length: 50_000 }, (_, i) => 1 + i * 2);
    const encoded = encodeCompleted(0, offsets, 4000)!;
    expect(encoded.length).toBeLessThanOrEqual(4000);
    const decoded = decodeCompleted(encoded, 0);
    expect(decoded.length).toBeGreaterThan(10_000);
    expect(decoded).toEqual(offsets.slice(0, decoded.length));
  });
});
