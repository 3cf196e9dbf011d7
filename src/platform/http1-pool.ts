import { connect as connectTcp, isIP, type Socket } from 'node:net';
import { connect as connectTls, type ConnectionOptions, type TLSSocket } from 'node:tls';
import { Deque } from './deque.js';
import { Http1ResponseParser, ResponseParseError, type ParsedResponse } from './http1-response-parser.js';
import type { HttpProxy } from './proxy.js';

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
 *
 * Through an HTTP proxy (`proxy`): an https origin is reached in a CONNECT tunnel, TLS end to
 * end, and an http origin by sending each request to the proxy in absolute form (the caller
 * builds it with `requestTarget` and `proxyHeaders`). Either way the connection (the tunnel,
 * or the connection to the proxy) is kept alive and reused like a direct one, and a request is
 * written only once the tunnel and its TLS are up: a proxy that refuses (no connection, CONNECT
 * answered with an error) fails the request with `atProxy` set, before it reached any socket.
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
  /** Reach the origin through this HTTP proxy (src/platform/proxy.ts chooses it). */
  proxy?: HttpProxy;
}

/** What the caller of `request` is told, exactly once each: `onWritten` at most once, then one of the other two. */
export interface Http1Exchange {
  /** The request was handed to a connected socket. */
  onWritten(): void;
  onResponse(response: ParsedResponse): void;
  /**
   * `error.code`: the socket's (ECONNREFUSED, ECONNRESET…), CONNECT_TIMEOUT, CONNECTION_CLOSED, HTTP_MALFORMED,
   * PROXY_REFUSED, QUEUE_FULL or POOL_CLOSED.
   */
  onError(error: Http1Error): void;
}

