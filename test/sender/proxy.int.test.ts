import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/platform/logger.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { runCli } from '../helpers/cli.js';
import { closedPort, startTestProxy, startTinyproxy } from '../helpers/http-proxy.js';
import {
  BIZ,
  collect,
  fixture,
  produceRequests,
  spawnSender,
  textRequest,
  waitUntil,
  type Collector,
  type Fixture,
} from './harness.js';

/**
 * The sender's egress proxy end to end: real Kafka, the provider simulator, and a proxy on
 * loopback (Debian's tinyproxy, or the small proxy of test/helpers/http-proxy.ts where the test
 * needs one that is down, then up, on a port of its choosing).
 */
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

async function setUp(options: Parameters<typeof fixture>[0] = {}): Promise<{ f: Fixture; results: Collector }> {
  const f = await fixture(options);
  cleanups.push(() => f.close());
  const results = await collect(f.topics.sendResults);
  cleanups.push(() => results.stop());
  return { f, results };
}

function capturedLogger() {
  const lines: Record<string, unknown>[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _e, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean))
        lines.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return { logger: createLogger({ level: 'debug', name: 'sender', destination }), lines };
}

const values = (results: Collector) =>
  results.values() as {
    requestId: string;
    outcome: string;
    attempts: number;
    maybeSent: boolean;
    messageId?: string;
  }[];

