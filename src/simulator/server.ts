import { STATUS_CODES } from 'node:http';
import type { HttpResponse, TemplatedApp, us_listen_socket } from 'uWebSockets.js';
import { MsgbridgeError } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';
import { loadUws } from '../platform/uws.js';
import type { SimRequest, SimResponse } from './api.js';
import { providerError } from './provider-errors.js';

export interface SimHttpServer {
  port: number;
  /** Stops listening and closes open connections (requests still being answered are dropped). */
  close(): void;
}

interface Exchange {
  res: HttpResponse;
  aborted: boolean;
  answered: boolean;
}

/**
 * The uWebSockets.js adapter: copies each request out of uWS (headers during the handler,
 * body chunks as they arrive, since uWS neuters them after the callback), bounds the body,
 * and writes answers corked. Everything else is the framework-free `handle`.
 */
export function listenSimulator(options: {
  host: string;
  port: number;
  maxBodyBytes: number;
  logger: Logger;
  handle: (req: SimRequest) => Promise<SimResponse>;
}): Promise<SimHttpServer> {
  const uws = loadUws();
  const app: TemplatedApp = uws.App();

  const write = (ex: Exchange, answer: SimResponse, closeConnection = false) => {
    if (ex.aborted || ex.answered) return;
    ex.answered = true;
    ex.res.cork(() => {
      ex.res.writeStatus(`${answer.status} ${STATUS_CODES[answer.status] ?? ''}`.trimEnd());
      ex.res.writeHeader('content-type', 'application/json');
      for (const [name, value] of Object.entries(answer.headers ?? {})) ex.res.writeHeader(name, value);
      ex.res.end(answer.body, closeConnection);
    });
  };
  const tooLarge = (ex: Exchange) =>
    write(
      ex,
      {
        status: 413,
        body: JSON.stringify(
          providerError('ERROR_CODE_REQUEST_TOO_LARGE', {
            message: `the request body exceeds ${options.maxBodyBytes} bytes`,
          }),
        ),
      },
      true,
    );

  app.any('/*', (res, req) => {
    const request: SimRequest = {
      method: req.getMethod(),
      path: req.getUrl(),
      query: req.getQuery() ?? '',
      apiKey: req.getHeader('x-api-key'),
      contentType: req.getHeader('content-type'),
      body: Buffer.alloc(0),
    };
    const declaredLength = req.getHeader('content-length');
    const ex: Exchange = { res, aborted: false, answered: false };
    res.onAborted(() => {
      ex.aborted = true;
    });
    if (declaredLength !== '' && Number(declaredLength) > options.maxBodyBytes) {
      tooLarge(ex);
      return;
    }
    const chunks: Buffer[] = [];
    let received = 0;
    res.onData((chunk, isLast) => {
      if (ex.answered) return;
      received += chunk.byteLength;
      if (received > options.maxBodyBytes) {
        tooLarge(ex);
        return;
      }
      // Copy: the ArrayBuffer is neutered when this callback returns.
      if (chunk.byteLength > 0) chunks.push(Buffer.from(chunk.slice(0)));
      if (!isLast) return;
      request.body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
      options.handle(request).then(
        (answer) => write(ex, answer),
        (err: unknown) => {
          options.logger.error({ err, method: request.method, path: request.path }, 'simulator handler failed');
          write(ex, { status: 500, body: JSON.stringify(providerError('ERROR_CODE_INTERNAL')) });
        },
      );
    });
  });

  return new Promise((resolve, reject) => {
    app.listen(options.host, options.port, (socket: us_listen_socket | false) => {
      if (!socket) {
        reject(
          new MsgbridgeError(
            'INVALID_ARGUMENT',
            `the simulator cannot listen on ${options.host}:${options.port} (in use, or not an address of this host)`,
          ),
        );
        return;
      }
      let listenSocket: us_listen_socket | undefined = socket;
      resolve({
        port: uws.us_socket_local_port(socket as never),
        close() {
          if (listenSocket) uws.us_listen_socket_close(listenSocket);
          listenSocket = undefined;
          // Keep-alive connections would otherwise stay open; the registry build has close() at run time.
          const closeAll = (app as unknown as { close?: () => void }).close;
          if (typeof closeAll === 'function') closeAll.call(app);
        },
      });
    });
  });
}
