import type { HttpRequest, HttpResponse } from 'uWebSockets.js';
import type { Logger } from '../platform/logger.js';
import { FramingCheck } from './framing.js';
import type { IngressMetrics } from './metrics.js';
import { Responder } from './responder.js';

export type Route = (res: HttpResponse, req: HttpRequest) => void;

/** The peer's address as text, as uWS reports it (a proxy's when one fronts the ingress). */
export function addressOf(res: HttpResponse): string {
  return Buffer.from(res.getRemoteAddressAsText()).toString();
}

/**
 * Wraps every route: a request with ambiguous framing (framing.ts) is answered 400 and its
 * connection closed before anything of it is read, so nothing a proxy might frame differently
 * is acted on.
 *
 * uWS has already parsed the bytes behind the refused request and dispatches any request among
 * them right after (a smuggled one) even though the connection is to close; closing the socket
 * at once would also drop the 400 still corked for it. So the refused request's address is
 * remembered until the current batch of socket reads is done (setImmediate), and requests from
 * it meanwhile are refused the same way. uWS does not say which connection a request came on:
 * a request of another connection from the same address, read in the same batch, is refused
 * too (its sender retries).
 */
export class FramingGuard {
  private tainted: string | undefined;

  constructor(
    private readonly chunkedBodies: boolean,
    private readonly responder: Responder,
    private readonly metrics: IngressMetrics,
    private readonly logger: Logger,
  ) {}

  wrap(route: Route): Route {
    return (res, req) => {
      const problem =
        this.tainted !== undefined && addressOf(res) === this.tainted
          ? 'a request read behind an ambiguously framed one'
          : this.problemOf(req);
      if (problem === undefined) {
        route(res, req);
        return;
      }
      this.logger.warn(
        { status: 400, method: req.getMethod(), path: req.getUrl().slice(0, 200), problem },
        'ambiguous HTTP framing: refused, connection closed',
      );
      this.metrics.request('unknown', 'bad_framing');
      if (this.tainted === undefined) setImmediate(() => (this.tainted = undefined));
      this.tainted = addressOf(res);
      this.responder.write(
        Responder.of(res),
        400,
        JSON.stringify({ error: { code: 'BAD_FRAMING', message: `ambiguous HTTP framing: ${problem}` } }),
        { close: true },
      );
    };
  }

  /** Read now: the request does not outlive the handler. */
  private problemOf(req: HttpRequest): string | undefined {
    const check = new FramingCheck(this.chunkedBodies);
    req.forEach(check.header);
    return check.problem();
  }
}
