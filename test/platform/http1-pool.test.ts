import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Http1Pool, type Http1Error, type Http1PoolOptions } from '../../src/platform/http1-pool.js';
import type { ParsedResponse } from '../../src/platform/http1-response-parser.js';
import { closedPort, proxyOf, startTestProxy, startTinyproxy } from '../helpers/http-proxy.js';

/** What one request saw: whether it was written, and how it ended. */
interface Outcome {
  written: boolean;
  response?: ParsedResponse;
  error?: Http1Error;
}

function send(pool: Http1Pool, path = '/', body = '{}'): { outcome: Promise<Outcome>; cancel: () => void } {
  const seen: Outcome = { written: false };
  let cancel = () => {};
  const outcome = new Promise<Outcome>((resolve) => {
    const request = pool.request(
      `POST ${pool.requestTarget(path)} HTTP/1.1\r\nHost: ${pool.hostHeader}\r\n${pool.proxyHeaders}Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      {
        onWritten: () => (seen.written = true),
        onResponse: (response) => resolve({ ...seen, response }),
        onError: (error) => resolve({ ...seen, error }),
      },
    );
    cancel = () => request.cancel();
  });
  return { outcome, cancel };
}

const closers: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const close of closers.splice(0).reverse()) await close();
});

interface Served {
  port: number;
  /** Connections accepted so far. */
  connections(): number;
  sockets: Set<Socket>;
}

/** A real node:http server on loopback; `reply` answers each request once its body arrived. */
async function httpServer(
  reply: (req: IncomingMessage, res: ServerResponse) => void,
  tls?: { key: Buffer; cert: Buffer },
): Promise<Served> {
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => reply(req, res));
  };
  const server = tls ? createHttpsServer(tls, handler) : createHttpServer(handler);
  return listen(server, tls ? 'secureConnection' : 'connection');
}

/** A raw TCP server: `onData` gets every chunk a connection receives and answers by hand. */
async function rawServer(onData: (socket: Socket, chunk: Buffer) => void): Promise<Served> {
  return listen(
    createNetServer((socket) => socket.on('data', (chunk) => onData(socket, chunk))),
    'connection',
  );
}

async function listen(server: Server, event: string): Promise<Served> {
  const sockets = new Set<Socket>();
  let connections = 0;
  server.on(event, (socket: Socket) => {
    connections += 1;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  closers.push(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  );
  return { port: (server.address() as AddressInfo).port, connections: () => connections, sockets };
}

function pool(port: number, options: Partial<Http1PoolOptions> = {}): Http1Pool {
  const p = new Http1Pool({
    protocol: 'http:',
    host: '127.0.0.1',
    port,
    connections: 2,
    connectTimeoutMs: 2000,
    keepAliveTimeoutMs: 30_000,
    maxResponseBytes: 1024,
    ...options,
  });
  closers.push(() => p.close());
  return p;
}

const ok =
  (body = '{"id":"m1"}') =>
  (_req: IncomingMessage, res: ServerResponse) =>
    res.writeHead(200, { 'content-type': 'application/json' }).end(body);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('Http1Pool against real loopback servers', () => {
  it('reuses one kept-alive connection for sequential requests, and opens at most `connections` for concurrent ones, queueing the rest', async () => {
    let inFlight = 0;
    let maxInFlight = 0;
    const s = await httpServer((_req, res) => {
      inFlight += 1;
      maxInFlight = Math.max(maxInFlight, inFlight);
      setTimeout(() => {
        inFlight -= 1;
        res.writeHead(200).end('{"id":"x"}');
      }, 20);
    });
    const p = pool(s.port, { connections: 3 });
    for (let i = 0; i < 4; i++) {
      const { response, written } = await send(p).outcome;
      expect(written).toBe(true);
      expect(response).toMatchObject({ status: 200, keepAlive: true });
      expect(response!.body.toString()).toBe('{"id":"x"}');
    }
    expect(s.connections()).toBe(1);
    const many = await Promise.all(Array.from({ length: 12 }, () => send(p).outcome));
    expect(many.every((o) => o.response?.status === 200)).toBe(true);
    expect(maxInFlight).toBe(3);
    expect(s.connections()).toBe(3);
    expect(p.stats()).toEqual({ open: 3, idle: 3, queued: 0 });
  });

  it('reads chunked and close-delimited bodies, keeps the first maxResponseBytes, and Retry-After', async () => {
    const s = await httpServer((req, res) => {
      if (req.url === '/chunked') {
        res.writeHead(429, { 'retry-after': '7' });
        res.write('{"message":');
        setTimeout(() => res.end('"slow down"}'), 10);
      } else if (req.url === '/big') res.writeHead(200, { 'content-length': 5000 }).end('a'.repeat(5000));
      else {
        // No length, no chunking: the body ends when the server closes.
        res.writeHead(502, { connection: 'close' });
        res.useChunkedEncodingByDefault = false;
        res.end('bad gateway');
      }
    });
    const p = pool(s.port, { maxResponseBytes: 100 });
    const chunked = (await send(p, '/chunked').outcome).response!;
    expect(chunked).toMatchObject({ status: 429, retryAfter: '7', keepAlive: true });
    expect(chunked.body.toString()).toBe('{"message":"slow down"}');
    const big = (await send(p, '/big').outcome).response!;
    expect(big.body.toString()).toBe('a'.repeat(100));
    expect(big.bodyBytes).toBe(5000);
    // The connection stays usable after a body longer than what was kept.
    expect(s.connections()).toBe(1);
    const closed = (await send(p, '/close').outcome).response!;
    expect(closed).toMatchObject({ status: 502, keepAlive: false });
    expect(closed.body.toString()).toBe('bad gateway');
    expect((await send(p, '/chunked').outcome).response?.status).toBe(429);
    expect(s.connections()).toBe(2);
  });

  it('does not reuse a connection past the server’s Keep-Alive timeout (less a second), nor one the server closed while idle', async () => {
    const s = await httpServer((req, res) => {
      if (req.url === '/short') res.writeHead(200, { 'keep-alive': 'timeout=1' }).end('{}');
      else res.writeHead(200).end('{}');
    });
    const p = pool(s.port);
    await send(p, '/short').outcome;
    await send(p, '/short').outcome;
    // timeout=1: kept for 0 ms, so each request opened its own connection.
    expect(s.connections()).toBe(2);
    await send(p, '/').outcome;
    expect(s.connections()).toBe(3);
    for (const socket of s.sockets) socket.destroy();
    await sleep(50);
    const after = await send(p, '/').outcome;
    expect(after.error).toBeUndefined();
    expect(after.response?.status).toBe(200);
    expect(s.connections()).toBe(4);
  });

  it('drops idle connections after keepAliveTimeoutMs of its own', async () => {
    const s = await httpServer(ok());
    const p = pool(s.port, { keepAliveTimeoutMs: 30 });
    await send(p).outcome;
    await sleep(60);
    await send(p).outcome;
    expect(s.connections()).toBe(2);
    expect(p.stats().open).toBe(1);
  });

  it('says a request was written when the server cuts the answer, and fails it CONNECTION_CLOSED; garbage is HTTP_MALFORMED', async () => {
    const s = await rawServer((socket, chunk) => {
      if (chunk.toString().startsWith('POST /cut ')) {
        socket.write('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"id":');
        setTimeout(() => socket.destroy(), 10);
      } else if (chunk.toString().startsWith('POST /silent ')) socket.end();
      else socket.write('HTTP/1.1 OK-ish\r\n\r\n');
    });
    const p = pool(s.port);
    const cut = await send(p, '/cut').outcome;
    expect(cut.written).toBe(true);
    expect(cut.error?.code).toBe('CONNECTION_CLOSED');
    const silent = await send(p, '/silent').outcome;
    expect(silent).toMatchObject({ written: true, error: { code: 'CONNECTION_CLOSED' } });
    const garbage = await send(p, '/garbage').outcome;
    expect(garbage).toMatchObject({ written: true, error: { code: 'HTTP_MALFORMED' } });
    await sleep(20);
    expect(p.stats().open).toBe(0);
  });

  it('fails a refused connection with its socket code, before anything was written', async () => {
    const s = await httpServer(ok());
    const port = s.port;
    await closers.pop()!();
    const refused = await send(pool(port)).outcome;
    expect(refused).toMatchObject({ written: false, error: { code: 'ECONNREFUSED' } });
  });

  it('fails CONNECT_TIMEOUT when a TLS handshake never completes', async () => {
    // A TCP server that accepts and never speaks: the TCP connect succeeds, the TLS one never does.
    const s = await rawServer(() => {});
    const p = pool(s.port, { protocol: 'https:', connectTimeoutMs: 150 });
    const outcome = await send(p).outcome;
    expect(outcome).toMatchObject({ written: false, error: { code: 'CONNECT_TIMEOUT' } });
  });

  it('cancel: a queued request is never written; one on a connection closes that connection, and no callback follows', async () => {
    const held: ServerResponse[] = [];
    const s = await httpServer((_req, res) => held.push(res));
    const p = pool(s.port, { connections: 1 });
    const first = send(p, '/first');
    const queued = send(p, '/queued');
    let settled = false;
    void queued.outcome.then(() => (settled = true));
    await sleep(50);
    expect(p.stats()).toMatchObject({ open: 1, queued: 1 });
    queued.cancel();
    first.cancel();
    let firstSettled = false;
    void first.outcome.then(() => (firstSettled = true));
    await sleep(50);
    expect(settled).toBe(false);
    expect(firstSettled).toBe(false);
    expect(held).toHaveLength(1);
    expect(s.sockets.size).toBe(0);
    expect(p.stats()).toEqual({ open: 0, idle: 0, queued: 0 });
    // The pool goes on.
    const next = send(p, '/next');
    await sleep(50);
    held.at(-1)!.writeHead(200).end('{}');
    expect((await next.outcome).response?.status).toBe(200);
  });

  it('bounds its queue (QUEUE_FULL) and fails what waits or runs on close (POOL_CLOSED)', async () => {
    const s = await httpServer(() => {});
    const p = pool(s.port, { connections: 1, maxQueued: 2 });
    const running = send(p);
    const waiting = [send(p), send(p)];
    const refused = await send(p).outcome;
    expect(refused).toMatchObject({ written: false, error: { code: 'QUEUE_FULL' } });
    await sleep(50);
    await p.close();
    expect(await running.outcome).toMatchObject({ written: true, error: { code: 'POOL_CLOSED' } });
    for (const w of waiting) expect(await w.outcome).toMatchObject({ written: false, error: { code: 'POOL_CLOSED' } });
    expect(await send(p).outcome).toMatchObject({ written: false, error: { code: 'POOL_CLOSED' } });
    expect(p.stats()).toEqual({ open: 0, idle: 0, queued: 0 });
    await sleep(50);
    expect(s.sockets.size).toBe(0);
  });

  it('speaks https to a server with a throw-away certificate it was told to trust, and refuses one it was not', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'http1-pool-'));
    closers.push(() => rmSync(dir, { recursive: true, force: true }));
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=localhost',
        '-addext',
        'subjectAltName=DNS:localhost',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
      ],
      { stdio: 'ignore' },
    );
    const tls = { key: readFileSync(join(dir, 'key.pem')), cert: readFileSync(join(dir, 'cert.pem')) };
    const s = await httpServer(ok('{"id":"tls"}'), tls);
    const trusted = pool(s.port, { protocol: 'https:', host: 'localhost', tls: { ca: tls.cert } });
    expect(trusted.hostHeader).toBe(`localhost:${s.port}`);
    for (let i = 0; i < 3; i++) expect((await send(trusted).outcome).response?.body.toString()).toBe('{"id":"tls"}');
    expect(s.connections()).toBe(1);
    const untrusted = await send(pool(s.port, { protocol: 'https:', host: 'localhost' })).outcome;
    expect(untrusted.written).toBe(false);
    expect(untrusted.error?.code).toMatch(/SELF_SIGNED|UNABLE_TO_VERIFY|CERT/);
  });
});

const fixtureTls = {
  key: readFileSync(join(import.meta.dirname, '..', 'fixtures', 'tls-localhost.key')),
  cert: readFileSync(join(import.meta.dirname, '..', 'fixtures', 'tls-localhost.crt')),
};

describe('Http1Pool through an HTTP proxy on loopback', () => {
  it('https origin through tinyproxy: one CONNECT, TLS end to end in the tunnel, the tunnel kept alive for every request', async () => {
    const tiny = await startTinyproxy();
    closers.push(() => tiny.close());
    const seen: { url?: string; proxyAuth?: string }[] = [];
    const s = await httpServer((req, res) => {
      seen.push({ url: req.url, proxyAuth: req.headers['proxy-authorization'] });
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"id":"tunnelled"}');
    }, fixtureTls);
    const p = pool(s.port, {
      protocol: 'https:',
      host: 'localhost',
      tls: { ca: fixtureTls.cert },
      proxy: proxyOf(tiny.url),
    });
    expect(p.requestTarget('/v1/x')).toBe('/v1/x');
    for (let i = 0; i < 5; i++) {
      const outcome = await send(p, '/v1/x').outcome;
      expect(outcome.written).toBe(true);
      expect(outcome.response?.body.toString()).toBe('{"id":"tunnelled"}');
    }
    expect(tiny.requests()).toEqual([{ method: 'CONNECT', target: `localhost:${s.port}` }]);
    expect(s.connections()).toBe(1);
    expect(seen).toEqual(Array.from({ length: 5 }, () => ({ url: '/v1/x', proxyAuth: undefined })));
    expect(p.stats()).toEqual({ open: 1, idle: 1, queued: 0 });
  });

  it('http origin through tinyproxy: absolute-form requests; tinyproxy closes after each answer, which the pool learns instead of failing a request', async () => {
    const tiny = await startTinyproxy();
    closers.push(() => tiny.close());
    const s = await httpServer(ok('{"id":"forwarded"}'));
    const p = pool(s.port, { proxy: proxyOf(tiny.url) });
    expect(p.requestTarget('/v1/x')).toBe(`http://127.0.0.1:${s.port}/v1/x`);
    const outcomes = [];
    for (let i = 0; i < 20; i++) outcomes.push(await send(p, '/v1/x').outcome);
    expect(outcomes.map((o) => o.response?.status ?? o.error?.code)).toEqual(Array.from({ length: 20 }, () => 200));
    expect(p.reusesConnections).toBe(false);
    expect(tiny.requests()).toEqual(
      Array.from({ length: 20 }, () => ({ method: 'POST', target: `http://127.0.0.1:${s.port}/v1/x` })),
    );
  });

  it('http origin through a proxy that keeps connections: one connection to the proxy carries them all, with Proxy-Authorization on each', async () => {
    const proxy = await startTestProxy({ credentials: 'relay:s3cr3t:x' });
    closers.push(() => proxy.close());
    const s = await httpServer(ok('{"id":"kept"}'));
    const p = pool(s.port, { connections: 1, proxy: proxyOf(`http://relay:s3cr3t%3Ax@127.0.0.1:${proxy.port}`) });
    for (let i = 0; i < 10; i++)
      expect((await send(p, '/v1/x').outcome).response?.body.toString()).toBe('{"id":"kept"}');
    expect(proxy.counts()).toEqual({ tunnels: 0, forwarded: 10, connections: 1 });
    expect(proxy.authorizations).toEqual(
      Array.from({ length: 10 }, () => `Basic ${Buffer.from('relay:s3cr3t:x').toString('base64')}`),
    );
    expect(p.reusesConnections).toBe(true);
  });

  it('https origin with proxy credentials: they go on the CONNECT only, never through the tunnel', async () => {
    const proxy = await startTestProxy({ credentials: 'relay:pw' });
    closers.push(() => proxy.close());
    const headers: (string | undefined)[] = [];
    const s = await httpServer((req, res) => {
      headers.push(req.headers['proxy-authorization']);
      res.writeHead(200).end('{"id":"x"}');
    }, fixtureTls);
    const p = pool(s.port, {
      protocol: 'https:',
      host: 'localhost',
      tls: { ca: fixtureTls.cert },
      proxy: proxyOf(proxy.url),
    });
    expect(p.proxyHeaders).toBe('');
    for (let i = 0; i < 3; i++) expect((await send(p).outcome).response?.status).toBe(200);
    expect(proxy.authorizations).toEqual([`Basic ${Buffer.from('relay:pw').toString('base64')}`]);
    expect(headers).toEqual([undefined, undefined, undefined]);
  });

  it('a proxy that refuses: a refused connection, CONNECT answered 403, 407 or 502, a hung CONNECT; never written, atProxy, no credential in the message', async () => {
    const s = await httpServer(ok(), fixtureTls);
    const https = (proxy: string, options: Partial<Http1PoolOptions> = {}) =>
      pool(s.port, {
        protocol: 'https:',
        host: 'localhost',
        tls: { ca: fixtureTls.cert },
        proxy: proxyOf(proxy),
        ...options,
      });

    const down = await closedPort();
    const refused = await send(https(`http://user:hunter2@127.0.0.1:${down}`)).outcome;
    expect(refused).toMatchObject({ written: false, error: { code: 'ECONNREFUSED', atProxy: true } });
    expect(refused.error!.message).toContain(`the proxy http://127.0.0.1:${down} could not be used`);

    for (const status of [403, 407, 502]) {
      const proxy = await startTestProxy({ refuse: status });
      closers.push(() => proxy.close());
      const outcome = await send(https(`http://user:hunter2@127.0.0.1:${proxy.port}`)).outcome;
      expect(outcome).toMatchObject({ written: false, error: { code: 'PROXY_REFUSED', atProxy: true } });
      expect(outcome.error!.message).toMatch(
        new RegExp(
          `^the proxy http://127\\.0\\.0\\.1:${proxy.port} answered CONNECT localhost:${s.port} with ${status} `,
        ),
      );
      expect(outcome.error!.message).not.toContain('hunter2');
    }
    expect(s.connections()).toBe(0);

    // A proxy that takes the connection and never answers CONNECT.
    const silent = await rawServer(() => undefined);
    const hung = await send(https(`http://127.0.0.1:${silent.port}`, { connectTimeoutMs: 300 })).outcome;
    expect(hung).toMatchObject({ written: false, error: { code: 'CONNECT_TIMEOUT', atProxy: true } });
    expect(hung.error!.message).toBe(
      `no connection to localhost:${s.port} through the proxy http://127.0.0.1:${silent.port} within 300 ms`,
    );

    // An http origin: a refused proxy is the same; an answer from the origin is the origin's.
    const plain = await send(pool(s.port, { proxy: proxyOf(`127.0.0.1:${down}`) })).outcome;
    expect(plain).toMatchObject({ written: false, error: { code: 'ECONNREFUSED', atProxy: true } });
  });

  it("a tunnel cut during its TLS handshake: nothing written, and the failure is the origin's TLS (the CONNECT had succeeded)", async () => {
    const proxy = await rawServer((socket, chunk) => {
      if (chunk.toString().startsWith('CONNECT')) socket.write('HTTP/1.1 200 OK\r\n\r\n');
      else socket.destroy();
    });
    const outcome = await send(
      pool(443, {
        protocol: 'https:',
        host: 'localhost',
        tls: { ca: fixtureTls.cert },
        proxy: proxyOf(`http://127.0.0.1:${proxy.port}`),
      }),
    ).outcome;
    expect(outcome.written).toBe(false);
    expect(outcome.error).toMatchObject({ atProxy: false });
    expect(outcome.error?.code).not.toBe('PROXY_REFUSED');
  });
});
