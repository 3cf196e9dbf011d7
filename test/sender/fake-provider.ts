import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/**
 * An independent stand-in for the provider's send API on a loopback port, for failure tests
 * the simulator does not model: it can be stopped (connections refused) and started again on
 * the same port, answer 503 for one business, or drop a connection after reading the request
 * (having created the message: the lost-answer case). It records every message it created.
 */
export interface CreatedMessage {
  id: string;
  businessId: string;
  /** The request's `callbackData` (the tests put the request id there). */
  requestId: string | undefined;
  at: number;
}

export interface FakeProvider {
  readonly url: string;
  /** Every call that reached the handler (created or not). */
  calls(): { businessId: string; requestId: string | undefined; at: number; answer: number | 'dropped' }[];
  created(): CreatedMessage[];
  /** Messages created per request id. */
  createdPer(): Map<string, number>;
  /** Business → HTTP status answered instead of creating (e.g. 503); absent = normal. */
  failing: Map<string, number>;
  /** Share of calls that create the message and then drop the connection without answering. */
  dropAfterReadRate: number;
  /** Refuse connections (the listening socket closes) until start(). */
  stop(): Promise<void>;
  start(): Promise<void>;
  close(): Promise<void>;
}

export async function startFakeProvider(options: { latencyMs?: number } = {}): Promise<FakeProvider> {
  const created: CreatedMessage[] = [];
  const calls: ReturnType<FakeProvider['calls']> = [];
  const sockets = new Set<Socket>();
  let port = 0;
  let server: Server | undefined;

  const handle = (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const match = /^\/v1\/businesses\/([^/]+)\/send\/[a-z]+$/.exec(req.url ?? '');
      if (req.method !== 'POST' || !match) {
        res
          .writeHead(404, { 'content-type': 'application/json' })
          .end('{"message":"not found","type":"ERROR_TYPE_INVALID_REQUEST","code":"ERROR_CODE_NOT_FOUND"}');
        return;
      }
      const businessId = decodeURIComponent(match[1]!);
      let requestId: string | undefined;
      try {
        const body = JSON.parse(Buffer.concat(chunks).toString()) as { callbackData?: unknown };
        requestId = typeof body.callbackData === 'string' ? body.callbackData : undefined;
      } catch {
        requestId = undefined;
      }
      const at = Date.now();
      const status = provider.failing.get(businessId);
      if (status !== undefined) {
        calls.push({ businessId, requestId, at, answer: status });
        res
          .writeHead(status, { 'content-type': 'application/json' })
          .end(
            JSON.stringify({ message: 'unavailable', type: 'ERROR_TYPE_UNSPECIFIED', code: 'ERROR_CODE_UNAVAILABLE' }),
          );
        return;
      }
      const id = `01${randomUUID().replace(/-/g, '').slice(0, 24).toUpperCase()}`;
      created.push({ id, businessId, requestId, at });
      const answer = () => {
        if (Math.random() < provider.dropAfterReadRate) {
          calls.push({ businessId, requestId, at, answer: 'dropped' });
          req.socket.destroy();
          return;
        }
        calls.push({ businessId, requestId, at, answer: 200 });
        res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id }));
      };
      if (options.latencyMs) setTimeout(answer, options.latencyMs);
      else answer();
    });
  };

  const listen = async () => {
    const s = createServer(handle);
    s.keepAliveTimeout = 30_000;
    s.on('connection', (socket: Socket) => {
      sockets.add(socket);
      socket.on('close', () => sockets.delete(socket));
    });
    await new Promise<void>((resolve, reject) => {
      s.once('error', reject);
      s.listen(port, '127.0.0.1', () => resolve());
    });
    port = (s.address() as { port: number }).port;
    server = s;
  };

  const shut = async () => {
    const s = server;
    server = undefined;
    if (!s) return;
    const closed = new Promise<void>((resolve) => s.close(() => resolve()));
    for (const socket of sockets) socket.destroy();
    await closed;
  };

  await listen();
  const provider: FakeProvider = {
    url: `http://127.0.0.1:${port}`,
    calls: () => calls,
    created: () => created,
    createdPer: () => {
      const per = new Map<string, number>();
      for (const m of created) if (m.requestId) per.set(m.requestId, (per.get(m.requestId) ?? 0) + 1);
      return per;
    },
    failing: new Map(),
    dropAfterReadRate: 0,
    stop: shut,
    start: listen,
    close: shut,
  };
  return provider;
}
