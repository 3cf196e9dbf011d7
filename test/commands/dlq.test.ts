import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli.js';
import { loadConfig } from '../../src/config/load.js';
import {
  codeFromReason,
  deadLetterOf,
  configuredDlqs,
  matches,
  recheck,
  recheckContext,
  redriveHeaders,
  type DeadLetter,
} from '../../src/commands/dlq-rules.js';
import { defaultRedriveName, parseCursor, parseRate, parseRedriveName, parseTimeArg } from '../../src/commands/dlq.js';
import { createWebhookHandler, rulesFromConfig } from '../../src/ingress/handle-webhook.js';
import type { ConsumedRecord } from '../../src/kafka/group-consumer.js';
import { runCli } from '../helpers/cli.js';
import { hmacBase64 } from '../helpers/signing.js';

const FIXTURES = join(import.meta.dirname, '..', 'fixtures', 'contracts');
const SECRET = 'golden-records-signing-secret';
const NOW = Date.parse('2026-11-20T12:00:00Z');

interface Golden {
  note: string;
  key: string | null;
  headers: Record<string, string>;
  value: string;
}
const golden = (version: string, topic: string): Golden[] =>
  (JSON.parse(readFileSync(join(FIXTURES, version, `${topic}.json`), 'utf8')) as { records: Golden[] }).records;

/** Businesses: biz_1 with the golden secret (and an API key); `extra` more. */
function config(
  extra: { id: string; signingSecrets: string[]; apiKey: string | null }[] = [],
  overrides: Record<string, unknown> = {},
) {
  return loadConfig({
    env: {},
    overrides: {
      businesses: [{ id: 'biz_1', signingSecrets: [SECRET], apiKey: 'k1' }, ...extra],
      ...overrides,
    } as never,
  });
}

let offset = 0;
function letter(topic: string, g: Pick<Golden, 'key' | 'headers' | 'value'>, timestamp = NOW - 60_000): DeadLetter {
  const record: ConsumedRecord = {
    topic,
    partition: 0,
    offset: String(offset++),
    timestamp: String(timestamp),
    key: g.key === null ? null : Buffer.from(g.key),
    value: Buffer.from(g.value),
    headers: g.headers,
  };
  return deadLetterOf(record, configuredDlqs(config()));
}

