/**
 * An incremental HTTP/1.1 response parser for a client that sends one request at a time on a
 * keep-alive connection: bodies are framed by Content-Length, chunked transfer coding, or the
 * end of the connection; their first `maxBodyBytes` are kept (none by default: the load
 * generator needs only the status) and the rest is skipped as it arrives. Pure logic: bytes in,
 * completed responses out.
 */

export interface ParsedResponse {
  status: number;
  /**
   * False when the server asked to close (`Connection: close`, HTTP/1.0 without keep-alive, or a body delimited by the
   * close).
   */
  keepAlive: boolean;
  /** The `Retry-After` header, as sent. */
  retryAfter?: string;
  /** The server's idle timeout for this connection (`Keep-Alive: timeout=N`), in ms. */
  keepAliveTimeoutMs?: number;
  /** The body's first `maxBodyBytes` bytes (empty when none are kept). */
  body: Buffer;
  /** The body's whole length. */
  bodyBytes: number;
}

export interface Http1ResponseParserOptions {
  /** Body bytes kept per answer (default 0: bodies are skipped). */
  maxBodyBytes?: number;
}

/** The largest status line plus headers accepted; beyond it the answer is malformed. */
export const MAX_RESPONSE_HEAD_BYTES = 64 * 1024;

export class ResponseParseError extends Error {
  override readonly name = 'ResponseParseError';
}

type State =
  | { kind: 'head' }
  | { kind: 'length'; remaining: number }
  | { kind: 'chunk-size' }
  | { kind: 'chunk-data'; remaining: number }
  | { kind: 'chunk-data-end' }
  | { kind: 'trailers' }
  | { kind: 'until-close' };

const CRLF = Buffer.from('\r\n');
const HEAD_END = Buffer.from('\r\n\r\n');
const EMPTY = Buffer.alloc(0);

export class Http1ResponseParser {
  private state: State = { kind: 'head' };
  /** Bytes of an incomplete head, chunk-size line or trailer line. */
  private pending: Buffer = EMPTY;
  private current: ParsedResponse | undefined;
  private readonly maxBodyBytes: number;
  private bodyChunks: Buffer[] = [];
  private kept = 0;

  constructor(options: Http1ResponseParserOptions = {}) {
    this.maxBodyBytes = options.maxBodyBytes ?? 0;
  }

  /** True between the first byte of an answer and its end: the connection may not be reused yet. */
  get midResponse(): boolean {
    return this.state.kind !== 'head' || this.pending.length > 0;
  }

  /**
   * Feeds bytes as they arrive; returns the answers they complete (in order). Throws ResponseParseError on malformed
   * input.
   */
  push(chunk: Buffer): ParsedResponse[] {
    const done: ParsedResponse[] = [];
    const data = this.pending.length > 0 ? Buffer.concat([this.pending, chunk]) : chunk;
    this.pending = EMPTY;
    let offset = 0;
    while (offset < data.length) {
      const state = this.state;
      switch (state.kind) {
        case 'head': {
          const end = data.indexOf(HEAD_END, offset);
          if (end === -1) {
            if (data.length - offset > MAX_RESPONSE_HEAD_BYTES)
              throw new ResponseParseError(`response head longer than ${MAX_RESPONSE_HEAD_BYTES} bytes`);
            this.pending = Buffer.from(data.subarray(offset));
            return done;
          }
          if (end - offset > MAX_RESPONSE_HEAD_BYTES)
            throw new ResponseParseError(`response head longer than ${MAX_RESPONSE_HEAD_BYTES} bytes`);
          const head = parseHead(data.toString('latin1', offset, end));
          offset = end + HEAD_END.length;
          if (head.status < 200) continue; // 1xx: an interim answer, the real one follows
          this.current = { status: head.status, keepAlive: head.keepAlive, body: EMPTY, bodyBytes: 0 };
          if (head.retryAfter !== undefined) this.current.retryAfter = head.retryAfter;
          if (head.keepAliveTimeoutMs !== undefined) this.current.keepAliveTimeoutMs = head.keepAliveTimeoutMs;
          if (head.status === 204 || head.status === 304) {
            done.push(this.finish());
          } else if (head.chunked) {
            this.state = { kind: 'chunk-size' };
          } else if (head.contentLength !== undefined) {
            if (head.contentLength === 0) done.push(this.finish());
            else this.state = { kind: 'length', remaining: head.contentLength };
          } else {
            this.current.keepAlive = false;
            this.state = { kind: 'until-close' };
          }
          break;
        }
        case 'length':
        case 'chunk-data': {
          const take = Math.min(state.remaining, data.length - offset);
          this.keep(data, offset, take);
          offset += take;
          state.remaining -= take;
          if (state.remaining > 0) break;
          if (state.kind === 'length') done.push(this.finish());
          else this.state = { kind: 'chunk-data-end' };
          break;
        }
        case 'chunk-size':
        case 'chunk-data-end':
        case 'trailers': {
          const end = data.indexOf(CRLF, offset);
          if (end === -1) {
            if (data.length - offset > MAX_RESPONSE_HEAD_BYTES)
              throw new ResponseParseError('chunk framing line too long');
            this.pending = Buffer.from(data.subarray(offset));
            return done;
          }
          const line = data.toString('latin1', offset, end);
          offset = end + CRLF.length;
          if (state.kind === 'chunk-data-end') {
            if (line !== '') throw new ResponseParseError('chunk data not followed by CRLF');
            this.state = { kind: 'chunk-size' };
          } else if (state.kind === 'trailers') {
            if (line === '') done.push(this.finish());
          } else {
            const size = /^([0-9a-fA-F]{1,8})[ \t]*(?:;.*)?$/.exec(line);
            if (!size) throw new ResponseParseError(`bad chunk size line "${line.slice(0, 40)}"`);
            const n = Number.parseInt(size[1]!, 16);
            this.state = n === 0 ? { kind: 'trailers' } : { kind: 'chunk-data', remaining: n };
          }
          break;
        }
        case 'until-close':
          this.keep(data, offset, data.length - offset);
          offset = data.length;
          break;
      }
    }
    return done;
  }

