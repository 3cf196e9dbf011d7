/**
 * HTTP/1.1 message framing the ingress refuses (400, connection closed) because a proxy in
 * front of it could read it differently and so disagree about where a request ends (request
 * smuggling, RFC 9112 §6.3). The uWebSockets.js build itself refuses a request with both
 * Content-Length and Transfer-Encoding, a list or signed Content-Length, obs-fold and bare-LF
 * header lines; it accepts the cases below, which the handler can still see in the headers. It
 * also accepts bare LF in chunk framing, which no header shows: `chunked: false` refuses
 * chunked bodies altogether for deployments whose proxy does not normalise them (docs/operations.md, "Ingress HTTP
 * answers"). Pure: the adapter passes the request's header lines.
 */
export function framingProblem(
  headers: Iterable<readonly [name: string, value: string]>,
  chunked: boolean,
): string | undefined {
  const check = new FramingCheck(chunked);
  for (const [name, value] of headers) check.header(name, value);
  return check.problem();
}

/** The same, fed one header line at a time (uWS's forEach), allocating nothing per line. */
export class FramingCheck {
  private lengths = 0;
  private encodings = 0;
  private encoding = '';

  constructor(private readonly chunked: boolean) {}

  readonly header = (name: string, value: string): void => {
    if (name === 'content-length') this.lengths += 1;
    else if (name === 'transfer-encoding') {
      this.encodings += 1;
      this.encoding = value;
    }
  };

  problem(): string | undefined {
    if (this.lengths > 1) return 'repeated Content-Length';
    if (this.encodings > 1) return 'repeated Transfer-Encoding';
    if (this.encodings === 0) return undefined;
    if (this.lengths > 0) return 'both Content-Length and Transfer-Encoding';
    if (this.encoding.trim().toLowerCase() !== 'chunked')
      return `Transfer-Encoding "${this.encoding.slice(0, 40)}" (only chunked is accepted)`;
    if (!this.chunked) return 'chunked bodies are refused here (ingress.chunkedBodies is false): send a Content-Length';
    return undefined;
  }
}
