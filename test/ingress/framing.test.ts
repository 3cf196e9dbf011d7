import { describe, expect, it } from 'vitest';
import { framingProblem } from '../../src/ingress/framing.js';

const h = (...lines: string[]) => lines.map((l) => l.split(': ') as [string, string]);

describe('framingProblem (ambiguous HTTP/1.1 framing a proxy could read differently)', () => {
  it('accepts one Content-Length, or Transfer-Encoding: chunked alone (any case, spaces around)', () => {
    expect(framingProblem(h('host: x', 'content-length: 53'), true)).toBeUndefined();
    expect(framingProblem(h('host: x'), true)).toBeUndefined();
    expect(framingProblem(h('transfer-encoding: chunked'), true)).toBeUndefined();
    expect(framingProblem(h('transfer-encoding:  Chunked '), true)).toBeUndefined();
  });

  it.each([
    [h('content-length: 0', 'content-length: 53'), /repeated Content-Length/],
    [h('content-length: 53', 'content-length: 53'), /repeated Content-Length/],
    [h('transfer-encoding: chunked', 'transfer-encoding: chunked'), /repeated Transfer-Encoding/],
    [h('transfer-encoding: chunked', 'content-length: 5'), /both Content-Length and Transfer-Encoding/],
    [h('transfer-encoding: xchunked'), /Transfer-Encoding "xchunked"/],
    [h('transfer-encoding: gzip, chunked'), /Transfer-Encoding "gzip, chunked"/],
    [h('transfer-encoding: identity'), /only chunked/],
  ])('refuses %j', (headers, message) => {
    expect(framingProblem(headers, true)).toMatch(message);
  });

  it('refuses chunked bodies altogether when told to (their chunk framing cannot be checked)', () => {
    expect(framingProblem(h('transfer-encoding: chunked'), false)).toMatch(/chunked bodies are refused/);
    expect(framingProblem(h('content-length: 5'), false)).toBeUndefined();
  });
});
