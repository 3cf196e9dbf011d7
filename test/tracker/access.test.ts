import { describe, expect, it } from 'vitest';
import {
  allows,
  authenticate,
  bearerToken,
  maskJson,
  maskPhone,
  matchToken,
  sha256Hex,
  type AccessToken,
} from '../../src/tracker/access.js';
import { accessTokensFileSchema } from '../../src/config/schema.js';
import { loadConfig } from '../../src/config/load.js';

const tokens: AccessToken[] = [
  { name: 'support-1', role: 'read', sha256: sha256Hex('read-secret') },
  { name: 'ops', role: 'operator', sha256: sha256Hex('op-secret') },
];

describe('tracker access (pure)', () => {
  it('reads a bearer token; anything else is missing or malformed', () => {
    expect(bearerToken(undefined)).toBeUndefined();
    expect(bearerToken('Bearer abc')).toBe('abc');
    expect(bearerToken('bearer  abc ')).toBe('abc');
    expect(bearerToken('Basic dXNlcjpwYXNz')).toBeNull();
    expect(bearerToken('Bearer ')).toBeNull();
    expect(bearerToken('Bearer a b')).toBeNull();
    expect(bearerToken(['Bearer a', 'Bearer b'])).toBeNull();
  });

  it('matches a token by its digest, whichever entry holds it, and nothing else', () => {
    expect(matchToken('read-secret', tokens)?.name).toBe('support-1');
    expect(matchToken('op-secret', tokens)?.name).toBe('ops');
    expect(matchToken('op-secre', tokens)).toBeUndefined();
    expect(matchToken('', tokens)).toBeUndefined();
    expect(matchToken('read-secret', [])).toBeUndefined();
    // The digest is compared, never the token: configuring the token itself matches nothing.
    expect(matchToken('read-secret', [{ name: 'x', role: 'read', sha256: 'read-secret' }])).toBeUndefined();
  });

  it('authenticates by token, else by the trusted proxy header when configured; says why not', () => {
    expect(authenticate({ authorization: 'Bearer read-secret' }, { tokens })).toEqual({
      ok: true,
      caller: { name: 'support-1', role: 'read', via: 'token' },
    });
    expect(authenticate({ authorization: 'Bearer nope' }, { tokens })).toEqual({ ok: false, reason: 'unknown' });
    expect(authenticate({ authorization: 'Token x' }, { tokens })).toEqual({ ok: false, reason: 'malformed' });
    expect(authenticate({}, { tokens })).toEqual({ ok: false, reason: 'missing' });
    expect(authenticate({ authorization: 'Bearer read-secret' }, { tokens: [] })).toEqual({
      ok: false,
      reason: 'unknown',
    });
    expect(authenticate({}, { tokens: [] })).toEqual({ ok: false, reason: 'none_configured' });
    // The proxy header counts only when configured.
    expect(authenticate({ 'x-forwarded-user': 'alice' }, { tokens })).toEqual({ ok: false, reason: 'missing' });
    const proxy = { tokens, trustedUserHeader: 'x-forwarded-user', trustedOperators: ['bob'] };
    expect(authenticate({ 'x-forwarded-user': 'alice' }, proxy)).toEqual({
      ok: true,
      caller: { name: 'alice', role: 'read', via: 'proxy' },
    });
    expect(authenticate({ 'x-forwarded-user': 'bob' }, proxy)).toEqual({
      ok: true,
      caller: { name: 'bob', role: 'operator', via: 'proxy' },
    });
    expect(authenticate({ 'x-forwarded-user': '  ' }, proxy)).toEqual({ ok: false, reason: 'missing' });
    // A wrong token is not rescued by the header.
    expect(authenticate({ authorization: 'Bearer nope', 'x-forwarded-user': 'bob' }, proxy)).toEqual({
      ok: false,
      reason: 'unknown',
    });
  });

  it('operators do everything, readers only read', () => {
    expect(allows('operator', 'operator')).toBe(true);
    expect(allows('operator', 'read')).toBe(true);
    expect(allows('read', 'read')).toBe(true);
    expect(allows('read', 'operator')).toBe(false);
  });

  it('masks phone numbers: the last 4 digits stay', () => {
    expect(maskPhone('+15550002222')).toBe('+1555•••2222');
    expect(maskPhone('15550002222')).toBe('1555•••2222');
    expect(maskPhone('+4412345')).toBe('+•••2345');
    expect(maskPhone('+123')).toBe('+•••');
    expect(maskPhone('not-a-number')).toBe('•••mber');
    // Idempotent: another member's masked answer is masked again on the way out.
    expect(maskPhone(maskPhone('+15550002222'))).toBe('+1555•••2222');
    expect(maskJson(maskJson({ recipient: '+15550002222', note: 'to +15550002222' }))).toEqual({
      recipient: '+1555•••2222',
      note: 'to +1555•••2222',
    });
  });

  it('masks every phone number of an answer: known fields, parties, and numbers in text; ids and times stay', () => {
    const state = {
      messageId: 'wamid.01J9',
      recipient: '+15550002222',
      error: { message: 'number +15550002222 is not on WhatsApp', cntTraceId: 'abc123' },
      events: 3,
    };
    expect(maskJson(state)).toEqual({
      messageId: 'wamid.01J9',
      recipient: '+1555•••2222',
      error: { message: 'number +1555•••2222 is not on WhatsApp', cntTraceId: 'abc123' },
      events: 3,
    });
    expect(
      maskJson({ key: 'biz_1:+15550003333', timestamp: '1700000001', sender: { id: '15550003333', name: 'Ann' } }),
    ).toEqual({
      key: 'biz_1:+1555•••3333',
      timestamp: '1700000001',
      sender: { id: '1555•••3333', name: 'Ann' },
    });
    expect(maskJson({ messages: [{ recipient: null }], next: null })).toEqual({
      messages: [{ recipient: null }],
      next: null,
    });
  });

  it("a request's content: +digits in its text masked like any text, a parameter whose value is a phone number masked whole; other values stay", () => {
    const content = {
      text: 'Call us back on +15550009999, order 42',
      templateName: 'callback',
      parameters: [
        { name: 'phone', value: '15550002222' },
        { name: 'spaced', value: '+1 555 000 3333' },
        { name: 'order', value: '42' },
        { name: 'when', value: '2026-11-26' },
      ],
    };
    expect(maskJson({ send: { content } })).toEqual({
      send: {
        content: {
          text: 'Call us back on +1555•••9999, order 42',
          templateName: 'callback',
          parameters: [
            { name: 'phone', value: '1555•••2222' },
            { name: 'spaced', value: '+1555•••3333' },
            { name: 'order', value: '42' },
            { name: 'when', value: '2026-11-26' },
          ],
        },
      },
    });
    expect(maskJson(maskJson({ parameters: content.parameters }))).toEqual(
      maskJson({ parameters: content.parameters }),
    );
  });

  it('the tokens file: names unique, digests not tokens', () => {
    expect(
      accessTokensFileSchema.safeParse([{ name: 'a', role: 'read', sha256: sha256Hex('x').toUpperCase() }]),
    ).toMatchObject({ success: true, data: [{ sha256: sha256Hex('x') }] });
    const twice = accessTokensFileSchema.safeParse([
      { name: 'a', role: 'read', sha256: sha256Hex('x') },
      { name: 'a', role: 'operator', sha256: sha256Hex('y') },
    ]);
    expect(twice.success).toBe(false);
    expect(twice.error?.issues[0]?.message).toMatch(/names two tokens/);
    const plain = accessTokensFileSchema.safeParse([{ name: 'a', role: 'read', sha256: 'my-token' }]);
    expect(plain.error?.issues[0]?.message).toMatch(/never the token itself/);
    expect(accessTokensFileSchema.safeParse([{ name: 'a', role: 'admin', sha256: sha256Hex('x') }]).success).toBe(
      false,
    );
  });

  it('the configuration: defaults closed, a token configured as itself is refused naming the field, the tokens file from its variable', () => {
    const defaults = loadConfig({ env: {} }).tracker;
    expect(defaults).toMatchObject({
      accessTokens: [],
      accessTokensFile: null,
      trustedUserHeader: null,
      trustedUserOperators: [],
      maskRecipients: false,
    });
    expect(() =>
      loadConfig({
        env: {
          MSGBRIDGE__tracker__accessTokens: JSON.stringify([{ name: 'a', role: 'read', sha256: 'my-secret-token' }]),
        },
      }),
    ).toThrow(/tracker\.accessTokens\.0\.sha256: expected the hex SHA-256 of the token/);
    expect(() =>
      loadConfig({
        env: {
          MSGBRIDGE__tracker__accessTokens: JSON.stringify([{ name: 'a', role: 'read', sha256: 'my-secret-token' }]),
        },
      }),
    ).not.toThrow(/my-secret-token/);
    expect(
      loadConfig({ env: { MSGBRIDGE_TRACKER_TOKENS_FILE: '/etc/msgbridge/tokens.json' } }).tracker.accessTokensFile,
    ).toBe('/etc/msgbridge/tokens.json');
    expect(
      loadConfig({ env: { MSGBRIDGE__tracker__trustedUserHeader: 'X-Forwarded-User' } }).tracker.trustedUserHeader,
    ).toBe('x-forwarded-user');
  });
});
