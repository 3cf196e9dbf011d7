import { connect as connectTcp, isIP, type Socket } from 'node:net';
import { connect as connectTls, type ConnectionOptions } from 'node:tls';
import { Http1ResponseParser, type ParsedResponse } from '../platform/http1-response-parser.js';

export interface ConnectionTarget {
  protocol: 'http:' | 'https:';
  /** Host name or IP address (IPv6 without brackets). */
  host: string;
  port: number;
  /** The local address to connect from (e.g. another loopback address), when it matters. */
  localAddress?: string;
}

interface Waiting {
  resolve: (status: number) => void;
  reject: (error: Error) => void;
  timer: NodeJS.Timeout;
}

/**
 * One keep-alive HTTP/1.1 connection for a load generator: a request is a ready-made buffer
 * (head and body), written with one call; the answer's status is all that is read back, the
 * body is skipped as it arrives. One request at a time. The socket is opened on first use and
 * again after the server closes it or an error; a request that fails (connection error,
 * malformed answer, timeout) rejects and is never resent, since webhooks are not idempotent
 * for the receiver's counts.
 *
 * Much cheaper per request than a general-purpose client, so that a load generator on the same
 * machine takes as little CPU as possible from the server it measures.
 */
export class KeepAliveConnection {
  private socket: Socket | undefined;
  private parser = new Http1ResponseParser();
  private waiting: Waiting | undefined;

  constructor(
    private readonly target: ConnectionTarget,
    private readonly timeoutMs: number,
    /** For https: trust settings beyond the system's certificate authorities. */
    private readonly tls: Pick<ConnectionOptions, 'ca' | 'rejectUnauthorized'> = {},
  ) {}

  /** Sends one request and resolves with the answer's HTTP status. */
  send(request: Buffer): Promise<number> {
    if (this.waiting) return Promise.reject(new Error('a request is already in flight on this connection'));
    const socket = this.socket ?? this.open();
    return new Promise<number>((resolve, reject) => {
      const timer = setTimeout(
        () => this.fail(socket, new Error(`no answer within ${this.timeoutMs} ms`)),
        this.timeoutMs,
      );
      this.waiting = { resolve, reject, timer };
      socket.write(request);
    });
  }

  close(): void {
    this.socket?.destroy();
    this.socket = undefined;
  }

  private open(): Socket {
    const { protocol, host, port, localAddress } = this.target;
    const from = localAddress === undefined ? {} : { localAddress };
    const socket =
      protocol === 'https:'
        ? connectTls({ ...this.tls, ...from, host, port, servername: isIP(host) !== 0 ? undefined : host })
        : connectTcp({ ...from, host, port });
    socket.setNoDelay(true);
    this.socket = socket;
    this.parser = new Http1ResponseParser();
    socket.on('data', (chunk: Buffer) => this.deliver(socket, () => this.parser.push(chunk)));
    socket.on('end', () => {
      this.deliver(socket, () => this.parser.end());
      this.fail(socket, new Error('connection closed by the server before answering'));
    });
    socket.on('error', (err) => this.fail(socket, err));
    socket.on('close', () => this.fail(socket, new Error('connection closed before answering')));
    return socket;
  }

  /** Runs the parser on what arrived and completes the answers it yields; a malformed answer fails the socket. */
  private deliver(socket: Socket, parse: () => ParsedResponse[]): void {
    let answers: ParsedResponse[];
    try {
      answers = parse();
    } catch (err) {
      this.fail(socket, err as Error);
      return;
    }
    for (const answer of answers) this.complete(socket, answer);
  }

  private complete(socket: Socket, answer: ParsedResponse): void {
    const waiting = this.waiting;
    if (!waiting || socket !== this.socket) {
      this.fail(socket, new Error(`unsolicited answer (status ${answer.status})`));
      return;
    }
    this.waiting = undefined;
    clearTimeout(waiting.timer);
    if (!answer.keepAlive) this.discard(socket);
    waiting.resolve(answer.status);
  }

  /** The socket is unusable: drop it and fail the request in flight on it, if any. */
  private fail(socket: Socket, error: Error): void {
    if (socket !== this.socket) return;
    this.discard(socket);
    const waiting = this.waiting;
    if (!waiting) return;
    this.waiting = undefined;
    clearTimeout(waiting.timer);
    waiting.reject(error);
  }

  private discard(socket: Socket): void {
    if (this.socket === socket) this.socket = undefined;
    socket.destroy();
  }
}
