import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createProviderClient, interpret, type ProviderClient } from '../../src/sender/provider-client.js';
import { maybeCreated, providerFailing, classify } from '../../src/sender/retry-policy.js';
import { closedPort, proxyOf as proxy, startTestProxy } from '../helpers/http-proxy.js';

interface Seen {
  method: string;
  url: string;
  rawHeaders: string[];
  body: string;
}

/** A real HTTP server on port 0 answering with `reply`. */
async function server(
  reply: (req: IncomingMessage, res: ServerResponse, seen: Seen) => void,
): Promise<{ url: string; seen: Seen[]; connections: () => number; close: () => Promise<void> }> {
  const seen: Seen[] = [];
  let connections = 0;
  const srv: Server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const s = { method: req.method ?? '', url: req.url ?? '', rawHeaders: req.rawHeaders, body };
      seen.push(s);
      reply(req, res, s);
    });
  });
  srv.on('connection', () => (connections += 1));
  await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
  const { port } = srv.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    connections: () => connections,
    close: () =>
      new Promise<void>((resolve) => {
        srv.closeAllConnections();
        srv.close(() => resolve());
      }),
  };
}

const closers: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0)) await close();
});

function client(url: string, options: Partial<Parameters<typeof createProviderClient>[0]> = {}): ProviderClient {
  const c = createProviderClient({ baseUrl: url, connections: 4, callTimeoutMs: 2000, ...options });
  closers.push(() => c.close());
  return c;
}

describe('provider client (keep-alive HTTP/1.1 pool against a real server)', () => {
  it('posts JSON to the operation path with Accept, Content-Type and X-API-Key exactly, over kept-alive connections', async () => {
    const s = await server((_req, res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"id":"01JABCDEFGHJKMNPQRSTVWXYZ0"}'),
    );
    closers.push(s.close);
    const c = client(`${s.url}/base/`);
    const body = { recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hi' } };
    for (let i = 0; i < 5; i++) {
      expect(await c.send('text', 'biz 1', 'secret-key', body)).toEqual({
        kind: 'accepted',
        status: 200,
        messageId: '01JABCDEFGHJKMNPQRSTVWXYZ0',
      });
    }
    expect(
      await c.send('template', 'biz_1', 'secret-key', { number: '+1555', templateName: 't', parameters: [] }),
    ).toMatchObject({ kind: 'accepted' });
    const first = s.seen[0]!;
    expect(first.method).toBe('POST');
    expect(first.url).toBe('/base/v1/businesses/biz%201/send/messages');
    expect(s.seen.at(-1)!.url).toBe('/base/v1/businesses/biz_1/send/whatsapp_templated_messages');
    const names = first.rawHeaders.filter((_, i) => i % 2 === 0);
    expect(names).toEqual(expect.arrayContaining(['Accept', 'Content-Type', 'X-API-Key']));
    const header = (name: string) => first.rawHeaders[first.rawHeaders.indexOf(name) + 1];
    expect(header('Accept')).toBe('application/json');
    expect(header('Content-Type')).toBe('application/json');
    expect(header('X-API-Key')).toBe('secret-key');
    expect(JSON.parse(first.body)).toEqual(body);
    // Six sequential calls over kept-alive connections (last-in first-out reuse: one connection).
    expect(s.seen).toHaveLength(6);
    expect(s.connections()).toBe(1);
  });

  it('treats any 2xx with an id as success, and a 2xx without one as an invalid response', async () => {
    expect(interpret(201, undefined, '{"id":"m1","extra":true}')).toEqual({
      kind: 'accepted',
      status: 201,
      messageId: 'm1',
    });
    expect(interpret(202, undefined, '{"id":"m2"}')).toMatchObject({ kind: 'accepted', messageId: 'm2' });
    expect(interpret(200, undefined, '{}')).toMatchObject({ kind: 'invalid-response', status: 200 });
    expect(interpret(204, undefined, '')).toMatchObject({ kind: 'invalid-response', status: 204 });
  });

  it('reads error bodies as the provider error object when they are one, and keeps Retry-After', async () => {
    const error = {
      message: 'slow down',
      type: 'ERROR_TYPE_INVALID_REQUEST',
      code: 'ERROR_CODE_BUSINESS_REACHED_LIMITS',
      userTitle: 't',
      userMessage: 'm',
      cntTraceId: '123',
      details: {},
    };
    const s = await server((req, res) => {
      if (req.url!.includes('plain'))
        res.writeHead(502, { 'content-type': 'text/html' }).end('<html>bad gateway</html>');
      else res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '3' }).end(JSON.stringify(error));
    });
    closers.push(s.close);
    expect(await client(s.url).send('text', 'biz', 'k', {})).toEqual({
      kind: 'http-error',
      status: 429,
      retryAfter: '3',
      error,
      bodySnippet: undefined,
    });
    expect(await client(s.url).send('text', 'plain', 'k', {})).toEqual({
      kind: 'http-error',
      status: 502,
      retryAfter: undefined,
      error: undefined,
      bodySnippet: '<html>bad gateway</html>',
    });
  });

  it('ends a call at its deadline as a timeout, and a refused connection as a network error', async () => {
    const s = await server(() => {
      /* never answers */
    });
    closers.push(s.close);
    const outcome = await client(s.url, { callTimeoutMs: 200 }).send('text', 'biz', 'k', {});
    expect(outcome).toMatchObject({ kind: 'timeout' });
    const refused = await client('http://127.0.0.1:9', { callTimeoutMs: 1000 }).send('text', 'biz', 'k', {});
    expect(refused).toMatchObject({ kind: 'network', code: 'ECONNREFUSED' });
  });
  it('holds concurrent calls to its connections, and refuses an API key that cannot be a header without calling', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    const s = await server((_req, res) => {
      inFlight += 1;
      maxInFlight = Math.max(maxInFlight, inFlight);
      setTimeout(() => {
        inFlight -= 1;
        res.writeHead(200, { 'content-type': 'application/json' }).end('{"id":"m"}');
      }, 10);
    });
    closers.push(s.close);
    const c = client(s.url, { connections: 4 });
    const outcomes = await Promise.all(Array.from({ length: 40 }, (_, i) => c.send('text', 'biz', 'k', { i })));
    expect(outcomes.every((o) => o.kind === 'accepted')).toBe(true);
    expect(maxInFlight).toBe(4);
    expect(s.connections()).toBe(4);
    expect(await c.send('text', 'biz', 'k\r\nX-Injected: 1', {})).toMatchObject({
      kind: 'network',
      code: 'INVALID_API_KEY',
      requestWritten: false,
    });
    expect(s.seen).toHaveLength(40);
  });
});

