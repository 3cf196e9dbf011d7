import { describe, expect, it } from 'vitest';
import { chooseProxy, noProxyMatch, parseProxyUrl, redact } from '../../src/platform/proxy.js';

const https = { protocol: 'https:' as const, host: 'api.provider.example', port: 443 };
const http = { protocol: 'http:' as const, host: '10.1.2.3', port: 8090 };

function choose(target: typeof https | typeof http, env: Record<string, string>, configured: string | null = null) {
  return chooseProxy(target, configured, env);
}

function refusal(run: () => unknown): string {
  try {
    run();
  } catch (err) {
    expect((err as { code?: string }).code).toBe('CONFIG_INVALID');
    return (err as Error).message;
  }
  throw new Error('expected a CONFIG_INVALID error');
}

describe('proxy URLs', () => {
  it('reads scheme-less, bracketed IPv6 and credentialled URLs; the port defaults to 1080 as curl does', () => {
    expect(parseProxyUrl('proxy.corp:3128')).toEqual({
      host: 'proxy.corp',
      port: 3128,
      authorization: undefined,
      display: 'http://proxy.corp:3128',
    });
    expect(parseProxyUrl('http://proxy.corp')).toMatchObject({ port: 1080, display: 'http://proxy.corp:1080' });
    expect(parseProxyUrl('http://[::1]:3128/')).toMatchObject({
      host: '::1',
      port: 3128,
      display: 'http://[::1]:3128',
    });
    // Percent-decoded, then Basic: "us er:p@ss:w" in base64.
    const withUser = parseProxyUrl('http://us%20er:p%40ss%3Aw@proxy.corp:8080') as {
      authorization: string;
      display: string;
    };
    expect(withUser.authorization).toBe(`Basic ${Buffer.from('us er:p@ss:w').toString('base64')}`);
    expect(withUser.display).toBe('http://proxy.corp:8080');
  });

  it('refuses other schemes, paths and bad ports in one line that never shows the password', () => {
    expect(parseProxyUrl('socks5://proxy:1080')).toEqual({
      error: expect.stringContaining('a socks5:// proxy is not supported'),
    });
    expect(parseProxyUrl('https://proxy:443')).toEqual({
      error: expect.stringContaining('a https:// proxy is not supported'),
    });
    const withPath = parseProxyUrl('http://user:s3cret@proxy:3128/path') as { error: string };
    expect(withPath.error).toBe(
      'a proxy URL has no path, query or fragment: expected http://[user:password@]host[:port] (got http://***@proxy:3128/path)',
    );
    expect(parseProxyUrl('http://proxy:0')).toEqual({ error: 'port 0 is not from 1 to 65535' });
    expect((parseProxyUrl('http://user:s3cret@pro xy') as { error: string }).error).not.toContain('s3cret');
    expect(redact('user:pw@host:1')).toBe('***@host:1');
  });
});

describe('choosing the proxy as curl does', () => {
  it('https targets read https_proxy before HTTPS_PROXY, then ALL_PROXY; http targets http_proxy, then HTTP_PROXY', () => {
    expect(choose(https, { HTTPS_PROXY: 'http://upper:1', https_proxy: 'http://lower:2' })).toMatchObject({
      proxy: { host: 'lower' },
      reason: 'from https_proxy',
    });
    expect(choose(https, { HTTPS_PROXY: 'http://upper:1', HTTP_PROXY: 'http://other:3' })).toMatchObject({
      proxy: { host: 'upper' },
      reason: 'from HTTPS_PROXY',
    });
    expect(choose(https, { HTTP_PROXY: 'http://other:3', ALL_PROXY: 'all:4' })).toMatchObject({
      proxy: { host: 'all', port: 4 },
      reason: 'from ALL_PROXY',
    });
    expect(choose(https, { HTTP_PROXY: 'http://other:3' })).toEqual({
      proxy: undefined,
      reason: 'no https_proxy, HTTPS_PROXY or ALL_PROXY is set',
    });
    expect(choose(http, { HTTP_PROXY: 'http://upper:1' })).toMatchObject({
      proxy: { host: 'upper' },
      reason: 'from HTTP_PROXY',
    });
    expect(choose(http, { http_proxy: 'http://lower:2', HTTP_PROXY: 'http://upper:1' })).toMatchObject({
      proxy: { host: 'lower' },
    });
    // Empty means unset.
    expect(choose(http, { http_proxy: ' ', HTTP_PROXY: 'http://upper:1' })).toMatchObject({ proxy: { host: 'upper' } });
  });

  it('a configured proxy overrides the variables, "direct" turns proxies off; NO_PROXY applies to both', () => {
    expect(choose(https, { HTTPS_PROXY: 'http://env:1' }, 'http://configured:2')).toMatchObject({
      proxy: { host: 'configured' },
      reason: 'from provider.proxy',
    });
    expect(choose(https, { HTTPS_PROXY: 'http://env:1' }, 'direct')).toEqual({
      proxy: undefined,
      reason: 'provider.proxy is "direct"',
    });
    expect(choose(https, { NO_PROXY: '.provider.example' }, 'http://configured:2')).toEqual({
      proxy: undefined,
      reason: 'NO_PROXY names it (".provider.example")',
    });
    expect(choose(https, { no_proxy: 'other', NO_PROXY: 'provider.example' }, 'http://configured:2')).toMatchObject({
      proxy: { host: 'configured' },
    });
  });

  it('bad values are one CONFIG_INVALID line naming the variable', () => {
    expect(refusal(() => choose(https, { HTTPS_PROXY: 'socks5h://proxy:1080' }))).toBe(
      'invalid configuration:\n  - HTTPS_PROXY: a socks5h:// proxy is not supported: name an http:// proxy (https targets go through it in a CONNECT tunnel, TLS end to end)',
    );
    expect(refusal(() => choose(http, { HTTP_PROXY: 'http://proxy:1', NO_PROXY: '10.0.0.0/40' }))).toBe(
      'invalid configuration:\n  - NO_PROXY: entry "10.0.0.0/40": a CIDR prefix is 0 to 32',
    );
    expect(refusal(() => choose(https, {}, 'ftp://x'))).toContain('provider.proxy: a ftp:// proxy is not supported');
    // A variable that does not apply to the target is not read.
    expect(choose(https, { HTTP_PROXY: 'socks5://x' })).toMatchObject({ proxy: undefined });
  });
});

