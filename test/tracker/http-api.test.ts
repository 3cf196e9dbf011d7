import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/platform/logger.js';
import { Registry } from 'prom-client';
import { startAdminServer, startApiServer, type HttpServer } from '../../src/runtime/http-server.js';
import { loadConfig } from '../../src/config/load.js';
import { silentLogger } from '../../src/platform/logger.js';
import { AccessGuard } from '../../src/tracker/access-guard.js';
import { ConsoleAssets, CONSOLE_CSP } from '../../src/tracker/console-assets.js';
import { trackerRoutes } from '../../src/tracker/http-api.js';
import type { DlqPort } from '../../src/tracker/dlq-port.js';
import type { QueryService } from '../../src/tracker/query-service.js';
import { authHeaders, TEST_ACCESS_TOKENS } from './harness.js';

/**
 * The tracker's HTTP edge on a real server on port 0, without Kafka: a stub QueryService and
 * DLQ port behind the real guard, routes, assets and API server (methods, body bound,
 * HEAD, content types, caching, the redrive's checks, masking of every answer), and the admin
 * server beside it.
 */
let server: HttpServer;
let admin: HttpServer;
let base: string;
const redrives: { topic: string; dryRun: boolean; by: string }[] = [];
const forwardedCredentials: Record<string, string>[] = [];

const queries = {
  async route(path: string, _query: URLSearchParams, _headers: unknown, credentials: Record<string, string>) {
    forwardedCredentials.push(credentials);
    if (path === '/messages/m1')
      return {
        status: 200,
        body: { messageId: 'm1', recipient: '+15550002222', error: { message: 'to +15550002222' } },
      };
    return undefined;
  },
} as unknown as QueryService;

const dlq: DlqPort = {
  topics: () => ['send-requests-dlq'],
  stats: async (topic) => ({
    topic,
    records: 0,
    partitions: 1,
    oldest: null,
    newest: null,
    byCode: {},
    byBusiness: {},
    redriven: 0,
    redrives: [],
  }),
  list: async () => ({
    records: [
      {
        topic: 't',
        partition: 0,
        offset: '0',
        timestamp: '',
        key: null,
        role: null,
        business: null,
        code: 'c',
        reason: 'r',
        headers: {},
        value: '{"to":"+15550003333"}',
      },
    ],
    next: null,
  }),
  redrive: async (topic, _filter, options) => {
    redrives.push({ topic, ...options });
    return {
      topic,
      name: 'n',
      dryRun: options.dryRun,
      resuming: false,
      selected: 0,
      outside: 0,
      redriven: 0,
      produced: {},
      failing: {},
      failures: [],
      stopped: null,
      ms: 0,
    };
  },
};

beforeAll(async () => {
  const config = loadConfig({
    env: {},
    overrides: { tracker: { accessTokens: TEST_ACCESS_TOKENS as never, maskRecipients: true } },
  });
  const registry = new Registry();
  const guard = new AccessGuard(config.tracker, silentLogger, registry);
  guard.start();
  server = await startApiServer({
    host: '127.0.0.1',
    port: 0,
    route: trackerRoutes({ queries, guard, assets: new ConsoleAssets(), dlq, logger: silentLogger }),
  });
  admin = await startAdminServer({ host: '127.0.0.1', port: 0, registry, notReadyReason: () => 'restoring' });
  base = server.url;
});

afterAll(async () => {
  await server.close();
  await admin.close();
});

const post = (path: string, body: string, headers: Record<string, string> = {}) =>
  fetch(`${base}${path}`, {
    method: 'POST',
    body,
    headers: { 'content-type': 'application/json', ...authHeaders('operator'), ...headers },
  });