export class Http1Error extends Error {
  override readonly name = 'Http1Error';
  constructor(
    readonly code: string,
    message: string,
    /** The proxy failed (refused, unreachable, CONNECT answered with an error) before the origin was reached. */
    readonly atProxy = false,
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
  /** The socket requests go on: a TLS socket over the tunnel once a CONNECT succeeded. */
  socket: Socket;
  /** The TCP socket to the proxy, while a tunnel is being set up (then replaced by the TLS socket over it). */
  tunnel: Socket | undefined;
  /** The proxy's answer to CONNECT, until its head is complete. */
  tunnelAnswer: Buffer | undefined;
  readonly parser: Http1ResponseParser;
  connected: boolean;
  current: Pending | undefined;
  /** When an idle connection stops being reused (performance.now()). */
  expiresAt: number;
  /** When its last answer came (performance.now()); 0 before the first. */
  answeredAt: number;
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
  /**
   * False once the proxy (absolute form) closed a connection right after answering on it: such a
   * proxy (tinyproxy for http origins) keeps nothing alive while its answers say HTTP/1.1 without
   * `Connection: close`. From then on each request through it has a connection of its own.
   */
  private proxyKeepsConnections = true;
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

  /**
   * The request-target for `path`: absolute (`http://host:port/path`) when an http origin is reached through a proxy.
   */
  requestTarget(path: string): string {
    return this.absoluteForm ? `http://${this.hostHeader}${path}` : path;
  }

  /**
   * Header lines every request carries for the proxy (`Proxy-Authorization`, absolute form only), each ending in CRLF.
   */
  get proxyHeaders(): string {
    const { proxy, protocol } = this.options;
    return proxy?.authorization && protocol === 'http:' ? `Proxy-Authorization: ${proxy.authorization}\r\n` : '';
  }

  /** Whether answered connections are kept for the next request (false once a proxy showed it closes them). */
  get reusesConnections(): boolean {
    return !this.absoluteForm || this.proxyKeepsConnections;
  }

  /** Requests go to a proxy in absolute form (an http origin through a proxy). */
  private get absoluteForm(): boolean {
    return this.options.proxy !== undefined && this.options.protocol === 'http:';
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
    else if (this.queue.length >= this.maxQueued)
      this.fail(pending, new Http1Error('QUEUE_FULL', `${this.maxQueued} requests already wait for a connection`));
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
    const { protocol, host, port, connectTimeoutMs, proxy } = this.options;
    const tunnelled = proxy !== undefined && protocol === 'https:';
    const socket = proxy
      ? connectTcp({ host: proxy.host, port: proxy.port })
      : protocol === 'https:'
        ? this.startTls({ host, port })
        : connectTcp({ host, port });
    socket.setNoDelay(true);
    const connection: Connection = {
      socket,
      tunnel: tunnelled ? socket : undefined,
      tunnelAnswer: tunnelled ? Buffer.alloc(0) : undefined,
      parser: new Http1ResponseParser({ maxBodyBytes: this.options.maxResponseBytes }),
      connected: false,
      current: undefined,
      expiresAt: 0,
      answeredAt: 0,
      connectTimer: undefined,
      dropped: false,
    };
    this.open += 1;
    this.connections.add(connection);
    connection.connectTimer = setTimeout(() => {
      const atProxy = proxy !== undefined && (!tunnelled || connection.tunnel !== undefined);
      const where = !proxy
        ? `${host}:${port}`
        : tunnelled
          ? `${host}:${port} through the proxy ${proxy.display}`
          : `the proxy ${proxy.display}`;
      this.drop(
        connection,
        new Http1Error('CONNECT_TIMEOUT', `no connection to ${where} within ${connectTimeoutMs} ms`, atProxy),
      );
    }, connectTimeoutMs);
    if (tunnelled) socket.once('connect', () => socket.write(this.connectRequest()));
    else socket.once(protocol === 'https:' && !proxy ? 'secureConnect' : 'connect', () => this.connected(connection));
    this.listen(connection, socket);
    return connection;
  }

  private startTls(options: { host: string; port: number; socket?: Socket }): TLSSocket {
    const { host } = this.options;
    return connectTls({
      ...this.options.tls,
      ...options,
      servername: isIP(host) !== 0 ? undefined : host,
      ALPNProtocols: ['http/1.1'],
    });
  }

  /** The CONNECT request of a tunnel to the origin (its authority, and the proxy's credentials). */
  private connectRequest(): string {
    const { host, port } = this.options;
    const authority = `${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
    const credentials = this.options.proxy?.authorization
      ? `Proxy-Authorization: ${this.options.proxy.authorization}\r\n`
      : '';
    return `CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n${credentials}\r\n`;
  }

  /** Events of `socket` while it is the connection's (a tunnel's TCP socket is replaced by its TLS socket). */
  private listen(connection: Connection, socket: Socket): void {
    const mine = () => connection.socket === socket || connection.tunnel === socket;
    socket.on('data', (chunk: Buffer) => {
      if (!mine()) return;
      if (connection.tunnelAnswer !== undefined && socket === connection.tunnel) this.tunnelData(connection, chunk);
      else this.receive(connection, chunk);
    });
    socket.on('end', () => mine() && this.ended(connection));
    socket.on(
      'error',
      (err: NodeJS.ErrnoException) => mine() && this.drop(connection, this.socketError(connection, err)),
    );
    socket.on(
      'close',
      () =>
        mine() &&
        this.drop(
          connection,
          new Http1Error(
            'CONNECTION_CLOSED',
            'the connection closed before the answer was complete',
            this.beforeOrigin(connection),
          ),
        ),
    );
  }

  /** Until the origin is reached through a proxy, any failure is the proxy's. */
  private beforeOrigin(connection: Connection): boolean {
    if (!this.options.proxy) return false;
    return this.options.protocol === 'http:' ? !connection.connected : connection.tunnel !== undefined;
  }

  private socketError(connection: Connection, err: NodeJS.ErrnoException): Http1Error {
    const code = err.code ?? 'ECONNECTION';
    if (!this.beforeOrigin(connection)) return new Http1Error(code, err.message);
    return new Http1Error(code, `the proxy ${this.options.proxy!.display} could not be used: ${err.message}`, true);
  }

  /** The proxy's answer to CONNECT: 2xx, then TLS to the origin over the tunnel; anything else fails the connection. */
  private tunnelData(connection: Connection, chunk: Buffer): void {
    const answer = Buffer.concat([connection.tunnelAnswer!, chunk]);
    const end = answer.indexOf('\r\n\r\n');
    if (end < 0) {
      if (answer.length > 16 * 1024)
        this.drop(
          connection,
          new Http1Error(
            'HTTP_MALFORMED',
            `the proxy ${this.options.proxy!.display} answered CONNECT with more than 16 KiB of head`,
            true,
          ),
        );
      else connection.tunnelAnswer = answer;
      return;
    }
    const statusLine = answer.subarray(0, answer.indexOf('\r\n')).toString('latin1');
    const status = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(statusLine);
    const { proxy, host, port } = this.options;
    if (!status) {
      this.drop(
        connection,
        new Http1Error(
          'HTTP_MALFORMED',
          `the proxy ${proxy!.display} answered CONNECT with "${statusLine.slice(0, 80)}"`,
          true,
        ),
      );
      return;
    }
    const code = Number(status[1]);
    if (code < 200 || code > 299) {
      const reason = (status[2] ?? '').replace(/[^\x20-\x7e]/g, '').slice(0, 80);
      this.drop(
        connection,
        new Http1Error(
          'PROXY_REFUSED',
          `the proxy ${proxy!.display} answered CONNECT ${host}:${port} with ${code}${reason ? ` ${reason}` : ''}`,
          true,
        ),
      );
      return;
    }
    if (answer.length > end + 4) {
      // Nothing may come from the origin before TLS's first message, which is ours.
      this.drop(
        connection,
        new Http1Error(
          'HTTP_MALFORMED',
          `the proxy ${proxy!.display} sent data after its CONNECT answer before TLS started`,
          true,
        ),
      );
      return;
    }
    const raw = connection.tunnel!;
    raw.removeAllListeners('data');
    connection.tunnelAnswer = undefined;
    const tls = this.startTls({ host, port, socket: raw });
    tls.setNoDelay(true);
    connection.socket = tls;
    connection.tunnel = undefined;
    // The TCP socket's errors now surface on the TLS socket; its own are only kept from being unhandled.
    raw.on('error', () => undefined);
    this.listen(connection, tls);
    tls.once('secureConnect', () => this.connected(connection));
  }

  private connected(connection: Connection): void {
    clearTimeout(connection.connectTimer);
    connection.connected = true;
    if (connection.current) this.write(connection, connection.current);
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
    if (this.absoluteForm && connection.answeredAt > 0 && performance.now() - connection.answeredAt < 1000)
      this.proxyKeepsConnections = false;
    if (connection.tunnel) {
      this.drop(
        connection,
        new Http1Error(
          'CONNECTION_CLOSED',
          `the proxy ${this.options.proxy!.display} closed the connection before the tunnel was up`,
          true,
        ),
      );
      return;
    }
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
    const reusable =
      answer.keepAlive &&
      answers.length === 1 &&
      !connection.parser.midResponse &&
      !this.closed &&
      connection.socket.readyState === 'open' &&
      this.reusesConnections;
    if (reusable) {
      const serverLimit = answer.keepAliveTimeoutMs === undefined ? Infinity : answer.keepAliveTimeoutMs - 1000;
      connection.answeredAt = performance.now();
      connection.expiresAt = connection.answeredAt + Math.min(this.options.keepAliveTimeoutMs, serverLimit);
      // Through a proxy, the connection is offered again from the next turn of the event loop:
      // a close that follows the answer at once (tinyproxy) is seen first, not written into.
      if (this.absoluteForm) setImmediate(() => this.offer(connection));
      else this.idle.push(connection);
    } else {
      this.discard(connection);
    }
    if (!pending.done) {
      pending.done = true;
      pending.exchange.onResponse(answer);
    }
    this.pump();
  }

  /** A connection answered through a proxy, still open and free: idle from now on. */
  private offer(connection: Connection): void {
    if (connection.dropped || connection.current || this.closed || connection.socket.readyState !== 'open') return;
    this.idle.push(connection);
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
    if (connection.tunnel && !connection.tunnel.destroyed) connection.tunnel.destroy();
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
