import { describe, expect, it } from 'vitest';
import { sendResultSchema } from '../../src/contracts/index.js';
import { prepareJob as prepare, type IncomingRecord, type SendJob } from '../../src/sender/requests.js';
import {
  acceptedResult,
  expiredResult,
  failureOf,
  fitDlqRecord,
  fromRepeat,
  rejectedResult,
  resultHeaders,
  resultRecord,
  storedResult,
} from '../../src/sender/result-records.js';
import { REQUEST_CONTENT_LIMITS, requestContentOf, boundedContent } from '../../src/contracts/send.js';
import { heapAfterGc } from '../helpers/heap.js';

const DAY = 86_400_000;
const prepareJob = (
  r: IncomingRecord,
  businesses: ReadonlyMap<string, string>,
  receivedAt: number,
  producedAt?: number,
) => prepare(r, businesses, { receivedAt, producedAt, maxRequestAgeMs: DAY });

const one = new Map([['biz_1', 'k1']]);

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

describe('result records', () => {
  it("an accepted result names the channel it went out on: the text's (lower case), whatsapp for a template or a fallback template", () => {
    const job = (value: Record<string, unknown>) =>
      prepareJob(record({ requestId: 'r1', ...value }), one, 5) as SendJob;
    const sms = job({ type: 'text', recipient: { channelType: 'SMS', id: '+15550002222' }, message: { text: 'hi' } });
    expect(acceptedResult(sms, 'm-1', 1, false, new Date(0)).channel).toBe('sms');
    const whatsapp = job({
      type: 'text',
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      message: { text: 'hi' },
    });
    expect(acceptedResult(whatsapp, 'm-1', 1, false, new Date(0)).channel).toBe('whatsapp');
    expect(
      acceptedResult({ ...whatsapp, operation: 'template', sentAs: 'template' }, 'm-1', 1, false, new Date(0)).channel,
    ).toBe('whatsapp');
    const template = job({ type: 'template', number: '+15550002222', templateName: 'order_update', parameters: [] });
    const accepted = acceptedResult(template, 'm-1', 1, false, new Date(0));
    expect(accepted.channel).toBe('whatsapp');
    expect(sendResultSchema.parse(accepted)).toEqual(accepted);
    // Results of releases before it have none: still read.
    const { channel: _channel, ...older } = accepted;
    expect(sendResultSchema.parse(older)).not.toHaveProperty('channel');
  });

  it("carries the request's content, bounded, in every outcome; the copy kept for repeats leaves it out", () => {
    const long = 'x'.repeat(REQUEST_CONTENT_LIMITS.textChars + 50);
    const text = prepareJob(
      record({
        requestId: 'r1',
        type: 'text',
        recipient: { channelType: 'whatsapp', id: '+15550002222' },
        message: { text: long },
      }),
      one,
      5,
    ) as SendJob;
    const accepted = acceptedResult(text, 'm-1', 1, false, new Date(0));
    expect(accepted.content!.text).toHaveLength(REQUEST_CONTENT_LIMITS.textChars);
    expect(accepted.content!.text!.endsWith('…')).toBe(true);
    expect(accepted.content!.truncated).toBe(true);
    expect(sendResultSchema.parse(accepted)).toEqual(accepted);
    const template = prepareJob(
      record({
        requestId: 'r2',
        type: 'template',
        number: '+15550002222',
        templateName: 'order_update',
        parameters: [{ name: 'order', value: '42', extra: 1 }],
      }),
      one,
      5,
    ) as SendJob;
    const content = { templateName: 'order_update', parameters: [{ name: 'order', value: '42' }] };
    expect(
      rejectedResult(template, { message: 'bad', type: 't', code: 'c', retriable: false }, 1, false, new Date(0))
        .content,
    ).toEqual(content);
    expect(expiredResult(template, 0, false, new Date(0)).content).toEqual(content);
    expect(boundedContent(accepted.content!)).toEqual(accepted.content);
    expect(requestContentOf(text.request)).toEqual(accepted.content);
    const stored = storedResult(accepted);
    const kept = fromRepeat(stored.withoutContent);
    expect(JSON.parse(kept.value)).toEqual({ ...JSON.parse(stored.value), content: undefined });
    expect(kept.value.length).toBeLessThan(stored.value.length - REQUEST_CONTENT_LIMITS.textChars);
    expect(kept.eventId).toBe(stored.eventId);
    expect(kept.key).toBe(stored.key);
    expect(kept.businessId).toBe(stored.businessId);
    const rejected = storedResult(
      rejectedResult(template, { message: 'bad', type: 't', code: 'c', retriable: false }, 1, false, new Date(0)),
    );
    const keptRejected = fromRepeat(rejected.withoutContent);
    expect({ key: keptRejected.key, eventId: keptRejected.eventId, businessId: keptRejected.businessId }).toEqual({
      key: 'r2',
      eventId: rejected.eventId,
      businessId: rejected.businessId,
    });
    const expired = storedResult(expiredResult(template, 0, false, new Date(0)));
    expect(fromRepeat(expired.withoutContent).eventId).toBe(expired.eventId);
    expect(fromRepeat(expired.withoutContent).eventId).not.toBe(rejected.eventId);
  });

  it('keeps for repeats exactly JSON.stringify of the result without its content, whatever the content holds', () => {
    const withoutContent = (result: object) => {
      const { content: _content, ...rest } = result as { content?: unknown };
      return JSON.stringify(rest);
    };
    const tricky = [
      'hi',
      ',"content":{"text":"x"}}',
      'quote " backslash \\ ,"content": \u2028 ünïcödé 😀',
      'x'.repeat(REQUEST_CONTENT_LIMITS.textChars + 10),
    ];
    const results: object[] = [];
    for (const [i, t] of tricky.entries()) {
      const job = prepareJob(
        record({
          requestId: `r${i}`,
          type: 'text',
          recipient: { channelType: 'whatsapp', id: '+15550002222' },
          message: { text: t },
        }),
        one,
        5,
      ) as SendJob;
      results.push(acceptedResult(job, `m-${i}`, 1, false, new Date(0)));
      results.push(
        rejectedResult(
          job,
          { message: ',"content":"no"', type: 't', code: 'c', retriable: false },
          2,
          true,
          new Date(0),
        ),
      );
      results.push(expiredResult(job, 0, false, new Date(0)));
    }
    const template = prepareJob(
      record({
        requestId: 't1',
        type: 'template',
        number: '+15550002222',
        templateName: 'content',
        parameters: [{ name: ',"content":', value: '"content"' }],
      }),
      one,
      5,
    ) as SendJob;
    results.push(acceptedResult(template, 'm-t', 1, false, new Date(0)), {
      ...acceptedResult(template, 'm-u', 1, false, new Date(0)),
      content: undefined,
    });
    for (const result of results) {
      const stored = storedResult(result as Parameters<typeof storedResult>[0]);
      expect(stored.value).toBe(JSON.stringify(result));
      const value = stored.withoutContent;
      expect(value).toBe(withoutContent(result));
      expect(JSON.parse(value)).not.toHaveProperty('content');
    }
  });

  it('keeps for repeats a string that does not hold the content alive', () => {
    // A slice of the whole JSON would keep its parent, content and all: 2,000 kept results of a
    // template at the content limits (about 6.5 KB of content each) would then hold 13 MB.
    const parameters = Array.from({ length: REQUEST_CONTENT_LIMITS.parameters }, (_, i) => ({
      name: `${i}`.padEnd(REQUEST_CONTENT_LIMITS.parameterNameChars, 'n'),
      value: 'v'.repeat(REQUEST_CONTENT_LIMITS.parameterValueChars),
    }));
    const templateName = 't'.repeat(REQUEST_CONTENT_LIMITS.templateNameChars);
    const kept: string[] = [];
    const before = heapAfterGc();
    for (let i = 0; i < 2000; i++) {
      const job = prepareJob(
        record({ requestId: `big-${i}`, type: 'template', number: '+15550002222', templateName, parameters }),
        one,
        5,
      ) as SendJob;
      const stored = storedResult(acceptedResult(job, `m-${i}`, 1, false, new Date(0)));
      expect(stored.value.length).toBeGreaterThan(6000);
      kept.push(stored.withoutContent);
    }
    const perEntry = (heapAfterGc() - before) / kept.length;
    expect(perEntry).toBeLessThan(1500);
  });

  it('builds results that match the contract, keyed by message id (request id when rejected)', () => {
    const job = prepareJob(
      record(
        {
          requestId: 'r1',
          type: 'text',
          recipient: { channelType: 'whatsapp', id: '+15550002222' },
          message: { text: 'hi' },
        },
        { traceparent: 'tp', 'correlation-id': 'c' },
      ),
      one,
      5,
    ) as SendJob;
    const accepted = acceptedResult(job, 'm-1', 2, false, new Date(0));
    expect(sendResultSchema.parse(accepted)).toEqual(accepted);
    expect(resultRecord(accepted).key).toBe('m-1');
    const rejected = rejectedResult(
      job,
      failureOf(
        {
          kind: 'http-error',
          status: 400,
          error: { message: 'bad', type: 'ERROR_TYPE_INVALID_REQUEST', code: 'ERROR_CODE_X', cntTraceId: '9' },
        },
        false,
      ),
      1,
      false,
      new Date(0),
    );
    expect(sendResultSchema.parse(rejected)).toEqual(rejected);
    expect(rejected.error).toEqual({
      httpStatus: 400,
      message: 'bad',
      type: 'ERROR_TYPE_INVALID_REQUEST',
      code: 'ERROR_CODE_X',
      cntTraceId: '9',
      retriable: false,
    });
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
    const unsure = rejectedResult(
      job,
      failureOf({ kind: 'timeout', message: 'no answer', requestWritten: true }, true),
      2,
      true,
      new Date(0),
    );
    expect(unsure).toMatchObject({
      maybeSent: true,
      error: { maybeSent: true, message: expect.stringMatching(/may have created the message/) },
    });
    sendResultSchema.parse(unsure);
    const expired = expiredResult(job, 0, false, new Date(0));
    expect(sendResultSchema.parse(expired)).toEqual(expired);
    expect(resultRecord(expired).key).toBe('r1');
  });

  it('derives the event-id from business, request id and outcome, not from the bytes', () => {
    const job = prepareJob(
      record({
        requestId: 'r1',
        type: 'text',
        recipient: { channelType: 'whatsapp', id: '+15550002222' },
        message: { text: 'hi' },
      }),
      one,
      5,
    ) as SendJob;
    const first = storedResult(acceptedResult(job, 'm-1', 1, false, new Date(0)));
    const again = storedResult(acceptedResult(job, 'm-2', 3, true, new Date(99)));
    expect(again.eventId).toBe(first.eventId);
    expect(again.value).not.toBe(first.value);
    const rejected = storedResult(
      rejectedResult(job, failureOf({ kind: 'http-error', status: 503 }, true), 1, false, new Date(0)),
    );
    expect(rejected.eventId).not.toBe(first.eventId);
    const other = prepareJob(
      record({
        requestId: 'r2',
        type: 'text',
        recipient: { channelType: 'whatsapp', id: '+15550002222' },
        message: { text: 'hi' },
      }),
      one,
      5,
    ) as SendJob;
    expect(storedResult(acceptedResult(other, 'm-1', 1, false, new Date(0))).eventId).not.toBe(first.eventId);
  });

  it('fits a DLQ copy that would not fit in the topic by replacing its value with a reference', () => {
    const big = {
      key: 'k',
      value: Buffer.alloc(2_000_000, 'a'),
      headers: {
        'error-reason': 'x',
        'source-topic': 't',
        'source-partition': '3',
        'source-offset': '99',
        traceparent: 'tp',
      },
    };
    expect(fitDlqRecord({ ...big, value: Buffer.from('small') }, 1_000_000).value.toString()).toBe('small');
    const fitted = fitDlqRecord(big, 1_000_000);
    expect(JSON.parse(fitted.value.toString())).toEqual({
      truncated: true,
      originalBytes: 2_000_000,
      sourceTopic: 't',
      sourcePartition: 3,
      sourceOffset: '99',
    });
    const headers = fitted.headers as Record<string, unknown>;
    expect(headers['dlq-value']).toBe('reference');
    expect(String(headers['error-reason'])).toMatch(/do not fit/);
    expect(headers.traceparent).toBe('tp');
  });
});
