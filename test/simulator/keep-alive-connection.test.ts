import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createTcpServer, type AddressInfo, type Server as TcpServer, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { KeepAliveConnection } from '../../src/simulator/keep-alive-connection.js';

function request(path: string, body: string): Buffer {
  return Buffer.from(
    `POST ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
}

// A self-signed certificate for localhost and 127.0.0.1, made for these tests only. It is valid from 2000-01-01 to
// 2125-12-31 (openssl ca -selfsign -startdate/-enddate): a machine whose clock lags the day it was made must still
// accept it (its first version began at its creation time and failed on such a CI machine).
const TLS = {
  cert: readFileSync(new URL('../fixtures/tls-localhost.crt', import.meta.url)),
  key: readFileSync(new URL('../fixtures/tls-localhost.key', import.meta.url)),
};

async function listen<T extends HttpServer | TcpServer>(server: T): Promise<{ server: T; port: number }> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, port: (server.address() as AddressInfo).port };
}

describe('keep-alive connection (load generator transport)', () => {
  const cleanups: (() => void)[] = [];
  afterEach(() => {
    for (const cleanup of cleanups.splice(0)) cleanup();
  });

  /** A node:http server answering as `answer` says, counting the TCP connections it accepted. */
  async function httpServer(answer: (path: string, body: string, res: import('node:http').ServerResponse) => void) {
    let connections = 0;
    const received: string[] = [];
    const server = createHttpServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push(Buffer.concat(chunks).toString());
        answer(req.url ?? '', Buffer.concat(chunks).toString(), res);
      });
    });
    server.on('connection', () => (connections += 1));
    const { port } = await listen(server);
    cleanups.push(() => {
      server.closeAllConnections();
      server.close();
    });
    return { port, received, connections: () => connections };
  }

  /** A raw TCP server that runs `onData` on each socket's bytes: for answers node:http would never send. */
  async function rawServer(onData: (socket: Socket, data: Buffer) => void) {
    const sockets = new Set<Socket>();
    const server = createTcpServer((socket) => {
      sockets.add(socket);
      socket.on('data', (data) => onData(socket, data));
      socket.on('error', () => {});
    });
    const { port } = await listen(server);
    cleanups.push(() => {
      for (const s of sockets) s.destroy();
      server.close();
    });
    return { port };
  }

  it('sends every request on one kept-alive socket and resolves with each status, bodies (fixed or chunked) skipped', async () => {
    const http = await httpServer((path, body, res) => {
      if (path === '/chunked') {
        res.writeHead(503, { 'retry-after': '1' });
        res.write('part one, ');
        res.end('part two');
      } else {
        res
          .writeHead(body === 'bad' ? 403 : 200, { 'content-type': 'application/json' })
          .end(JSON.stringify({ echo: body }));
      }
    });
    const connection = new KeepAliveConnection({ protocol: 'http:', host: '127.0.0.1', port: http.port }, 2000);
    const statuses: number[] = [];
    for (let i = 0; i < 20; i++)
      statuses.push(
        await connection.send(request(i % 5 === 4 ? '/chunked' : '/webhooks', i === 3 ? 'bad' : `event ${i}`)),
      );
    connection.close();
    expect(statuses).toEqual(Array.from({ length: 20 }, (_, i) => (i % 5 === 4 ? 503 : i === 3 ? 403 : 200)));
    expect(http.received).toEqual(Array.from({ length: 20 }, (_, i) => (i === 3 ? 'bad' : `event ${i}`)));
    expect(http.connections()).toBe(1);
  });

  it('opens a new socket after the server asks to close, and after the server drops an idle one', async () => {
    const http = await httpServer((_path, body, res) => {
      res.writeHead(200, body === 'last' ? { connection: 'close' } : {}).end('ok');
    });
    const connection = new KeepAliveConnection({ protocol: 'http:', host: '127.0.0.1', port: http.port }, 2000);
    expect(await connection.send(request('/', 'last'))).toBe(200);
    expect(await connection.send(request('/', 'next'))).toBe(200);
    expect(http.connections()).toBe(2);
    connection.close();
    expect(await connection.send(request('/', 'after close'))).toBe(200);
    expect(http.connections()).toBe(3);
    connection.close();
  });

  it('rejects when the server closes without answering, then works again on a new socket', async () => {
    let first = true;
    const raw = await rawServer((socket) => {
      if (first) {
        first = false;
        socket.destroy();
      } else {
        socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok');
      }
    });
    const connection = new KeepAliveConnection({ protocol: 'http:', host: '127.0.0.1', port: raw.port }, 2000);
    await expect(connection.send(request('/', 'x'))).rejects.toThrow();
    expect(await connection.send(request('/', 'y'))).toBe(200);
    connection.close();
  });

  it('completes an answer delimited by the close of the connection', async () => {
    const raw = await rawServer((socket) =>
      socket.end('HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n\r\nupstream went away'),
    );
    const connection = new KeepAliveConnection({ protocol: 'http:', host: '127.0.0.1', port: raw.port }, 2000);
    expect(await connection.send(request('/', 'x'))).toBe(502);
    expect(await connection.send(request('/', 'y'))).toBe(502);
    connection.close();
  });

  it('rejects a malformed answer, an answer cut short, and an answer that does not come in time', async () => {
    const raw = await rawServer((socket, data) => {
      const body = data.toString().split('\r\n\r\n')[1];
      if (body === 'garbage') socket.write('SMTP ready\r\n\r\n');
      else if (body === 'cut') socket.end('HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly a little');
      // 'slow': never answers
    });
    const connection = new KeepAliveConnection({ protocol: 'http:', host: '127.0.0.1', port: raw.port }, 300);
    await expect(connection.send(request('/', 'garbage'))).rejects.toThrow(/bad status line/);
    await expect(connection.send(request('/', 'cut'))).rejects.toThrow(/closed in the middle/);
    const started = performance.now();
    await expect(connection.send(request('/', 'slow'))).rejects.toThrow(/no answer within 300 ms/);
    expect(performance.now() - started).toBeGreaterThanOrEqual(290);
    connection.close();
  });

  it('speaks https, verifying the server certificate', async () => {
    let connections = 0;
    const server = createHttpsServer(TLS, (req, res) => {
      req.resume();
      req.on('end', () => res.writeHead(202).end('accepted'));
    });
    server.on('secureConnection', () => (connections += 1));
    const { port } = await listen(server);
    cleanups.push(() => {
      server.closeAllConnections();
      server.close();
    });
    const trusted = new KeepAliveConnection({ protocol: 'https:', host: '127.0.0.1', port }, 2000, { ca: TLS.cert });
    expect(await trusted.send(request('/', 'a'))).toBe(202);
    expect(await trusted.send(request('/', 'b'))).toBe(202);
    expect(connections).toBe(1);
    trusted.close();

    const untrusted = new KeepAliveConnection({ protocol: 'https:', host: '127.0.0.1', port }, 2000);
    await expect(untrusted.send(request('/', 'c'))).rejects.toThrow(/self[- ]signed/i);
  });

  it('refuses a second request while one is in flight, and rejects when nothing listens', async () => {
    const raw = await rawServer(() => {});
    const connection = new KeepAliveConnection({ protocol: 'http:', host: '127.0.0.1', port: raw.port }, 300);
    const first = connection.send(request('/', 'a'));
    await expect(connection.send(request('/', 'b'))).rejects.toThrow(/already in flight/);
    await expect(first).rejects.toThrow(/no answer/);
    connection.close();

    const closed = await listen(createTcpServer());
    await new Promise((resolve) => closed.server.close(resolve));
    const nowhere = new KeepAliveConnection({ protocol: 'http:', host: '127.0.0.1', port: closed.port }, 2000);
    await expect(nowhere.send(request('/', 'x'))).rejects.toThrow(/ECONNREFUSED/);
  });
});
