import { describe, expect, it } from 'vitest';
import {
  Http1ResponseParser,
  MAX_RESPONSE_HEAD_BYTES,
  ResponseParseError,
  type ParsedResponse,
} from '../../src/platform/http1-response-parser.js';

/** Feeds `text` split into pieces of `size` bytes and collects the answers. */
function feedWhole(text: string, size = Infinity, parser = new Http1ResponseParser()): ParsedResponse[] {
  const bytes = Buffer.from(text, 'latin1');
  const out: ParsedResponse[] = [];
  const step = Number.isFinite(size) ? size : bytes.length;
  for (let i = 0; i < bytes.length; i += step) out.push(...parser.push(bytes.subarray(i, i + step)));
  return out;
}

/** Status and reuse of each answer: what a client that skips bodies looks at. */
const brief = (answers: ParsedResponse[]) => answers.map(({ status, keepAlive }) => ({ status, keepAlive }));
const feed = (text: string, size = Infinity, parser = new Http1ResponseParser()) =>
  brief(feedWhole(text, size, parser));

const OK = 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}';
const CHUNKED =
  'HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\nRetry-After: 1\r\n\r\n5;name=value\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-Trailer: yes\r\n\r\n';

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
    expect(brief(parser.push(Buffer.from('}')))).toEqual([{ status: 200, keepAlive: true }]);
  });

  it('skips interim 1xx answers, and takes 204 and 304 as bodiless whatever their headers say', () => {
    expect(feed(`HTTP/1.1 100 Continue\r\n\r\n${OK}`)).toEqual([{ status: 200, keepAlive: true }]);
    expect(feed('HTTP/1.1 204 No Content\r\nContent-Length: 10\r\n\r\n' + OK).map((r) => r.status)).toEqual([204, 200]);
    expect(feed('HTTP/1.1 304 Not Modified\r\n\r\n').map((r) => r.status)).toEqual([304]);
    expect(feed('HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n').map((r) => r.status)).toEqual([202]);
  });

  it('reports whether the connection may be reused', () => {
    expect(feed('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n')).toEqual([
      { status: 200, keepAlive: false },
    ]);
    expect(feed('HTTP/1.1 200 OK\r\nconnection: Keep-Alive, Close\r\nContent-Length: 0\r\n\r\n')).toEqual([
      { status: 200, keepAlive: false },
    ]);
    expect(feed('HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n')).toEqual([{ status: 200, keepAlive: false }]);
    expect(feed('HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n')).toEqual([
      { status: 200, keepAlive: true },
    ]);
  });

  it('ends an answer without length at the close, and refuses a close in the middle of a framed one', () => {
    const parser = new Http1ResponseParser();
    expect(feed('HTTP/1.1 500 Oops\r\n\r\nsome body', 4, parser)).toEqual([]);
    expect(brief(parser.end())).toEqual([{ status: 500, keepAlive: false }]);

    const unknownCoding = new Http1ResponseParser();
    expect(
      feed('HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 2\r\n\r\nabcdef', Infinity, unknownCoding),
    ).toEqual([]);
    expect(brief(unknownCoding.end())).toEqual([{ status: 200, keepAlive: false }]);

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
    expect(brief(parser.push(block))).toEqual([{ status: 200, keepAlive: true }]);
  });

  it('keeps the first maxBodyBytes of each body however it is framed and split, and counts the rest', () => {
    for (const size of [1, 3, 8, Infinity]) {
      const [a, b] = feedWhole(OK + CHUNKED, size, new Http1ResponseParser({ maxBodyBytes: 64 }));
      expect(a!.body.toString(), `pieces of ${size}`).toBe('{"ok":true}');
      expect(a!.bodyBytes).toBe(11);
      expect(b!.body.toString()).toBe('helloabcdefghijklmnopqrstuvwxyz');
      expect(b!.bodyBytes).toBe(31);
    }
    const [cut] = feedWhole(CHUNKED, 4, new Http1ResponseParser({ maxBodyBytes: 7 }));
    expect(cut!.body.toString()).toBe('helloab');
    expect(cut!.bodyBytes).toBe(31);
    const untilClose = new Http1ResponseParser({ maxBodyBytes: 100 });
    expect(feedWhole('HTTP/1.1 500 Oops\r\n\r\nsome', 3, untilClose)).toEqual([]);
    expect(untilClose.push(Buffer.from(' body'))).toEqual([]);
    expect(untilClose.end()[0]!.body.toString()).toBe('some body');
    // The default keeps no body (the load generator's use).
    expect(feedWhole(OK)[0]!.body.length).toBe(0);
  });

  it('reads Retry-After as sent and the server idle timeout of Keep-Alive', () => {
    const [answer] = feedWhole(CHUNKED);
    expect(answer!.retryAfter).toBe('1');
    const [hinted] = feedWhole(
      'HTTP/1.1 200 OK\r\nKeep-Alive: max=100, timeout=5\r\nRetry-After: Wed, 21 Oct 2026 07:28:00 GMT\r\nContent-Length: 0\r\n\r\n',
    );
    expect(hinted!.keepAliveTimeoutMs).toBe(5000);
    expect(hinted!.retryAfter).toBe('Wed, 21 Oct 2026 07:28:00 GMT');
    expect(feedWhole(OK)[0]!.keepAliveTimeoutMs).toBeUndefined();
    expect(
      feedWhole('HTTP/1.1 200 OK\r\nKeep-Alive: timeout=x\r\nContent-Length: 0\r\n\r\n')[0]!.keepAliveTimeoutMs,
    ).toBeUndefined();
  });
});
