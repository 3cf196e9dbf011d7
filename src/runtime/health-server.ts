import { createServer, type Server } from 'node:http';
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
  /** More GET routes (the tracker's queries): an answer, or undefined for 404. */
  route?: (path: string, query: URLSearchParams, headers: Record<string, string | string[] | undefined>) => Promise<{ status: number; body: unknown } | undefined>;
}

export interface HealthServer {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

export async function startHealthServer(options: HealthServerOptions): Promise<HealthServer> {
  const server: Server = createServer((req, res) => {
    const [path, search] = (req.url ?? '/').split('?', 2) as [string, string | undefined];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
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
      options.route(path, new URLSearchParams(search ?? ''), req.headers).then(
        (answer) => {
          if (answer) res.writeHead(answer.status, { 'content-type': 'application/json' }).end(`${JSON.stringify(answer.body)}\n`);
          else res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
        },
        (err: unknown) => {
          options.logger?.warn({ err: (err as Error)?.message ?? String(err), path }, 'query failed');
          res.writeHead(503, { 'content-type': 'application/json' }).end(`${JSON.stringify({ error: 'UNAVAILABLE', message: (err as Error)?.message ?? String(err) })}\n`);
        },
      );
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