describe('dlq rules: codes, filters, the re-check', () => {
  it('reads the code of every golden dead letter: error-code, or derived from error-reason for 0.1.0 records', () => {
    for (const version of ['0.1.0', '0.2.0']) {
      const codes = golden(version, 'send-requests-dlq').map((g) => letter('send-requests-dlq', g).code);
      expect(codes, version).toEqual([
        'RELAY_INVALID_JSON',
        'RELAY_INVALID_FIELD',
        'RELAY_UNKNOWN_TYPE',
        'RELAY_UNKNOWN_BUSINESS',
      ]);
      const webhookCodes = golden(version, 'webhooks-dlq').map((g) => letter('webhooks-dlq', g).code);
      expect(webhookCodes, version).toEqual(['not-json', 'schema', 'topic-mismatch', 'topic-undetectable']);
    }
    // 0.1.0 records carry no error-code: the derivation agrees with what 0.2.0 wrote for the same inputs.
    const v2 = golden('0.2.0', 'send-requests-dlq').map((g) => g.headers['error-code']);
    expect(
      golden('0.1.0', 'send-requests-dlq').map((g) => codeFromReason('send-requests', g.headers['error-reason']!)),
    ).toEqual(v2);
    expect(codeFromReason('send-requests', 'businessId is missing and 2 businesses are configured')).toBe(
      'RELAY_AMBIGUOUS_BUSINESS',
    );
    expect(codeFromReason('send-requests', 'not a valid send request: ttlMs: too big')).toBe('RELAY_INVALID_EXPIRY');
    expect(codeFromReason('send-requests', 'not a valid send request: (root): expected object')).toBe(
      'RELAY_INVALID_REQUEST',
    );
    expect(codeFromReason(undefined, 'whatever')).toBe('unknown');
  });

  it('filters by code, business and time', () => {
    const l = letter('send-requests-dlq', golden('0.2.0', 'send-requests-dlq')[3]!, NOW);
    expect(matches(l, {})).toBe(true);
    expect(matches(l, { code: 'RELAY_UNKNOWN_BUSINESS', business: 'biz_9' })).toBe(true);
    expect(matches(l, { code: 'RELAY_INVALID_JSON' })).toBe(false);
    expect(matches(l, { business: 'biz_1' })).toBe(false);
    expect(matches(l, { since: NOW, until: NOW })).toBe(true);
    expect(matches(l, { since: NOW + 1 })).toBe(false);
    expect(matches(l, { until: NOW - 1 })).toBe(false);
  });

  it('every golden webhook dead letter of 0.1.0 and 0.2.0 fails again with no fix, with its reason, through the ingress handler', () => {
    const context = recheckContext(config(), () => NOW);
    for (const version of ['0.1.0', '0.2.0']) {
      const outcomes = golden(version, 'webhooks-dlq').map((g) => recheck(letter('webhooks-dlq', g), context));
      expect(outcomes.map((o) => o.kind)).toEqual(['fails', 'fails', 'fails', 'fails']);
      expect(outcomes.map((o) => (o.kind === 'fails' ? o.code : ''))).toEqual([
        'not-json',
        'schema',
        'topic-mismatch',
        'topic-undetectable',
      ]);
      expect(outcomes[1]).toMatchObject({
        reason: 'statusUpdate.error: a delivery_failed status must carry the error object',
      });
    }
  });

  it('a webhook the ingress would take now is redriven as the ingress would have published it (topic, key, headers), event-id kept; a rotated secret or a removed business fails again', () => {
    const body = JSON.stringify({
      topic: 'delivery_status',
      timestamp: '1795168810',
      sender: { channelType: 'whatsapp', id: '+15550001111' },
      recipient: { channelType: 'whatsapp', id: '+15550002222' },
      statusUpdate: { id: '01JD0G7Q3V4M8X2K5N9P1R6T09', status: 'delivered' },
    });
    const headers = {
      'event-id': 'e',
      'business-id': 'biz_1',
      'received-at': String(NOW - 3_600_000),
      'content-type': 'application/json',
      schema: 'webhooks-dlq/v1',
      'x-service-hmac-sha256': hmacBase64(SECRET, body),
      'error-reason': 'schema: statusUpdate.status: an older release did not know it',
      'webhook-topic': 'delivery_status',
    };
    const cfg = config();
    const expected = createWebhookHandler(rulesFromConfig(cfg)).handle({
      businessId: 'biz_1',
      pathTopic: 'delivery_status',
      body: Buffer.from(body),
      signature: headers['x-service-hmac-sha256'],
      contentType: 'application/json',
      traceparent: undefined,
      receivedAt: NOW - 3_600_000,
    });
    expect(expected).toMatchObject({ kind: 'publish', destination: 'event' });
    // 0.1.0 shape (no original-topic): the topic is derived from webhook-topic.
    const old = recheck(
      letter('webhooks-dlq', { key: 'biz_1', headers, value: body }),
      recheckContext(cfg, () => NOW),
    );
    expect(old).toMatchObject({
      kind: 'redrive',
      topic: 'delivery_status',
      key: '01JD0G7Q3V4M8X2K5N9P1R6T09',
      derived: expect.stringMatching(/webhook-topic/),
    });
    if (expected.kind !== 'publish' || old.kind !== 'redrive') throw new Error('unreachable');
    expect(old.headers).toEqual(expected.record.headers);
    expect(old.value.toString()).toBe(body);
    // 0.2.0 shape: original-topic is where it goes; a renamed topic is refused rather than guessed.
    expect(
      recheck(
        letter('webhooks-dlq', {
          key: 'biz_1',
          headers: { ...headers, 'original-topic': 'delivery_status' },
          value: body,
        }),
        recheckContext(cfg, () => NOW),
      ),
    ).toMatchObject({ kind: 'redrive', topic: 'delivery_status' });
    expect(
      recheck(
        letter('webhooks-dlq', {
          key: 'biz_1',
          headers: { ...headers, 'original-topic': 'statuses-old' },
          value: body,
        }),
        recheckContext(cfg, () => NOW),
      ),
    ).toMatchObject({ kind: 'fails', code: 'topic-changed' });
    // The secret was rotated away since: the ingress would answer 403 now.
    const rotated = config([], { businesses: [{ id: 'biz_1', signingSecrets: ['a-new-secret'], apiKey: 'k1' }] });
    expect(
      recheck(
        letter('webhooks-dlq', { key: 'biz_1', headers, value: body }),
        recheckContext(rotated, () => NOW),
      ),
    ).toMatchObject({ kind: 'fails', code: 'bad-signature' });
    const removed = config([], { businesses: [{ id: 'biz_2', signingSecrets: [SECRET], apiKey: 'k2' }] });
    expect(
      recheck(
        letter('webhooks-dlq', { key: 'biz_1', headers, value: body }),
        recheckContext(removed, () => NOW),
      ),
    ).toMatchObject({ kind: 'fails', code: 'unknown-business' });
  });

  it('golden send-request dead letters of 0.1.0 and 0.2.0: the unknown business is redriven once configured (key, bytes, request headers, event-id kept); the others fail again with the sender’s own reason', () => {
    for (const version of ['0.1.0', '0.2.0']) {
      const records = golden(version, 'send-requests-dlq');
      const without = recheckContext(config(), () => NOW);
      expect(
        records
          .map((g) => recheck(letter('send-requests-dlq', g), without))
          .map((o) => (o.kind === 'fails' ? o.code : o.kind)),
      ).toEqual(['RELAY_INVALID_JSON', 'RELAY_INVALID_FIELD', 'RELAY_UNKNOWN_TYPE', 'RELAY_UNKNOWN_BUSINESS']);
      const withBiz9 = recheckContext(config([{ id: 'biz_9', signingSecrets: [], apiKey: 'k9' }]), () => NOW);
      const unknown = records[3]!;
      const outcome = recheck(letter('send-requests-dlq', unknown), withBiz9);
      expect(outcome, version).toMatchObject({ kind: 'redrive', topic: unknown.headers['source-topic'] });
      if (outcome.kind !== 'redrive') throw new Error('unreachable');
      expect(outcome.key?.toString()).toBe(unknown.key);
      expect(outcome.value.toString()).toBe(unknown.value);
      expect(outcome.headers['event-id']).toBe(unknown.headers['event-id']);
      for (const own of [
        'error-reason',
        'error-code',
        'schema',
        'source-topic',
        'source-offset',
        'received-at',
        'business-id',
        'content-type',
      ])
        expect(outcome.headers[own], own).toBeUndefined();
      // The request's own headers ride along (0.2.0's field-invalid record carries correlation-id).
      const invalid = records[1]!;
      expect(invalid.headers['correlation-id']).toBeDefined();
    }
  });

  it('a send request past its expiry, or dead-lettered as a reference, is not redriven; a request without a key is keyed by its recipient', () => {
    const context = recheckContext(config(), () => NOW);
    const request = (extra: Record<string, unknown>) =>
      JSON.stringify({
        requestId: 'r1',
        businessId: 'biz_1',
        type: 'text',
        recipient: { channelType: 'whatsapp', id: '+15550002222' },
        message: { text: 'hi' },
        ...extra,
      });
    const headers = {
      'event-id': 'e',
      schema: 'send-requests-dlq/v1',
      'error-reason': 'unknown business',
      'source-topic': 'send-requests',
    };
    expect(
      recheck(
        letter('send-requests-dlq', { key: '+15550002222', headers, value: request({ ttlMs: 1000 }) }, NOW - 5_000),
        context,
      ),
    ).toMatchObject({
      kind: 'fails',
      code: 'RELAY_EXPIRED',
      reason: expect.stringMatching(/ttlMs/),
    });
    // sender.maxRequestAgeMs (24 h) counts from the dead letter's time, as it did for the request.
    expect(
      recheck(
        letter('send-requests-dlq', { key: '+15550002222', headers, value: request({}) }, NOW - 25 * 3_600_000),
        context,
      ),
    ).toMatchObject({
      kind: 'fails',
      code: 'RELAY_EXPIRED',
      reason: expect.stringMatching(/maxRequestAgeMs/),
    });
    expect(
      recheck(
        letter('send-requests-dlq', {
          key: '+15550002222',
          headers: { ...headers, 'dlq-value': 'reference', 'source-partition': '3', 'source-offset': '42' },
          value: '{}',
        }),
        context,
      ),
    ).toMatchObject({
      kind: 'fails',
      code: 'RELAY_DLQ_REFERENCE',
      reason: expect.stringContaining('send-requests/3/42'),
    });
    expect(recheck(letter('send-requests-dlq', { key: null, headers, value: request({}) }), context)).toMatchObject({
      kind: 'redrive',
      key: '+15550002222',
      derived: expect.stringMatching(/recipient/),
    });
    // No source-topic (a record that lost it): the configured send-requests topic.
    const { 'source-topic': _, ...noSource } = headers;
    expect(
      recheck(letter('send-requests-dlq', { key: 'k', headers: noSource, value: request({}) }), context),
    ).toMatchObject({ kind: 'redrive', topic: 'send-requests' });
  });

  it('a record that is no dead letter of either role is refused', () => {
    const context = recheckContext(config(), () => NOW);
    expect(recheck(letter('elsewhere', { key: null, headers: {}, value: 'x' }), context)).toMatchObject({
      kind: 'fails',
      code: 'NOT_A_DEAD_LETTER',
    });
    expect(redriveHeaders({ topic: 'webhooks-dlq', partition: 2, offset: '17' }, 5)).toEqual({
      'redriven-from': 'webhooks-dlq/2/17',
      'redriven-at': '5',
    });
  });
});

