/**
 * HTTP/1.1 message framing the ingress refuses (400, connection closed) because a proxy in
 * front of it could read it differently and so disagree about where a request ends (request
 * smuggling, RFC 9112 §6.3). The uWebSockets.js build itself refuses a request with both
 * Content-Length and Transfer-Encoding, a list or signed Content-Length, obs-fold and bare-LF
 * header lines; it accepts the cases below, which the handler can still see in the headers. It
 * also accepts bare LF in chunk framing, which no header shows: `chunked: false` refuses
 * chunked bodies altogether for deployments whose proxy does not normalise them (README).
 * Pure: the adapter passes the request's header lines.
 */
export function framingProblem(headers: Iterable<readonly [name: string, value: string]>, chunked: boolean): string | undefined {
  let lengths = 0;
  let encodings = 0;
  let encoding = '';
  for (const [name, value] of headers) {
    if (name === 'content-length') lengths += 1;
    else if (name === 'transfer-encoding') {
      encodings += 1;
      encoding = value;
    }
  }
  if (lengths > 1) return 'repeated Content-Length';
  if (encodings > 1) return 'repeated Transfer-Encoding';
  if (encodings === 0) return undefined;
  if (lengths > 0) return 'both Content-Length and Transfer-Encoding';
  if (encoding.trim().toLowerCase() !== 'chunked') return `Transfer-Encoding "${encoding.slice(0, 40)}" (only chunked is accepted)`;
  if (!chunked) return 'chunked bodies are refused here (ingress.chunkedBodies is false): send a Content-Length';
  return undefined;
}