describe('provider client through an HTTP proxy', () => {
  it('an http provider: absolute-form requests with Proxy-Authorization to the proxy; the provider gets its usual request', async () => {
    const s = await server((_req, res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"id":"m-proxied"}'),
    );
    closers.push(s.close);
    const p = await startTestProxy({ credentials: 'relay:pw' });
    closers.push(p.close);
    const c = client(`${s.url}/base`, { proxy: proxy(`http://relay:pw@127.0.0.1:${p.port}`) });
    for (let i = 0; i < 3; i++)
      expect(await c.send('text', 'biz_1', 'k', { message: { text: 'hi' } })).toEqual({
        kind: 'accepted',
        status: 200,
        messageId: 'm-proxied',
      });
    expect(p.counts().forwarded).toBe(3);
    expect(p.authorizations).toEqual(
      Array.from({ length: 3 }, () => `Basic ${Buffer.from('relay:pw').toString('base64')}`),
    );
    expect(s.seen.map((x) => x.url)).toEqual(
      Array.from({ length: 3 }, () => '/base/v1/businesses/biz_1/send/messages'),
    );
    expect(s.seen[0]!.rawHeaders.map((h) => h.toLowerCase())).not.toContain('proxy-authorization');
  });

  it('refusals are not maybe-sent and are retried; one change reported each way, not one per call', async () => {
    const s = await server((_req, res) =>
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"id":"m1"}'),
    );
    closers.push(s.close);
    const changes: [boolean, string][] = [];
    const onProxyChange = (working: boolean, detail: string) => changes.push([working, detail]);

    // 407 to an absolute-form request: the proxy's refusal, not the provider's 4xx (which would be permanent).
    const refusing = await startTestProxy({ refuse: 407 });
    closers.push(refusing.close);
    const c407 = client(s.url, { proxy: proxy(`http://user:hunter2@127.0.0.1:${refusing.port}`), onProxyChange });
    const first = await c407.send('text', 'biz_1', 'k', {});
    expect(first).toEqual({
      kind: 'network',
      code: 'PROXY_REFUSED',
      message: `the proxy http://127.0.0.1:${refusing.port} answered 407 Proxy Authentication Required: check the credentials in its URL`,
      requestWritten: false,
    });
    expect([classify(first), maybeCreated(first), providerFailing(first)]).toEqual(['transient', false, true]);
    await c407.send('text', 'biz_1', 'k', {});
    expect(s.seen).toHaveLength(0);

    // A proxy that is down, then up on the same port: one line down, one line back.
    const port = await closedPort();
    const cDown = client(s.url, { proxy: proxy(`http://127.0.0.1:${port}`), onProxyChange });
    for (let i = 0; i < 3; i++) {
      const down = await cDown.send('text', 'biz_1', 'k', {});
      expect(down).toMatchObject({ kind: 'network', code: 'ECONNREFUSED', requestWritten: false });
      expect(maybeCreated(down)).toBe(false);
    }
    const back = await startTestProxy({ port });
    closers.push(back.close);
    expect(await cDown.send('text', 'biz_1', 'k', {})).toMatchObject({ kind: 'accepted', messageId: 'm1' });
    expect(await cDown.send('text', 'biz_1', 'k', {})).toMatchObject({ kind: 'accepted' });
    expect(changes).toEqual([
      [
        false,
        `the proxy http://127.0.0.1:${refusing.port} answered 407 Proxy Authentication Required: check the credentials in its URL`,
      ],
      [
        false,
        expect.stringMatching(
          new RegExp(`^the proxy http://127\\.0\\.0\\.1:${port} could not be used: connect ECONNREFUSED`),
        ),
      ],
      [true, `provider calls pass the proxy http://127.0.0.1:${port} again`],
    ]);
    expect(JSON.stringify(changes)).not.toContain('hunter2');
  });
});
