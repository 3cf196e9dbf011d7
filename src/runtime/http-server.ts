import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Logger } from '../platform/logger.js';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { localUrl } from '../platform/net.js';

/**
 * The two kinds of plain node:http server a role runs (docs/deployment.md "Ports"):
 * - the admin server (`startAdminServer`): `/healthz` (process alive), `/readyz` (200 when ready,
 *   503 with the reason otherwise) and `/metrics` (Prometheus text), nothing else. Every role
 *   has one, on its private admin port: probes and scrapes reach it, the public never should.
 * - the API server (`startApiServer`): the tracker's queries and console, answered by a route
 *   function; no health or metrics path (those are on the admin port only).
 */

/** What /metrics reads: a prom-client Registry, or the ingress workers' merged one. */
export interface MetricsSource {
  metrics(): Promise<string>;
  readonly contentType: string;
}

export interface AdminServerOptions {
  host: string;
  port: number;
  registry: MetricsSource;
  /** Undefined when ready; otherwise why not. */
  notReadyReason: () => string | undefined;
  logger?: Logger;
  /** Names the server in the error when it cannot listen ("the sender's admin port"). */
  what?: string;
}

export interface ApiServerOptions {
  host: string;
  port: number;
  /** An answer, or undefined for 404. GET, HEAD and POST reach it. */
  route: (request: HttpRequest) => Promise<HttpAnswer | undefined>;
  logger?: Logger;
  what?: string;
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

export interface HttpServer {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

const notFound = (res: ServerResponse) => res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');

export function startAdminServer(options: AdminServerOptions): Promise<HttpServer> {
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?', 1)[0];
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain' }).end('method not allowed\n');
      return;
    }
    if (path === '/healthz') {
      res.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
    } else if (path === '/readyz') {
      const reason = options.notReadyReason();
      res
        .writeHead(reason === undefined ? 200 : 503, { 'content-type': 'application/json' })
        .end(JSON.stringify(reason === undefined ? { ready: true } : { ready: false, reason }));
    } else if (path === '/metrics') {
      options.registry.metrics().then(
        (text) => res.writeHead(200, { 'content-type': options.registry.contentType }).end(text),
        (err: unknown) => {
          options.logger?.error({ err }, 'collecting metrics failed');
          if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics unavailable\n');
        },
      );
    } else {
      notFound(res);
    }
  });
  return listen(server, options.host, options.port, options.what ?? 'the admin port');
}

export function startApiServer(options: ApiServerOptions): Promise<HttpServer> {
  const { route, logger } = options;
  const server = createServer((req, res) => {
    const [path, search] = (req.url ?? '/').split('?', 2) as [string, string | undefined];
    const method = req.method;
    if (method !== 'GET' && method !== 'HEAD' && method !== 'POST') {
      res.writeHead(405, { allow: 'GET, HEAD, POST', 'content-type': 'text/plain' }).end('method not allowed\n');
      return;
    }
    const fail = (err: unknown) => {
      logger?.warn({ err: errorMessage(err), path }, 'query failed');
      if (!res.headersSent)
        res
          .writeHead(503, { 'content-type': 'application/json' })
          .end(`${JSON.stringify({ error: 'UNAVAILABLE', message: errorMessage(err) })}\n`);
    };
    readBody(req, method === 'POST' ? MAX_BODY_BYTES : 0)
      .then((body) => {
        if (body === undefined) {
          res
            .writeHead(413, { 'content-type': 'application/json', connection: 'close' })
            .end(
              `${JSON.stringify({ error: 'INVALID_ARGUMENT', message: `the body is larger than ${MAX_BODY_BYTES} bytes` })}\n`,
            );
          return;
        }
        return route({
          method: method as HttpRequest['method'],
          path,
          query: new URLSearchParams(search ?? ''),
          headers: req.headers,
          body,
        }).then((answer) => {
          if (!answer) {
            notFound(res);
            return;
          }
          const payload = answer.raw ?? `${JSON.stringify(answer.body)}\n`;
          res.writeHead(answer.status, {
            ...(answer.raw === undefined ? { 'content-type': 'application/json' } : {}),
            ...answer.headers,
          });
          res.end(method === 'HEAD' ? undefined : payload);
        });
      }, fail)
      .catch(fail);
  });
  return listen(server, options.host, options.port, options.what ?? 'the HTTP port');
}

/** Listens; a port in use (or a host not of this machine) is one clear line naming the server. */
async function listen(server: Server, host: string, port: number, what: string): Promise<HttpServer> {
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) =>
      reject(
        new MsgbridgeError(
          'INVALID_ARGUMENT',
          `${what} cannot listen on ${host}:${port} (${err.code === 'EADDRINUSE' ? 'in use' : (err.code ?? err.message)})`,
          { cause: err },
        ),
      ),
    );
    server.listen(port, host, () => {
      server.removeAllListeners('error');
      resolve();
    });
  });
  const bound = (server.address() as AddressInfo).port;
  return {
    url: localUrl(host, bound),
    port: bound,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** A request's body up to `max` bytes; undefined past it (nothing more is read). */
function readBody(req: IncomingMessage, max: number): Promise<Buffer | undefined> {
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
