import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { partitionOf, sendRequestRecord, SendRequestInvalidError, parseSendRequest } from '../../src/client/index.js';
import { murmur2 } from '../../src/kafka/partitioner.js';
import { prepareJob, type SendJob } from '../../src/sender/requests.js';

const text = {
  requestId: 'r1',
  type: 'text',
  recipient: { channelType: 'whatsapp', id: '+15550002222' },
  message: { text: 'hello' },
  callbackData: 'order-42',
};
const template = {
  requestId: 'r2',
  businessId: 'biz_1',
  type: 'template',
  number: '15550003333',
  templateName: 'welcome',
  language: 'en',
};

/** What the sender makes of a record (its own parsing, src/sender/requests.ts). */
function senderReads(record: ReturnType<typeof sendRequestRecord>) {
  return prepareJob(
    {
      topic: record.topic,
      partition: 0,
      offset: '0',
      key: Buffer.from(record.key),
      value: Buffer.from(record.value, 'utf8'),
      headers: record.headers,
    },
    new Map([['biz_1', 'key']]),
    {
      receivedAt: Date.now(),
      maxRequestAgeMs: 86_400_000,
    },
  );
}

function invalid(request: unknown): SendRequestInvalidError {
  try {
    sendRequestRecord(request);
  } catch (err) {
    expect(err).toBeInstanceOf(SendRequestInvalidError);
    return err as SendRequestInvalidError;
  }
  throw new Error('expected sendRequestRecord to throw');
}

describe('sendRequestRecord', () => {
  it('keys a text by its recipient, as UTF-8 JSON with the content-type and schema headers, on send-requests', () => {
    const record = sendRequestRecord(text);
    expect(record).toEqual({
      topic: 'send-requests',
      key: '+15550002222',
      value: JSON.stringify(text),
      headers: { 'content-type': 'application/json', schema: 'send-request/v1' },
    });
    const job = senderReads(record) as SendJob;
    expect(job.kind).toBe('send');
    expect(job.recipient).toBe(record.key);
    expect(job.body).toEqual({ recipient: text.recipient, message: text.message, callbackData: 'order-42' });
  });

  it('keys a template by its number as written, with the defaults the sender applies (parameters: [])', () => {
    const record = sendRequestRecord(template, {
      topic: 'acme.send-requests',
      headers: { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', schema: 'mine' },
    });
    expect(record.topic).toBe('acme.send-requests');
    expect(record.key).toBe('15550003333');
    expect(JSON.parse(record.value)).toEqual({ ...template, parameters: [] });
    // The relay's own headers win over the caller's of the same name.
    expect(record.headers).toEqual({
      traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
      'content-type': 'application/json',
      schema: 'send-request/v1',
    });
    expect((senderReads(record) as SendJob).operation).toBe('template');
  });

  it('keeps text beyond ASCII as UTF-8', () => {
    const record = sendRequestRecord({ ...text, message: { text: 'Grüße 👋' } });
    expect(Buffer.from(record.value, 'utf8').toString('utf8')).toContain('Grüße 👋');
    expect((senderReads(record) as SendJob).body).toMatchObject({ message: { text: 'Grüße 👋' } });
  });

  it('refuses an invalid recipient by name, before anything is produced', () => {
    const error = invalid({ ...text, recipient: { channelType: 'whatsapp', id: 'not-a-number' } });
    expect(error.field).toBe('recipient.id');
    expect(error.message).toBe(
      'invalid send request: recipient.id: expected a phone number in international format (+ and 5-20 digits)',
    );
    expect(invalid({ ...template, number: '12' }).field).toBe('number');
  });

  it('names the field of every kind of mistake, and lists all of them', () => {
    expect(invalid({ ...text, type: 'sms' }).field).toBe('type');
    expect(invalid({ ...text, requestId: '' }).field).toBe('requestId');
    expect(invalid({ ...text, message: { text: '' } }).message).toBe(
      'invalid send request: message.text: message text must not be empty',
    );
    expect(invalid({ ...text, ttlMs: -5 }).field).toBe('ttlMs');
    expect(invalid('{"type":"text"}').field).toBe('(the request)');
    const both = invalid({ ...text, requestId: '', recipient: { channelType: 'whatsapp', id: 'x' } });
    expect(both.issues.map((i) => i.field).sort()).toEqual(['recipient.id', 'requestId']);
  });

  it('parseSendRequest gives the request as the sender reads it', () => {
    expect(parseSendRequest(template)).toEqual({ ...template, parameters: [] });
    expect(() => parseSendRequest({})).toThrow(SendRequestInvalidError);
  });
});

describe('partitionOf and the vectors of docs/producers.md', () => {
  it('places keys as the table for other languages says, from the murmur2 it shows', () => {
    const doc = readFileSync(join(import.meta.dirname, '..', '..', 'docs', 'producers.md'), 'utf8');
    const table = doc.slice(doc.indexOf('<!-- partition-vectors'));
    const rows = [...table.matchAll(/^\| `([^`]+)` \| (-?\d+) \| (\d+) \| (\d+) \|$/gm)].map(
      (m) => [m[1]!, Number(m[2]), Number(m[3]), Number(m[4])] as const,
    );
    expect(rows.length).toBeGreaterThanOrEqual(3);
    for (const [key, hash, of12, of6] of rows) {
      expect(murmur2(Buffer.from(key, 'utf8')), key).toBe(hash);
      expect([partitionOf(key, 12), partitionOf(key, 6), partitionOf(Buffer.from(key), 12)], key).toEqual([
        of12,
        of6,
        of12,
      ]);
    }
    expect(() => partitionOf('+1555', 0)).toThrow('partitions: expected a whole number of at least 1, got 0');
  });
});
