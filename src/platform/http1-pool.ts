import { connect as connectTcp, isIP, type Socket } from 'node:net';
import { connect as connectTls, type ConnectionOptions } from 'node:tls';
import { Deque } from './deque.js';
import { Http1ResponseParser, ResponseParseError, type ParsedResponse } from './http1-response-parser.js';

/**
 * A keep-alive pool of HTTP/1.1 connections to one origin, one request at a time per
 * connection, for a client that sends small ready-made requests (the sender's provider calls).
 * A request is one string, written with one call once its connection is up; the answer's
 * status, `Retry-After`, and first `maxResponseBytes` body bytes come back. Why not undici:
 * this takes half its CPU per call (src/sender/README.md, "Provider calls"), and the sender
 * makes thousands a second.
 *
 * The caller learns when a request reached a connected socket (`onWritten`): before that the
 * server cannot have acted on it, after it a lost answer may hide a created message. Idle
 * connections are reused last-in first-out and dropped once idle for `keepAliveTimeoutMs`, or
 * a second before the server's own `Keep-Alive: timeout`, so a request is rarely written on a
 * connection the server is closing. Deadlines are the caller's: `cancel()` ends a request
 * wherever it is (a connection with a request on it is closed, never reused).
 */

export interface Http1PoolOptions {
  protocol: 'http:' | 'https:';
  /** Host name or IP address (IPv6 without brackets). */
  host: string;
  port: number;
  /** Most connections open at once (connecting ones included). */
  connections: number;
  connectTimeoutMs: number;
  /** Longest idle time of a kept connection when the server names none (ms). */
  keepAliveTimeoutMs: number;
  /** Body bytes kept per answer; the rest is read and dropped. */
  maxResponseBytes: number;
  /** Requests waiting for a connection beyond which `request` fails at once (default 65,536). */
  maxQueued?: number;
  /** https: trust settings beyond the system's certificate authorities (tests). */
  tls?: Pick<ConnectionOptions, 'ca' | 'rejectUnauthorized'>;
}

/** What the caller of `request` is told, exactly once each: `onWritten` at most once, then one of the other two. */
export interface Http1Exchange {
  /** The request was handed to a connected socket. */
  onWritten(): void;
  onResponse(response: ParsedResponse): void;
  /** `error.code`: the socket's (ECONNREFUSED, ECONNRESET…), CONNECT_TIMEOUT, CONNECTION_CLOSED, HTTP_MALFORMED, QUEUE_FULL or POOL_CLOSED. */
  onError(error: Http1Error): void;
}

export class Http1Error extends Error {
  override readonly name = 'Http1Error';
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

export interface Http1Request {
  /** Ends the request now: no callback follows. */
  cancel(): void;
}

interface Pending extends Http1Request {
  readonly payload: string;
  readonly exchange: Http1Exchange;
  done: boolean;
  connection: Connection | undefined;
}

interface Connection {
  readonly socket: Socket;
  readonly parser: Http1ResponseParser;
  connected: boolean;
  current: Pending | undefined;
  /** When an idle connection stops being reused (performance.now()). */
  expiresAt: number;
  connectTimer: NodeJS.Timeout | undefined;
  /** Closed and no longer counted (a closed socket may still report 'end', 'error' and 'close'). */
  dropped: boolean;
}

export class Http1Pool {
  private readonly idle: Connection[] = [];
  /** Every connection not dropped yet (connecting, busy and idle). */
  private readonly connections = new Set<Connection>();
  private readonly queue = new Deque<Pending>();
  private open = 0;
  private closed = false;
  private readonly maxQueued: number;

  constructor(private readonly options: Http1PoolOptions) {
    if (!(options.connections >= 1)) throw new RangeError('connections must be at least 1');
    this.maxQueued = options.maxQueued ?? 65_536;
  }

  /** The `Host` header's value for this origin. */
  get hostHeader(): string {
    const { protocol, host, port } = this.options;
    const name = isIP(host) === 6 ? `[${host}]` : host;
    return (protocol === 'https:' && port === 443) || (protocol === 'http:' && port === 80) ? name : `${name}:${port}`;
  }

  /** Open connections (connecting, busy and idle), idle ones, requests waiting for one. */
  stats(): { open: number; idle: number; queued: number } {
    return { open: this.open, idle: this.idle.length, queued: this.queue.length };
  }

  /** Sends `payload` (a whole HTTP/1.1 request) on a free or new connection, or queues it. */
  request(payload: string, exchange: Http1Exchange): Http1Request {
    const pending: Pending = {
      payload,
      exchange,
      done: false,
      connection: undefined,
      cancel: () => this.cancel(pending),
    };
    if (this.closed) this.fail(pending, new Http1Error('POOL_CLOSED', 'the HTTP connection pool is closed'));
    else if (this.queue.length >= this.maxQueued) this.fail(pending, new Http1Error('QUEUE_FULL', `${this.maxQueued} requests already wait for a connection`));
    else {
      this.queue.push(pending);
      this.pump();
    }
    return pending;
  }

  /** Closes every connection; requests in flight or waiting fail with POOL_CLOSED. */
  async close(): Promise<void> {
    this.closed = true;
    const error = new Http1Error('POOL_CLOSED', 'the HTTP connection pool is closed');
    for (let p = this.queue.shift(); p; p = this.queue.shift()) this.fail(p, error);
    for (const connection of [...this.connections]) this.drop(connection, error);
  }

  private pump(): void {
    while (this.queue.length > 0) {
      const head = this.queue.peek()!;
      if (head.done) {
        this.queue.shift();
        continue;
      }
      const connection = this.takeIdle();
      if (connection) {
        this.queue.shift();
        this.assign(connection, head);
        continue;
      }
      if (this.open >= this.options.connections) return;
      this.queue.shift();
      this.assign(this.connect(), head);
    }
  }