describe('NO_PROXY', () => {
  const match = (list: string, host: string, port = 443) => noProxyMatch(list, host, port);

  it('names match themselves and every name below, with or without a leading dot, never a longer name', () => {
    expect(match('example.com', 'example.com')).toBe('example.com');
    expect(match('example.com', 'api.example.com')).toBe('example.com');
    expect(match('.example.com', 'example.com')).toBe('.example.com');
    expect(match('.example.com', 'a.b.example.com')).toBe('.example.com');
    expect(match('*.example.com', 'api.example.com')).toBe('*.example.com');
    expect(match('example.com', 'notexample.com')).toBeUndefined();
    expect(match('example.com', 'example.com.evil')).toBeUndefined();
    expect(match('Example.COM.', 'API.example.com.')).toBe('Example.COM.');
  });

  it('"*" matches every host; entries are separated by commas or white space', () => {
    expect(match('*', 'anything')).toBe('*');
    expect(match('localhost, internal  corp.example,api.example.com', 'api.example.com')).toBe('api.example.com');
    expect(match('localhost corp.example', 'x.corp.example')).toBe('corp.example');
    expect(match(' , ', 'x')).toBeUndefined();
  });

  it('ports: an entry with a port matches that port only', () => {
    expect(match('api.example.com:8443', 'api.example.com', 8443)).toBe('api.example.com:8443');
    expect(match('api.example.com:8443', 'api.example.com', 443)).toBeUndefined();
    expect(match('[::1]:8090', '::1', 8090)).toBe('[::1]:8090');
    expect(match('10.0.0.0/8:8090', '10.1.2.3', 8090)).toBe('10.0.0.0/8:8090');
    expect(match('10.0.0.0/8:8090', '10.1.2.3', 80)).toBeUndefined();
    expect(match('host:99999', 'host')).toEqual({ error: 'entry "host:99999": port 99999 is not from 1 to 65535' });
  });

  it('IP addresses and CIDR ranges match hosts given as addresses, IPv4 and IPv6; a name is never resolved', () => {
    expect(match('10.1.2.3', '10.1.2.3')).toBe('10.1.2.3');
    expect(match('10.0.0.0/8', '10.255.0.1')).toBe('10.0.0.0/8');
    expect(match('10.0.0.0/8', '11.0.0.1')).toBeUndefined();
    expect(match('192.168.0.0/16', '192.168.44.1')).toBe('192.168.0.0/16');
    expect(match('::1', '::1')).toBe('::1');
    expect(match('fd00::/8', 'fd12:3456::1')).toBe('fd00::/8');
    expect(match('fd00::/8', 'fe80::1')).toBeUndefined();
    expect(match('127.0.0.0/8', 'localhost')).toBeUndefined();
    expect(match('10.0.0.0/8', '::ffff:1')).toBeUndefined();
  });

  it('refuses what it cannot read, naming the entry', () => {
    expect(match('10.0.0.0/x', '10.0.0.1')).toEqual({ error: 'entry "10.0.0.0/x": a CIDR prefix is 0 to 32' });
    expect(match('example.com/8', 'example.com')).toEqual({
      error: 'entry "example.com/8": a CIDR range needs an IP address',
    });
    expect(match('exa*mple.com', 'example.com')).toEqual({
      error: 'entry "exa*mple.com" is not a host name, domain, IP address or CIDR range',
    });
  });
});
