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
    const request = pool.request(`POST ${path} HTTP/1.1\r\nHost: ${pool.hostHeader}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`, {
      onWritten: () => (seen.written = true),
      onResponse: (response) => resolve({ ...seen, response }),
      onError: (error) => resolve({ ...seen, error }),
    });
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
async function httpServer(reply: (req: IncomingMessage, res: ServerResponse) => void, tls?: { key: Buffer; cert: Buffer }): Promise<Served> {
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
  const p = new Http1Pool({ protocol: 'http:', host: '127.0.0.1', port, connections: 2, connectTimeoutMs: 2000, keepAliveTimeoutMs: 30_000, maxResponseBytes: 1024, ...options });
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