  /** The most recently used idle connection still worth using; expired ones are closed. */
  private takeIdle(): Connection | undefined {
    const now = performance.now();
    for (let c = this.idle.pop(); c; c = this.idle.pop()) {
      if (now < c.expiresAt && !c.socket.destroyed && c.socket.readyState === 'open') return c;
      c.socket.destroy();
    }
    return undefined;
  }

  private assign(connection: Connection, pending: Pending): void {
    connection.current = pending;
    pending.connection = connection;
    if (connection.connected) this.write(connection, pending);
  }

  private write(connection: Connection, pending: Pending): void {
    connection.socket.write(pending.payload);
    pending.exchange.onWritten();
  }

  private connect(): Connection {
    const { protocol, host, port, connectTimeoutMs } = this.options;
    const socket = protocol === 'https:' ? connectTls({ ...this.options.tls, host, port, servername: isIP(host) !== 0 ? undefined : host, ALPNProtocols: ['http/1.1'] }) : connectTcp({ host, port });
    socket.setNoDelay(true);
    const connection: Connection = {
      socket,
      parser: new Http1ResponseParser({ maxBodyBytes: this.options.maxResponseBytes }),
      connected: false,
      current: undefined,
      expiresAt: 0,
      connectTimer: undefined,
      dropped: false,
    };
    this.open += 1;
    this.connections.add(connection);
    connection.connectTimer = setTimeout(() => this.drop(connection, new Http1Error('CONNECT_TIMEOUT', `no connection to ${host}:${port} within ${connectTimeoutMs} ms`)), connectTimeoutMs);
    socket.once(protocol === 'https:' ? 'secureConnect' : 'connect', () => {
      clearTimeout(connection.connectTimer);
      connection.connected = true;
      if (connection.current) this.write(connection, connection.current);
    });
    socket.on('data', (chunk: Buffer) => this.receive(connection, chunk));
    socket.on('end', () => this.ended(connection));
    socket.on('error', (err: NodeJS.ErrnoException) => this.drop(connection, new Http1Error(err.code ?? 'ECONNECTION', err.message)));
    socket.on('close', () => this.drop(connection, new Http1Error('CONNECTION_CLOSED', 'the connection closed before the answer was complete')));
    return connection;
  }

  private receive(connection: Connection, chunk: Buffer): void {
    if (!connection.current) {
      this.drop(connection, new Http1Error('HTTP_MALFORMED', 'data arrived on an idle connection'));
      return;
    }
    let answers: ParsedResponse[];
    try {
      answers = connection.parser.push(chunk);
    } catch (err) {
      this.drop(connection, new Http1Error('HTTP_MALFORMED', (err as ResponseParseError).message));
      return;
    }
    if (answers.length > 0) this.answered(connection, answers);
  }

  /** The server closed its side: an answer delimited by the close ends here, anything else in flight failed. */
  private ended(connection: Connection): void {
    if (connection.current) {
      try {
        const answers = connection.parser.end();
        if (answers.length > 0) {
          this.answered(connection, answers);
          return;
        }
      } catch (err) {
        this.drop(connection, new Http1Error('CONNECTION_CLOSED', (err as ResponseParseError).message));
        return;
      }
    }
    this.drop(connection, new Http1Error('CONNECTION_CLOSED', 'the server closed the connection before answering'));
  }

  private answered(connection: Connection, answers: ParsedResponse[]): void {
    const pending = connection.current!;
    const answer = answers[0]!;
    connection.current = undefined;
    pending.connection = undefined;
    // More than one answer to one request, or an answer going on: the connection is out of step.
    const reusable = answer.keepAlive && answers.length === 1 && !connection.parser.midResponse && !this.closed && connection.socket.readyState === 'open';
    if (reusable) {
      const serverLimit = answer.keepAliveTimeoutMs === undefined ? Infinity : answer.keepAliveTimeoutMs - 1000;
      connection.expiresAt = performance.now() + Math.min(this.options.keepAliveTimeoutMs, serverLimit);
      this.idle.push(connection);
    } else {
      this.discard(connection);
    }
    if (!pending.done) {
      pending.done = true;
      pending.exchange.onResponse(answer);
    }
    this.pump();
  }

  /** The connection is unusable: it is closed, and the request on it (if any) fails with `error`. */
  private drop(connection: Connection, error: Http1Error): void {
    const pending = connection.current;
    connection.current = undefined;
    this.discard(connection);
    if (pending) {
      pending.connection = undefined;
      this.fail(pending, error);
    }
    this.pump();
  }

  private discard(connection: Connection): void {
    if (connection.connectTimer) clearTimeout(connection.connectTimer);
    connection.connectTimer = undefined;
    const at = this.idle.indexOf(connection);
    if (at >= 0) this.idle.splice(at, 1);
    if (!connection.socket.destroyed) connection.socket.destroy();
    if (!connection.dropped) {
      connection.dropped = true;
      this.open -= 1;
      this.connections.delete(connection);
    }
  }

  private fail(pending: Pending, error: Http1Error): void {
    if (pending.done) return;
    pending.done = true;
    pending.exchange.onError(error);
  }

  private cancel(pending: Pending): void {
    if (pending.done) return;
    pending.done = true;
    const connection = pending.connection;
    if (connection && !connection.dropped) {
      // Mid-request: the connection cannot carry another one.
      connection.current = undefined;
      pending.connection = undefined;
      this.discard(connection);
      this.pump();
    }
  }
}