  /** The connection ended: completes an answer delimited by the close, or throws if one was cut short. */
  end(): ParsedResponse[] {
    if (this.state.kind === 'until-close') return [this.finish()];
    if (this.midResponse) throw new ResponseParseError('connection closed in the middle of an answer');
    return [];
  }

  /** Counts `length` body bytes at `offset` and keeps what fits in `maxBodyBytes` (a copy: `data` is the socket's). */
  private keep(data: Buffer, offset: number, length: number): void {
    this.current!.bodyBytes += length;
    const room = Math.min(length, this.maxBodyBytes - this.kept);
    if (room <= 0) return;
    this.bodyChunks.push(Buffer.from(data.subarray(offset, offset + room)));
    this.kept += room;
  }

  private finish(): ParsedResponse {
    const response = this.current!;
    if (this.bodyChunks.length > 0)
      response.body = this.bodyChunks.length === 1 ? this.bodyChunks[0]! : Buffer.concat(this.bodyChunks);
    this.bodyChunks = [];
    this.kept = 0;
    this.current = undefined;
    this.state = { kind: 'head' };
    return response;
  }
}

function parseHead(text: string): {
  status: number;
  keepAlive: boolean;
  chunked: boolean;
  contentLength?: number;
  retryAfter?: string;
  keepAliveTimeoutMs?: number;
} {
  const lines = text.split('\r\n');
  const statusLine = /^HTTP\/1\.([01]) ([1-9]\d\d)(?: .*)?$/.exec(lines[0]!);
  if (!statusLine) throw new ResponseParseError(`bad status line "${lines[0]!.slice(0, 40)}"`);
  let keepAlive = statusLine[1] === '1';
  let chunked = false;
  let transferEncoding = false;
  let contentLength: number | undefined;
  let retryAfter: string | undefined;
  let keepAliveTimeoutMs: number | undefined;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i]!;
    const colon = line.indexOf(':');
    if (colon <= 0) throw new ResponseParseError(`bad header line "${line.slice(0, 40)}"`);
    const name = line.slice(0, colon).trim().toLowerCase();
    if (name === 'retry-after') {
      retryAfter = line.slice(colon + 1).trim();
      continue;
    }
    const value = line
      .slice(colon + 1)
      .trim()
      .toLowerCase();
    if (name === 'content-length') {
      if (!/^\d{1,15}$/.test(value)) throw new ResponseParseError(`bad content-length "${value.slice(0, 20)}"`);
      const n = Number(value);
      if (contentLength !== undefined && contentLength !== n)
        throw new ResponseParseError('conflicting content-length headers');
      contentLength = n;
    } else if (name === 'transfer-encoding') {
      // Any transfer coding overrides Content-Length; unless the last is chunked, the body runs to the close.
      const codings = value.split(',').map((c) => c.trim());
      transferEncoding = true;
      chunked = codings[codings.length - 1] === 'chunked';
    } else if (name === 'connection') {
      const options = value.split(',').map((c) => c.trim());
      if (options.includes('close')) keepAlive = false;
      else if (options.includes('keep-alive')) keepAlive = true;
    } else if (name === 'keep-alive') {
      const timeout = /(?:^|[,\s])timeout=(\d{1,9})(?:$|[,\s])/.exec(value);
      if (timeout) keepAliveTimeoutMs = Number(timeout[1]) * 1000;
    }
  }
  return {
    status: Number(statusLine[2]),
    keepAlive,
    chunked,
    ...(contentLength !== undefined && !transferEncoding ? { contentLength } : {}),
    ...(retryAfter !== undefined ? { retryAfter } : {}),
    ...(keepAliveTimeoutMs !== undefined ? { keepAliveTimeoutMs } : {}),
  };
}