describe('dlq arguments', () => {
  afterEach(() => vi.restoreAllMocks());
  const quiet = () => {
    const err: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => (err.push(String(chunk)), true));
    return err;
  };

  it('parses times, rates, names and cursors, and refuses the rest', () => {
    expect(parseTimeArg('--since', () => NOW)('2h').ms).toBe(NOW - 7_200_000);
    expect(parseTimeArg('--since')('2026-11-20T10:00:00Z').ms).toBe(Date.parse('2026-11-20T10:00:00Z'));
    expect(parseTimeArg('--since')('2026-11-20').ms).toBe(Date.parse('2026-11-20T00:00:00Z'));
    expect(parseTimeArg('--since')('1795168800000').ms).toBe(1795168800000);
    for (const bad of ['yesterday', '2026-11-20T10:00:00', '2h ago', '', '-5m'])
      expect(() => parseTimeArg('--since')(bad), bad).toThrow(/--since expects an ISO time with a zone/);
    expect(parseRate('100')).toBe(100);
    expect(parseRate('100/s')).toBe(100);
    for (const bad of ['0', '-1', 'fast', '100/m', '1000001'])
      expect(() => parseRate(bad), bad).toThrow(/--rate expects/);
    expect(parseRedriveName('incident-42.biz_9')).toBe('incident-42.biz_9');
    for (const bad of ['', 'has space', '.dot', 'x'.repeat(101), 'a/b'])
      expect(() => parseRedriveName(bad), bad).toThrow(/--name expects/);
    expect(parseCursor('0:12,3:4')).toEqual(
      new Map([
        [0, 12],
        [3, 4],
      ]),
    );
    for (const bad of ['0', '0:x', '0:1,0:2', '']) expect(() => parseCursor(bad), bad).toThrow(/--from expects/);
    // The default name: the same command, the same redrive; other filters, another.
    const a = defaultRedriveName('send-requests-dlq', { code: 'RELAY_UNKNOWN_BUSINESS' });
    expect(a).toBe(defaultRedriveName('send-requests-dlq', { code: 'RELAY_UNKNOWN_BUSINESS' }));
    expect(a).not.toBe(defaultRedriveName('send-requests-dlq', { code: 'RELAY_INVALID_JSON' }));
    expect(defaultRedriveName('send-requests-dlq', {})).toBe('send-requests-dlq.all');
    expect(() => parseRedriveName(a)).not.toThrow();
  });

  it.each([
    [['dlq']],
    [['dlq', 'list']],
    [['dlq', 'stats']],
    [['dlq', 'redrive']],
    [['dlq', 'purge', 'webhooks-dlq']],
    [['dlq', 'list', 'webhooks-dlq', '--max', '0']],
    [['dlq', 'list', 'webhooks-dlq', '--max', 'many']],
    [['dlq', 'list', 'webhooks-dlq', '--since', 'last tuesday']],
    [['dlq', 'list', 'webhooks-dlq', '--until', '2026-13-45']],
    [['dlq', 'list', 'webhooks-dlq', '--from', 'p0']],
    [['dlq', 'list', 'webhooks-dlq', '--code', '']],
    [['dlq', 'list', 'webhooks-dlq', '--business', ' ']],
    [['dlq', 'redrive', 'webhooks-dlq', '--rate', '0']],
    [['dlq', 'redrive', 'webhooks-dlq', '--rate', 'lots']],
    [['dlq', 'redrive', 'webhooks-dlq', '--name', 'no spaces please']],
    [['dlq', 'redrive', 'webhooks-dlq', '--bogus']],
    [['dlq', 'stats', 'webhooks-dlq', '--code', 'x']],
  ])('rejects %j with exit code 2', async (args) => {
    quiet();
    expect(await main(['node', 'msgbridge', ...args])).toBe(2);
  });

  it('refuses, before any Kafka, a redrive of a topic that is not a configured DLQ, --until before --since, and no confirmation possible', async () => {
    const env = { KAFKA_BROKERS: '127.0.0.1:1', MSGBRIDGE_BUSINESS_ID: 'biz_1', MSGBRIDGE_API_KEY: 'k' };
    vi.stubEnv('KAFKA_BROKERS', env.KAFKA_BROKERS);
    const err = quiet();
    expect(await main(['node', 'msgbridge', 'dlq', 'redrive', 'send-requests', '--yes'])).toBe(2);
    expect(err.join('')).toMatch(
      /"send-requests" is not a configured DLQ topic \(webhooks-dlq, send-requests-dlq\): refusing to redrive it; pass --allow-any-topic/,
    );
    err.length = 0;
    expect(
      await main([
        'node',
        'msgbridge',
        'dlq',
        'list',
        'webhooks-dlq',
        '--since',
        '2026-11-20T10:00:00Z',
        '--until',
        '2026-11-20T09:00:00Z',
      ]),
    ).toBe(2);
    expect(err.join('')).toMatch(/--until \(2026-11-20T09:00:00.000Z\) is before --since \(2026-11-20T10:00:00.000Z\)/);
    err.length = 0;
    // The test runner's stdin is not a terminal.
    expect(process.stdin.isTTY).toBeFalsy();
    expect(await main(['node', 'msgbridge', 'dlq', 'redrive', 'webhooks-dlq'])).toBe(2);
    expect(err.join('')).toMatch(/a redrive asks for confirmation, but stdin is not a terminal: pass --yes/);
    vi.unstubAllEnvs();
  });

  it('an unreachable Kafka is one line naming the cause, exit code 2, for every dlq command', async () => {
    const commands = [
      ['dlq', 'stats', 'webhooks-dlq'],
      ['dlq', 'list', 'send-requests-dlq'],
      ['dlq', 'redrive', 'send-requests-dlq', '--yes'],
    ];
    // Side by side: each waits for its client's retries to give up.
    const results = await Promise.all(
      commands.map((args) =>
        runCli(args, { KAFKA_BROKERS: '127.0.0.1:1', MSGBRIDGE_BUSINESS_ID: 'biz_1', MSGBRIDGE_API_KEY: 'k' }),
      ),
    );
    results.forEach(({ code, stderr }, i) => {
      expect(code, commands[i]!.join(' ')).toBe(2);
      expect(stderr.trim().split('\n')).toHaveLength(1);
      expect(stderr).toMatch(/^msgbridge: cannot use Kafka at 127\.0\.0\.1:1: unreachable: no broker answered/);
      expect(stderr).not.toMatch(/\n\s+at /);
    });
  });
});