describe('sender through an HTTP proxy', () => {
  it('with HTTP_PROXY set, `msgbridge sender` sends through tinyproxy and the sends succeed', async () => {
    const { f, results } = await setUp();
    const tiny = await startTinyproxy();
    cleanups.push(() => tiny.close());
    const sender = spawnSender({ ...f.env(), HTTP_PROXY: tiny.url, MSGBRIDGE_LOG_LEVEL: 'info' });
    cleanups.push(async () => sender.child.kill('SIGKILL'));
    await sender.waitForOutput(/"msg":"provider calls go through an HTTP proxy"/);
    expect(sender.output()).toContain(`"proxy":"http://127.0.0.1:${tiny.port}","reason":"from HTTP_PROXY"`);

    await produceRequests(f.topics.sendRequests, [
      { key: '+15550006001', value: textRequest('proxied-1', '+15550006001', 'one') },
      { key: '+15550006002', value: textRequest('proxied-2', '+15550006002', 'two') },
    ]);
    await results.waitFor((r) => r.length >= 2, 60_000, 'the two results');
    expect(
      values(results)
        .map((v) => [v.requestId, v.outcome, v.attempts, v.maybeSent])
        .sort(),
    ).toEqual([
      ['proxied-1', 'accepted', 1, false],
      ['proxied-2', 'accepted', 1, false],
    ]);
    expect(
      f.simulator
        .sends()
        .map((s) => s.messageId)
        .sort(),
    ).toEqual(
      values(results)
        .map((v) => v.messageId)
        .sort(),
    );
    // tinyproxy saw each call, in absolute form to the simulator.
    expect(tiny.requests()).toEqual([
      { method: 'POST', target: `${f.simulator.url}/v1/businesses/${BIZ.id}/send/messages` },
      { method: 'POST', target: `${f.simulator.url}/v1/businesses/${BIZ.id}/send/messages` },
    ]);
  });

  it('a proxy that refuses connections: one error line, the request waits under the retry policy and is sent once the proxy is up, not maybe-sent', async () => {
    const { f, results } = await setUp({ sender: { circuitProbeMaxMs: 200 } });
    const port = await closedPort();
    const { logger, lines } = capturedLogger();
    const sender = await f.start({ logger, proxyEnv: { HTTP_PROXY: `http://relay:hunter2@127.0.0.1:${port}` } });
    await sender.ready;
    await produceRequests(f.topics.sendRequests, [
      { key: '+15550006003', value: textRequest('waits-for-proxy', '+15550006003', 'later') },
    ]);
    const retries = async () =>
      (await sender.metrics.getSingleMetric('msgbridge_sender_retries_total')!.get()).values.reduce(
        (n, v) => n + v.value,
        0,
      );
    const deadline = Date.now() + 30_000;
    while ((await retries()) < 4) {
      if (Date.now() > deadline) throw new Error('the sender did not retry');
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(results.records).toHaveLength(0);
    const failing = lines.filter(
      (l) =>
        l.msg ===
        'provider calls fail at the HTTP proxy: they wait and are retried under sender.retryBudgetMs, none is lost; check the proxy and provider.proxy or HTTPS_PROXY/HTTP_PROXY',
    );
    expect(failing).toHaveLength(1);
    expect(failing[0]).toMatchObject({
      level: 50,
      proxy: `http://127.0.0.1:${port}`,
      err: expect.stringContaining(`the proxy http://127.0.0.1:${port} could not be used: connect ECONNREFUSED`),
    });

    const proxy = await startTestProxy({ port, credentials: 'relay:hunter2' });
    cleanups.push(() => proxy.close());
    await results.waitFor((r) => r.length >= 1, 30_000, 'the result once the proxy is up');
    expect(values(results)[0]).toMatchObject({ requestId: 'waits-for-proxy', outcome: 'accepted', maybeSent: false });
    expect(values(results)[0]!.attempts).toBeGreaterThan(1);
    expect(proxy.counts().forwarded).toBe(1);
    expect(f.simulator.sends()).toHaveLength(1);
    await waitUntil(
      () => lines.some((l) => l.msg === `provider calls pass the proxy http://127.0.0.1:${port} again`),
      5000,
    );
    expect(JSON.stringify(lines)).not.toContain('hunter2');
  });

  it('NO_PROXY naming the provider sends directly; a bad proxy variable stops the sender naming it', async () => {
    const { f, results } = await setUp();
    const port = await closedPort();
    const sender = await f.start({
      proxyEnv: { HTTP_PROXY: `http://127.0.0.1:${port}`, NO_PROXY: 'localhost,127.0.0.0/8' },
    });
    await sender.ready;
    await produceRequests(f.topics.sendRequests, [
      { key: '+15550006004', value: textRequest('direct', '+15550006004', 'hi') },
    ]);
    await results.waitFor((r) => r.length >= 1, 30_000);
    expect(values(results)[0]).toMatchObject({ outcome: 'accepted', attempts: 1 });

    const refused = await f
      .start({ proxyEnv: { HTTP_PROXY: 'socks5://user:hunter2@127.0.0.1:1080' } })
      .catch((e: unknown) => e);
    expect(isMsgbridgeError(refused, 'CONFIG_INVALID')).toBe(true);
    expect((refused as Error).message).toBe(
      'invalid configuration:\n  - HTTP_PROXY: a socks5:// proxy is not supported: name an http:// proxy (https targets go through it in a CONNECT tunnel, TLS end to end)',
    );

    const cli = await runCli(['sender'], {
      ...f.env(),
      HTTPS_PROXY: 'x',
      HTTP_PROXY: 'http://proxy:99999',
      MSGBRIDGE_LOG_LEVEL: 'info',
    });
    // As every configuration error: the heading, then one line for the setting.
    expect(cli.code).toBe(2);
    expect(cli.stderr).toBe(
      'msgbridge: invalid configuration:\n  - HTTP_PROXY: not a URL: expected http://[user:password@]host[:port] (got http://proxy:99999)\n',
    );
  });

  it('msgbridge webhooks calls the provider through the same proxy', async () => {
    const { f } = await setUp();
    const proxy = await startTestProxy({ credentials: 'ops:pw' });
    cleanups.push(() => proxy.close());
    const env = { ...f.env(), HTTP_PROXY: `http://ops:pw@127.0.0.1:${proxy.port}` };
    const registered = await runCli(['webhooks', 'register', '--address-base', 'http://ingress.example'], env);
    expect(registered.code, registered.stderr).toBe(0);
    const listed = await runCli(['webhooks', 'list'], env);
    expect(listed.stdout).toContain(`${BIZ.id} messages http://ingress.example/webhooks/${BIZ.id}/messages`);
    expect(proxy.counts().forwarded).toBeGreaterThanOrEqual(3);
    expect(new Set(proxy.authorizations)).toEqual(new Set([`Basic ${Buffer.from('ops:pw').toString('base64')}`]));

    await proxy.close();
    const down = await runCli(['webhooks', 'list'], env);
    expect(down.code).not.toBe(0);
    expect(down.stderr).toContain(`through the proxy http://127.0.0.1:${proxy.port}`);
    expect(down.stderr).not.toContain('ops:pw');
  });
});
