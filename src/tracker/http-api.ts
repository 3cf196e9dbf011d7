import type { HttpAnswer, HttpRequest } from '../runtime/http-server.js';
import type { Logger } from '../platform/logger.js';
import { errorMessage, isMsgbridgeError } from '../platform/errors.js';
import { maskJson, type AccessRole, type Caller } from './access.js';
import type { AccessGuard } from './access-guard.js';
import type { ConsoleAssets } from './console-assets.js';
import type { DlqFilter, DlqPort } from './dlq-port.js';
import type { QueryService } from './query-service.js';

/**
 * Every route of the tracker's query port (README "Queries", "Console and access"; its
 * /healthz, /readyz and /metrics are on the admin port only): the console's files (open: they hold no data), and the
 * queries and dead-letter actions, each behind the access guard. Answers to a read-only caller
 * are masked when tracker.maskRecipients is on; none is cached by a browser or a proxy.
 */
const NO_STORE = { 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' };
const MAX_DLQ_PAGE = 200;

const json = (status: number, body: unknown): HttpAnswer => ({ status, body });
const error = (status: number, code: string, message: string): HttpAnswer => json(status, { error: code, message });

export interface TrackerHttpOptions {
  queries: QueryService;
  guard: AccessGuard;
  assets: ConsoleAssets | undefined;
  dlq: DlqPort | undefined;
  logger: Logger;
}

export function trackerRoutes(options: TrackerHttpOptions): (request: HttpRequest) => Promise<HttpAnswer | undefined> {
  const { queries, guard, assets, dlq, logger } = options;

  const admitted = async (
    request: HttpRequest,
    needed: AccessRole,
    what: string,
    handle: (caller: Caller) => Promise<HttpAnswer | undefined>,
  ): Promise<HttpAnswer | undefined> => {
    const admission = guard.admit(request.headers, needed, what);
    if (!admission.ok) return admission.answer;
    const answer = await handle(admission.caller);
    if (!answer) return undefined;
    const body = answer.body !== undefined && guard.masks(admission.caller) ? maskJson(answer.body) : answer.body;
    return { ...answer, body, headers: { ...NO_STORE, ...answer.headers } };
  };

  return async (request) => {
    const { path, method } = request;
    if (path === '/console' || path.startsWith('/console/')) {
      if (method === 'POST') return error(405, 'METHOD_NOT_ALLOWED', 'the console is read with GET');
      return (
        assets?.answer(path, request.headers) ??
        (assets ? undefined : error(404, 'NOT_FOUND', 'this tracker serves no console'))
      );
    }
    if (path === '/') return { status: 302, headers: { location: '/console/' }, raw: '' };

    if (path.startsWith('/dlq')) return dlqRoute(request);

    if (method === 'POST') return undefined;
    if (path === '/me') {
      return admitted(request, 'read', 'who am I', async (caller) =>
        json(200, {
          name: caller.name,
          role: caller.role,
          via: caller.via,
          masked: guard.masks(caller),
          dlq: dlq !== undefined,
        }),
      );
    }
    if (!/^\/(messages|requests|conversations|inbound|thread)(\/|$)/.test(path)) return undefined;
    return admitted(request, 'read', 'a query', async () =>
      queries.route(path, request.query, request.headers, guard.credentialHeaders(request.headers)),
    );
  };

  async function dlqRoute(request: HttpRequest): Promise<HttpAnswer | undefined> {
    const { path, method, query } = request;
    const m = /^\/dlq(?:\/([^/]+)\/(stats|records|redrive))?$/.exec(path);
    if (!m) return undefined;
    const topic = m[1] === undefined ? undefined : decodeURIComponent(m[1]);
    const action = m[2];
    if (action === 'redrive') {
      if (method !== 'POST')
        return { ...error(405, 'METHOD_NOT_ALLOWED', 'a redrive is a POST'), headers: { allow: 'POST' } };
      return admitted(request, 'operator', 'a redrive', async (caller) => {
        // A cross-site page cannot send JSON here without a preflight this server never answers.
        if (!String(request.headers['content-type'] ?? '').startsWith('application/json'))
          return error(415, 'INVALID_ARGUMENT', 'send the redrive as application/json');
        if (
          request.headers['sec-fetch-site'] !== undefined &&
          request.headers['sec-fetch-site'] !== 'same-origin' &&
          request.headers['sec-fetch-site'] !== 'none'
        ) {
          return error(403, 'FORBIDDEN', 'a redrive is only accepted from the console itself');
        }
        if (!dlq) return error(404, 'NOT_FOUND', 'this tracker has no access to the dead-letter topics');
        let body: { filter?: DlqFilter; dryRun?: boolean };
        try {
          body = JSON.parse(request.body.toString('utf8')) as typeof body;
        } catch {
          return error(
            400,
            'INVALID_ARGUMENT',
            'the body is not JSON: { "filter": { "code", "business", "since", "until" }, "dryRun": true | false }',
          );
        }
        if (typeof body !== 'object' || body === null || typeof body.dryRun !== 'boolean')
          return error(400, 'INVALID_ARGUMENT', 'say "dryRun": true (the plan) or false (the redrive itself)');
        const filter = filterOf((body.filter ?? {}) as Record<string, unknown>);
        if (typeof filter === 'string') return error(400, 'INVALID_ARGUMENT', filter);
        if (!body.dryRun)
          logger.info(
            { caller: caller.name, via: caller.via, topic, filter },
            'dlq redrive requested from the console',
          );
        return dlqCall(() => dlq.redrive(topic!, filter, { dryRun: body.dryRun!, by: caller.name }));
      });
    }
    if (method === 'POST') return undefined;
    return admitted(request, 'read', 'the dead-letter topics', async () => {
      if (!dlq)
        return json(200, {
          available: false,
          topics: [],
          message:
            'this tracker was started without access to the dead-letter topics: use msgbridge dlq stats|list|redrive',
        });
      if (topic === undefined) return json(200, { available: true, topics: dlq.topics() });
      if (action === 'stats') return dlqCall(() => dlq.stats(topic));
      const filter = filterOf(
        Object.fromEntries(['code', 'business', 'since', 'until'].map((k) => [k, query.get(k) ?? undefined])),
      );
      if (typeof filter === 'string') return error(400, 'INVALID_ARGUMENT', filter);
      const max = query.get('max') === null ? 50 : Number(query.get('max'));
      if (!Number.isInteger(max) || max < 1 || max > MAX_DLQ_PAGE)
        return error(400, 'INVALID_ARGUMENT', `max must be an integer from 1 to ${MAX_DLQ_PAGE}`);
      return dlqCall(() => dlq.list(topic, filter, { max, from: query.get('from') ?? undefined }));
    });
  }

  async function dlqCall(call: () => Promise<unknown>): Promise<HttpAnswer> {
    try {
      return json(200, await call());
    } catch (err) {
      if (isMsgbridgeError(err, 'INVALID_ARGUMENT')) return error(400, 'INVALID_ARGUMENT', err.message);
      if (isMsgbridgeError(err, 'NOT_FOUND')) return error(404, 'NOT_FOUND', err.message);
      logger.warn({ err: errorMessage(err) }, 'dead-letter query failed');
      return error(503, 'UNAVAILABLE', `the dead-letter topics could not be read: ${errorMessage(err)}; try again`);
    }
  }
}

/** The filter fields as strings, bounded; a message when one is not. */
function filterOf(raw: Record<string, unknown>): DlqFilter | string {
  const out: DlqFilter = {};
  for (const key of ['code', 'business', 'since', 'until'] as const) {
    const v = raw[key];
    if (v === undefined || v === null || v === '') continue;
    if (typeof v !== 'string' || v.length > 200) return `${key} must be a string of at most 200 characters`;
    if ((key === 'since' || key === 'until') && !Number.isFinite(Date.parse(v)))
      return `${key} must be an ISO time (2026-11-20T10:00:00Z)`;
    out[key] = v;
  }
  return out;
}
