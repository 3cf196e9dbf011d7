import { describe, expect, it } from 'vitest';
import { Http1ResponseParser, MAX_RESPONSE_HEAD_BYTES, ResponseParseError, type ParsedResponse } from '../../src/simulator/http1-response-parser.js';

/** Feeds `text` split into pieces of `size` bytes and collects the answers. */
function feed(text: string, size = Infinity, parser = new Http1ResponseParser()): ParsedResponse[] {
  const bytes = Buffer.from(text, 'latin1');
  const out: ParsedResponse[] = [];
  const step = Number.isFinite(size) ? size : bytes.length;
  for (let i = 0; i < bytes.length; i += step) out.push(...parser.push(bytes.subarray(i, i + step)));
  return out;
}

const OK = 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}';
const CHUNKED = 'HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\nRetry-After: 1\r\n\r\n5;name=value\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: yes\r\n\r\n';

describe('HTTP/1.1 response parser', () => {
  it('completes a Content-Length answer however the bytes are split', () => {
    for (const size of [1, 2, 3, 7, 16, Infinity]) {
      expect(feed(OK, size), `pieces of ${size}`).toEqual([{ status: 200, keepAlive: true }]);
    }
  });

  it('completes a chunked answer with extensions and trailers however the bytes are split', () => {
    for (const size of [1, 2, 5, 13, Infinity]) {
      expect(feed(CHUNKED, size), `pieces of ${size}`).toEqual([{ status: 503, keepAlive: true }]);
    }
  });

  it('returns back-to-back answers in order and is reusable afterwards', () => {
    const parser = new Http1ResponseParser();
    expect(feed(OK + CHUNKED + OK, 9, parser).map((r) => r.status)).toEqual([200, 503, 200]);
    expect(parser.midResponse).toBe(false);
    expect(feed(OK.slice(0, 20), Infinity, parser)).toEqual([]);
    expect(parser.midResponse).toBe(true);
  });

  it('does not end an answer before its body has arrived', () => {
    const parser = new Http1ResponseParser();
    expect(parser.push(Buffer.from(OK.slice(0, -1)))).toEqual([]);
    expect(parser.push(Buffer.from('}'))).toEqual([{ status: 200, keepAlive: true }]);
  });

  it('skips interim 1xx answers, and takes 204 and 304 as bodiless whatever their headers say', () => {
    expect(feed(`HTTP/1.1 100 Continue\r\n\r\n${OK}`)).toEqual([{ status: 200, keepAlive: true }]);
    expect(feed('HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n' + OK).map((r) => r.status)).toEqual([204, 200]);
    expect(feed('HTTP/1.1 304 Not Modified\r\n\r\n').map((r) => r.status)).toEqual([304]);
    expect(feed('HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n').map((r) => r.status)).toEqual([202]);
  });

  it('reports whether the connection may be reused', () => {
    expect(feed('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n')).toEqual([{ status: 200, keepAlive: false }]);
    expect(feed('HTTP/1.1 200 OK\r\nconnection: Keep-Alive, Close\r\nContent-Length: 0\r\n\r\n')).toEqual([{ status: 200, keepAlive: false }]);
    expect(feed('HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n')).toEqual([{ status: 200, keepAlive: false }]);
    expect(feed('HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n')).toEqual([{ status: 200, keepAlive: true }]);
  });

  it('ends an answer without length at the close, and refuses a close in the middle of a framed one', () => {
    const parser = new Http1ResponseParser();
    expect(feed('HTTP/1.1 500 Oops\r\n\r\nsome body', 4, parser)).toEqual([]);
    expect(parser.end()).toEqual([{ status: 500, keepAlive: false }]);

    const unknownCoding = new Http1ResponseParser();
    expect(feed('HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\nabcdef', Infinity, unknownCoding)).toEqual([]);
    expect(unknownCoding.end()).toEqual([{ status: 200, keepAlive: false }]);

    const cut = new Http1ResponseParser();
    feed(OK.slice(0, -3), Infinity, cut);
    expect(() => cut.end()).toThrow(/closed in the middle/);
    expect(new Http1ResponseParser().end()).toEqual([]);
  });

  it('refuses malformed answers with a ResponseParseError naming the problem', () => {
    const cases: [string, RegExp][] = [
      ['HTTP/2 200 OK\r\n\r\n', /bad status line/],
      ['HTTP/1.1 20 OK\r\n\r\n', /bad status line/],
      ['<html>hello</html>\r\n\r\n', /bad status line/],
      ['HTTP/1.1 200 OK\r\nno colon here\r\n\r\n', /bad header line/],
      ['HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n', /bad content-length/],
      ['HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n', /conflicting content-length/],
      ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n', /bad chunk size/],
      ['HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n', /not followed by CRLF/],
    ];
    for (const [text, message] of cases) {
      const error = (() => {
        try {
          feed(text);
        } catch (err) {
          return err;
        }
        return undefined;
      })();
      expect(error, text).toBeInstanceOf(ResponseParseError);
      expect((error as Error).message, text).toMatch(message);
    }
  });

  it('bounds what it holds: a head that never ends is refused once past the limit', () => {
    const parser = new Http1ResponseParser();
    parser.push(Buffer.from('HTTP/1.1 200 OK\r\n'));
    const filler = Buffer.from(`X-Filler: ${'a'.repeat(1000)}\r\n`);
    expect(() => {
      for (let i = 0; i <= MAX_RESPONSE_HEAD_BYTES / filler.length + 1; i++) parser.push(filler);
    }).toThrow(/longer than/);
  });

  it('counts through large bodies to the end of the answer', () => {
    const parser = new Http1ResponseParser();
    expect(parser.push(Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n'))).toEqual([]);
    const block = Buffer.alloc(1_000_000, 0x61);
    for (let i = 0; i < 9; i++) expect(parser.push(block)).toEqual([]);
    expect(parser.push(block)).toEqual([{ status: 200, keepAlive: true }]);
  });
});
