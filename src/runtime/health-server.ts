import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Registry } from 'prom-client';
import type { Logger } from '../platform/logger.js';
import { localUrl } from '../platform/net.js';

/**
 * `/healthz` (process alive), `/readyz` (200 when ready, 503 with the reason otherwise) and
 * `/metrics` (Prometheus text) on plain node:http, for roles that serve no HTTP of their own.
 */
export interface HealthServerOptions {
  host: string;
  port: number;
  registry: Registry;
  /** Undefined when ready; otherwise why not. */
  notReadyReason: () => string | undefined;
  logger?: Logger;
  /** More routes (the tracker's queries and console): an answer, or undefined for 404. GET, HEAD and POST reach it. */
  route?: (request: HttpRequest) => Promise<HttpAnswer | undefined>;
}

/** A request for `route`; a POST's body is read first, bounded by MAX_BODY_BYTES. */
export interface HttpRequest {
  method: 'GET' | 'HEAD' | 'POST';
  path: string;
  query: URLSearchParams;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** A JSON `body`, or `raw` bytes with their own content-type in `headers`. */
export interface HttpAnswer {
  status: number;
  body?: unknown;
  raw?: Buffer | string;
  headers?: Record<string, string>;
}

/** The largest POST body `route` is handed (the console's operator actions are small JSON). */
const MAX_BODY_BYTES = 64 * 1024;

export interface HealthServer {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

export async function startHealthServer(options: HealthServerOptions): Promise<HealthServer> {
  const server: Server = createServer((req, res) => {
    const [path, search] = (req.url ?? '/').split('?', 2) as [string, string | undefined];
    const method = req.method;
    if (method !== 'GET' && method !== 'HEAD' && !(method === 'POST' && options.route)) {
      res.writeHead(405, { allow: options.route ? 'GET, HEAD, POST' : 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
      return;
    }
    if (path === '/healthz') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
      return;
    }
    if (path === '/readyz') {
      const reason = options.notReadyReason();
      res.writeHead(reason === undefined ? 200 : 503, { 'content-type': 'application/json' }).end(JSON.stringify(reason === undefined ? { ready: true } : { ready: false, reason }));
      return;
    }
    if (path === '/metrics') {
      options.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': options.registry.contentType }).end(text),
        (err: unknown) => {
          options.logger?.error({ err }, 'collecting metrics failed');
          res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics unavailable\n');
        },
      );
      return;
    }
    if (options.route) {
      const route = options.route;
      const fail = (err: unknown) => {
        options.logger?.warn({ err: (err as Error)?.message ?? String(err), path }, 'query failed');
        if (!res.headersSent) res.writeHead(503, { 'content-type': 'application/json' }).end(`${JSON.stringify({ error: 'UNAVAILABLE', message: (err as Error)?.message ?? String(err) })}\n`);
      };
      readBody(req, method === 'POST' ? MAX_BODY_BYTES : 0)
        .then((body) => {
          if (body === undefined) {
            res
              .writeHead(413, { 'content-type': 'application/json', connection: 'close' })
              .end(`${JSON.stringify({ error: 'INVALID_ARGUMENT', message: `the body is larger than ${MAX_BODY_BYTES} bytes` })}\n`);
            return;
          }
          return route({ method: method as HttpRequest['method'], path, query: new URLSearchParams(search ?? ''), headers: req.headers, body }).then((answer) => {
            if (!answer) {
              res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
              return;
            }
            const payload = answer.raw ?? `${JSON.stringify(answer.body)}\n`;
            res.writeHead(answer.status, { ...(answer.raw === undefined ? { 'content-type': 'application/json' } : {}), ...answer.headers });
            res.end(method === 'HEAD' ? undefined : payload);
          });
        }, fail)
        .catch(fail);
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: localUrl(options.host, port),
    port,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** A request's body up to `max` bytes; undefined past it (nothing more is read). */
function readBody(req: import('node:http').IncomingMessage, max: number): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > max) {
        req.removeAllListeners('data');
        req.resume();
        resolve(undefined);
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => resolve(Buffer.concat(chunks)));
    req.on('error', reject);
  });
}