describe('tracker HTTP routes', () => {
  it('serves the console with its content types, a strict CSP and revalidation; /console redirects; nothing outside it', async () => {
    const page = await fetch(`${base}/console/`);
    expect(page.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(page.headers.get('content-security-policy')).toBe(CONSOLE_CSP);
    expect(page.headers.get('x-frame-options')).toBe('DENY');
    expect(await page.text()).toContain('<script type="module" src="/console/console.js">');
    // A view's address (any query) is the same page.
    expect((await fetch(`${base}/console/?q=%2B15550002222`)).headers.get('content-type')).toBe(
      'text/html; charset=utf-8',
    );
    const css = await fetch(`${base}/console/console.css`);
    expect(css.headers.get('content-type')).toBe('text/css; charset=utf-8');
    expect(css.headers.get('cache-control')).toMatch(/max-age=\d+, must-revalidate/);
    expect((await fetch(`${base}/console`, { redirect: 'manual' })).headers.get('location')).toBe('/console/');
    expect((await fetch(`${base}/`, { redirect: 'manual' })).headers.get('location')).toBe('/console/');
    for (const path of ['/console/nope.js', '/console/x/console.js', '/console/%2e%2e/access.ts'])
      expect((await fetch(`${base}${path}`)).status, path).toBe(404);
    const head = await fetch(`${base}/console/console.js`, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
    expect((await fetch(`${base}/console/`, { method: 'POST', body: '{}' })).status).toBe(405);
  });

  it('masks the answers of a read-only caller, passes the credential on to forwarded queries, never lets a browser cache data', async () => {
    const read = await fetch(`${base}/messages/m1`, { headers: authHeaders('read') });
    expect(await read.json()).toEqual({
      messageId: 'm1',
      recipient: '+1555•••2222',
      error: { message: 'to +1555•••2222' },
    });
    expect(read.headers.get('cache-control')).toBe('no-store');
    expect(forwardedCredentials.at(-1)).toEqual(authHeaders('read'));
    expect(
      (
        (await (await fetch(`${base}/messages/m1`, { headers: authHeaders('operator') })).json()) as {
          recipient: string;
        }
      ).recipient,
    ).toBe('+15550002222');
    const records = (await (
      await fetch(`${base}/dlq/send-requests-dlq/records`, { headers: authHeaders('read') })
    ).json()) as { records: { value: string }[] };
    expect(records.records[0]!.value).toBe('{"to":"+1555•••3333"}');
    expect((await fetch(`${base}/messages/unknown`, { headers: authHeaders('read') })).status).toBe(404);
    expect((await fetch(`${base}/elsewhere`, { headers: authHeaders('read') })).status).toBe(404);
  });

  it('a redrive: POST only, JSON only, from the same site only, operators only; every refusal before the port is called', async () => {
    expect((await fetch(`${base}/dlq/send-requests-dlq/redrive`, { headers: authHeaders('operator') })).status).toBe(
      405,
    );
    expect(
      (await post('/dlq/send-requests-dlq/redrive', '{"dryRun":true}', { 'content-type': 'text/plain' })).status,
    ).toBe(415);
    expect(
      (await post('/dlq/send-requests-dlq/redrive', '{"dryRun":true}', { 'sec-fetch-site': 'cross-site' })).status,
    ).toBe(403);
    expect((await post('/dlq/send-requests-dlq/redrive', '{"dryRun":true}', authHeaders('read'))).status).toBe(403);
    expect((await post('/dlq/send-requests-dlq/redrive', 'not json')).status).toBe(400);
    expect(
      (await post('/dlq/send-requests-dlq/redrive', '{"dryRun":true,"filter":{"since":"yesterday"}}')).status,
    ).toBe(400);
    expect(redrives).toEqual([]);
    const plan = await post('/dlq/send-requests-dlq/redrive', '{"dryRun":true,"filter":{"code":"X"}}', {
      'sec-fetch-site': 'same-origin',
    });
    expect(plan.status).toBe(200);
    expect(redrives).toEqual([{ topic: 'send-requests-dlq', dryRun: true, by: 'test-operator' }]);
  });

  it('the server: POST bodies are bounded, other methods refused, no health or metrics path (those are on the admin server)', async () => {
    expect(
      (await post('/dlq/send-requests-dlq/redrive', JSON.stringify({ dryRun: true, pad: 'x'.repeat(70_000) }))).status,
    ).toBe(413);
    expect((await fetch(`${base}/messages/m1`, { method: 'PUT', body: '' })).status).toBe(405);
    expect((await fetch(`${base}/messages/m1`, { method: 'PUT', body: '' })).headers.get('allow')).toBe(
      'GET, HEAD, POST',
    );
    for (const path of ['/healthz', '/readyz', '/metrics'])
      expect((await fetch(`${base}${path}`, { headers: authHeaders('operator') })).status, path).toBe(404);
    expect((await fetch(`${admin.url}/healthz`)).status).toBe(200);
    expect(await (await fetch(`${admin.url}/readyz`)).json()).toEqual({ ready: false, reason: 'restoring' });
    expect(await (await fetch(`${admin.url}/metrics`)).text()).toContain('msgbridge_tracker_access_refused_total');
    expect((await fetch(`${admin.url}/healthz`, { method: 'POST' })).status).toBe(405);
    expect((await fetch(`${admin.url}/console/`)).status).toBe(404);
  });

  it('a port already taken is one line naming the server and the port', async () => {
    await expect(
      startAdminServer({
        host: '127.0.0.1',
        port: server.port,
        registry: new Registry(),
        notReadyReason: () => undefined,
        what: "the tracker's admin port (tracker.adminPort)",
      }),
    ).rejects.toThrow(
      new RegExp(
        `^the tracker's admin port \\(tracker\\.adminPort\\) cannot listen on 127\\.0\\.0\\.1:${server.port} \\(in use\\)$`,
      ),
    );
  });
});

describe('tracker access without tokens, and behind a trusted SSO proxy', () => {
  async function serve(tracker: Record<string, unknown>) {
    let logs = '';
    const destination = new PassThrough();
    destination.on('data', (d: Buffer) => (logs += d.toString()));
    const config = loadConfig({ env: {}, overrides: { tracker } });
    const registry = new Registry();
    const guard = new AccessGuard(config.tracker, createLogger({ level: 'info', destination }), registry);
    guard.start();
    const started = await startApiServer({
      host: '127.0.0.1',
      port: 0,
      route: trackerRoutes({ queries, guard, assets: undefined, dlq: undefined, logger: silentLogger }),
    });
    return { url: started.url, logs: () => logs, close: () => started.close() };
  }

  it('with no credential configured every query answers 401 saying how to configure one, and the start says so once', async () => {
    const s = await serve({});
    try {
      const answer = await fetch(`${s.url}/messages/m1`, { headers: { 'x-forwarded-user': 'alice' } });
      expect(answer.status).toBe(401);
      expect(((await answer.json()) as { message: string }).message).toMatch(
        /no credential is configured on this tracker: add a token to tracker.accessTokens/,
      );
      expect(
        s
          .logs()
          .split('\n')
          .filter((l) => l.includes('no credential is configured')),
      ).toHaveLength(1);
      expect(s.logs()).toMatch(/"level":40/);
      // Without a console the tracker says so.
      expect((await fetch(`${s.url}/console/`)).status).toBe(404);
    } finally {
      await s.close();
    }
  });

  it('the trusted header names the user when configured: operators by name, everyone else reads; a redrive needs an operator', async () => {
    const s = await serve({
      trustedUserHeader: 'X-Forwarded-User',
      trustedUserOperators: ['bob'],
      maskRecipients: true,
    });
    try {
      const me = async (user: string) => (await fetch(`${s.url}/me`, { headers: { 'x-forwarded-user': user } })).json();
      expect(await me('alice')).toMatchObject({ name: 'alice', role: 'read', via: 'proxy', masked: true, dlq: false });
      expect(await me('bob')).toMatchObject({ name: 'bob', role: 'operator', via: 'proxy', masked: false });
      expect((await fetch(`${s.url}/me`)).status).toBe(401);
      const redrive = (user: string) =>
        fetch(`${s.url}/dlq/t/redrive`, {
          method: 'POST',
          headers: { 'x-forwarded-user': user, 'content-type': 'application/json' },
          body: '{"dryRun":true}',
        });
      expect((await redrive('alice')).status).toBe(403);
      // An operator, but this tracker was given no DLQ port: it says so.
      expect(await (await redrive('bob')).json()).toMatchObject({
        error: 'NOT_FOUND',
        message: expect.stringMatching(/no access to the dead-letter topics/),
      });
      // The header is passed on when a query is forwarded.
      await fetch(`${s.url}/messages/m1`, { headers: { 'x-forwarded-user': 'alice' } });
      expect(forwardedCredentials.at(-1)).toEqual({ 'x-forwarded-user': 'alice' });
    } finally {
      await s.close();
    }
  });
});
