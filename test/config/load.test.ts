import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'msgbridge-config-'));
function file(name: string, content: string): string {
  const path = join(dir, name);
  writeFileSync(path, content);
  return path;
}

function configError(fn: () => unknown): string {
  try {
    fn();
  } catch (err) {
    if (isMsgbridgeError(err)) return `${err.code}: ${err.message}`;
    throw err;
  }
  throw new Error('expected a configuration error');
}

describe('configuration loading', () => {
  it('loads the defaults, which are valid', () => {
    const config = loadConfig({ env: {} });
    expect(config.ingress.port).toBe(8080);
    expect(config.simulator.port).toBe(8090);
    expect(config.kafka.brokers).toEqual([]);
    expect(config.kafka.topics.deliveryStatus).toBe('delivery_status');
    expect(config.businesses).toEqual([]);
  });

  it('merges an override file named by MSGBRIDGE_CONFIG, then environment variables over both', () => {
    const override = file(
      'o.json',
      JSON.stringify({ ingress: { port: 9000, maxBodyBytes: 2048 }, kafka: { brokers: ['a:1'] } }),
    );
    const config = loadConfig({ env: { MSGBRIDGE_CONFIG: override, MSGBRIDGE_INGRESS_PORT: '9100' } });
    expect(config.ingress.port).toBe(9100);
    expect(config.ingress.maxBodyBytes).toBe(2048);
    expect(config.ingress.publishTimeoutMs).toBe(5000);
    expect(config.kafka.brokers).toEqual(['a:1']);
  });

  it('supports the single-business environment shorthand, with comma-separated secrets', () => {
    const config = loadConfig({
      env: {
        KAFKA_BROKERS: 'k1:9092, k2:9092',
        MSGBRIDGE_BUSINESS_ID: 'biz_1',
        MSGBRIDGE_SIGNING_SECRET: 'new-secret,old-secret',
        MSGBRIDGE_API_KEY: 'key-1',
        MSGBRIDGE_PROVIDER_URL: 'http://127.0.0.1:9999',
        MSGBRIDGE_SIMULATOR_PORT: '9001',
      },
    });
    expect(config.kafka.brokers).toEqual(['k1:9092', 'k2:9092']);
    expect(config.businesses).toEqual([{ id: 'biz_1', signingSecrets: ['new-secret', 'old-secret'], apiKey: 'key-1' }]);
    expect(config.provider.url).toBe('http://127.0.0.1:9999');
    expect(config.simulator.port).toBe(9001);
  });

  it('sizes the provider pool by sender.concurrency unless provider.connections is set', () => {
    expect(loadConfig({ env: {} }).provider.connections).toBeNull();
    expect(loadConfig({ env: { MSGBRIDGE__provider__connections: '16' } }).provider.connections).toBe(16);
  });

  it('updates a configured business of the same id and keeps the others', () => {
    const override = file(
      'biz.json',
      JSON.stringify({
        businesses: [
          { id: 'a', signingSecrets: ['s-a'], apiKey: 'k-a' },
          { id: 'b', signingSecrets: ['s-b'], apiKey: null },
        ],
      }),
    );
    const config = loadConfig({
      env: { MSGBRIDGE_CONFIG: override, MSGBRIDGE_BUSINESS_ID: 'b', MSGBRIDGE_API_KEY: 'k-b' },
    });
    expect(config.businesses).toEqual([
      { id: 'a', signingSecrets: ['s-a'], apiKey: 'k-a' },
      { id: 'b', signingSecrets: ['s-b'], apiKey: 'k-b' },
    ]);
  });

  it('reads secrets from *_FILE variables', () => {
    const secret = file('secret', 'from-file\n');
    const key = file('key', 'api-from-file');
    const config = loadConfig({
      env: { MSGBRIDGE_BUSINESS_ID: 'biz', MSGBRIDGE_SIGNING_SECRET_FILE: secret, MSGBRIDGE_API_KEY_FILE: key },
    });
    expect(config.businesses[0]).toEqual({ id: 'biz', signingSecrets: ['from-file'], apiKey: 'api-from-file' });
  });

  it('reads the SASL password from KAFKA_SASL_PASSWORD_FILE', () => {
    const pw = file('pw', 's3cret');
    const config = loadConfig({
      env: { KAFKA_SASL_MECHANISM: 'SCRAM-SHA-512', KAFKA_SASL_USERNAME: 'u', KAFKA_SASL_PASSWORD_FILE: pw },
    });
    expect(config.kafka.sasl).toEqual({ mechanism: 'scram-sha-512', username: 'u', password: 's3cret' });
  });

  it('applies the generic MSGBRIDGE__section__key form', () => {
    const config = loadConfig({
      env: { MSGBRIDGE__sender__concurrency: '8', MSGBRIDGE__kafka__topics__messages: 'inbound' },
    });
    expect(config.sender.concurrency).toBe(8);
    expect(config.kafka.topics.messages).toBe('inbound');
  });

  it.each([
    [
      { MSGBRIDGE_INGRESS_PORT: 'eighty' },
      /ingress\.port: expected a TCP port from 0 to 65535 \(0 = any free one\), got "eighty" \(from MSGBRIDGE_INGRESS_PORT\)/,
    ],
    [{ MSGBRIDGE_INGRESS_PORT: '70000' }, /ingress\.port: .*65535/],
    [
      { MSGBRIDGE_INGRESS_ADMIN_PORT: '70000' },
      /^CONFIG_INVALID: invalid configuration:\n  - ingress\.adminPort: expected a TCP port from 0 to 65535 \(0 = any free one\), got 70000 \(from MSGBRIDGE_INGRESS_ADMIN_PORT\)$/,
    ],
    [
      { MSGBRIDGE_SENDER_ADMIN_PORT: '-1' },
      /sender\.adminPort: expected a TCP port from 0 to 65535 .*got -1 \(from MSGBRIDGE_SENDER_ADMIN_PORT\)/,
    ],
    [
      { MSGBRIDGE_TRACKER_ADMIN_PORT: '8082.5' },
      /tracker\.adminPort: expected a TCP port .*got 8082\.5 \(from MSGBRIDGE_TRACKER_ADMIN_PORT\)/,
    ],
    [
      { MSGBRIDGE_INGRESS_ADMIN_PORT: '8080' },
      /^CONFIG_INVALID: invalid configuration:\n  - ingress\.adminPort: must differ from ingress\.port \(8080, the webhook port\): \/metrics and the health checks get a private port of their own \(from MSGBRIDGE_INGRESS_ADMIN_PORT\)$/,
    ],
    [
      { MSGBRIDGE_TRACKER_PORT: '9082' },
      /tracker\.adminPort: must differ from tracker\.port \(9082, the query and console port\)/,
    ],
    [
      { MSGBRIDGE__sender__healthPort: '8081' },
      /^CONFIG_INVALID: invalid configuration:\n  - sender\.healthPort: renamed sender\.adminPort .*\(from MSGBRIDGE__sender__healthPort\)$/,
    ],
    [{ KAFKA_BROKERS: 'localhost' }, /kafka\.brokers\.0: expected host:port \(from KAFKA_BROKERS\)/],
    [{ MSGBRIDGE_PROVIDER_URL: 'not a url' }, /provider\.url: .*\(from MSGBRIDGE_PROVIDER_URL\)/],
    [{ MSGBRIDGE_LOG_LEVEL: 'loud' }, /log\.level: .*\(from MSGBRIDGE_LOG_LEVEL\)/],
    [{ MSGBRIDGE__provider__connections: '0' }, /provider\.connections: .*\(from MSGBRIDGE__provider__connections\)/],
    [{ MSGBRIDGE_BUSINESS_ID: 'has space' }, /businesses\.0\.id: expected 1-128 letters/],
    [{ KAFKA_SASL_MECHANISM: 'gssapi', KAFKA_SASL_USERNAME: 'u', KAFKA_SASL_PASSWORD: 'p' }, /kafka\.sasl\.mechanism/],
    [{ MSGBRIDGE__ingress__unknownKey: '1' }, /ingress: Unrecognized key.*unknownKey/],
    [
      { MSGBRIDGE__ingress__kafkaProbeIntervalMs: '-1' },
      /ingress\.kafkaProbeIntervalMs: .*>=0.*\(from MSGBRIDGE__ingress__kafkaProbeIntervalMs\)/,
    ],
    [
      { MSGBRIDGE_SIGNING_SECRET: 'a', MSGBRIDGE_SIGNING_SECRET_FILE: '/x' },
      /set either MSGBRIDGE_SIGNING_SECRET or MSGBRIDGE_SIGNING_SECRET_FILE/,
    ],
    [{ MSGBRIDGE_API_KEY_FILE: '/nonexistent/key' }, /CONFIG_FILE_UNREADABLE: cannot read MSGBRIDGE_API_KEY_FILE/],
    [{ MSGBRIDGE_SIGNING_SECRET: 'a' }, /need MSGBRIDGE_BUSINESS_ID when 0 businesses are configured/],
  ])('rejects %j with a message naming the field', (env, message) => {
    expect(configError(() => loadConfig({ env }))).toMatch(message);
  });

  it('reads the admin ports from their variables; port 0 on both sides is two free ports, not a clash', () => {
    const config = loadConfig({
      env: {
        MSGBRIDGE_INGRESS_ADMIN_PORT: '9100',
        MSGBRIDGE_SENDER_ADMIN_PORT: '9101',
        MSGBRIDGE_TRACKER_ADMIN_PORT: '9102',
      },
    });
    expect([config.ingress.adminPort, config.sender.adminPort, config.tracker.adminPort]).toEqual([9100, 9101, 9102]);
    const defaults = loadConfig({ env: {} });
    expect([
      defaults.ingress.port,
      defaults.ingress.adminPort,
      defaults.sender.adminPort,
      defaults.tracker.port,
      defaults.tracker.adminPort,
    ]).toEqual([8080, 9080, 9081, 8082, 9082]);
    expect(
      loadConfig({ env: { MSGBRIDGE_INGRESS_PORT: '0', MSGBRIDGE_INGRESS_ADMIN_PORT: '0' } }).ingress.adminPort,
    ).toBe(0);
  });

  it('names the file and field for a bad value in an override file', () => {
    const bad = file('bad.json', JSON.stringify({ sender: { concurrency: 0 } }));
    expect(configError(() => loadConfig({ env: { MSGBRIDGE_CONFIG: bad } }))).toMatch(
      /sender\.concurrency: .*\(from .*bad\.json\)/,
    );
  });

  it('rejects an override file that is not JSON, or missing', () => {
    expect(configError(() => loadConfig({ env: { MSGBRIDGE_CONFIG: file('x.json', '{nope') } }))).toMatch(
      /CONFIG_INVALID: .*is not valid JSON/,
    );
    expect(configError(() => loadConfig({ env: { MSGBRIDGE_CONFIG: join(dir, 'missing.json') } }))).toMatch(
      /CONFIG_FILE_UNREADABLE/,
    );
  });

  it('rejects a drain grace shorter than a publish timeout plus a producer close: a drain during a stall would be cut off', () => {
    expect(() => loadConfig({ env: {}, overrides: { ingress: { drainGraceMs: 6000 } } })).toThrow(
      /ingress\.drainGraceMs: must be at least ingress\.publishTimeoutMs \+ kafka\.connectionTimeoutMs \+ 1000 \(9000\)/,
    );
    expect(loadConfig({ env: {}, overrides: { ingress: { drainGraceMs: 9000 } } }).ingress.drainGraceMs).toBe(9000);
  });

  it('reads the businesses from MSGBRIDGE_BUSINESSES_FILE, names the file for a bad one, and refuses it with the single-business variables', () => {
    const dir = mkdtempSync(join(tmpdir(), 'msgbridge-businesses-'));
    const file = join(dir, 'businesses.json');
    writeFileSync(file, JSON.stringify([{ id: 'biz_a', signingSecrets: ['s1', 's2'], apiKey: 'k' }]));
    const config = loadConfig({ env: { MSGBRIDGE_BUSINESSES_FILE: file } });
    expect(config.businessesFile).toBe(file);
    expect(config.businesses).toEqual([{ id: 'biz_a', signingSecrets: ['s1', 's2'], apiKey: 'k' }]);
    expect(() => loadConfig({ env: { MSGBRIDGE_BUSINESSES_FILE: file, MSGBRIDGE_BUSINESS_ID: 'biz_a' } })).toThrow(
      /either in the businesses file .* or with MSGBRIDGE_BUSINESS_ID, not both/,
    );
    writeFileSync(file, JSON.stringify([{ id: 'biz a', signingSecrets: [], apiKey: null }]));
    expect(() => loadConfig({ env: { MSGBRIDGE_BUSINESSES_FILE: file } })).toThrow(
      new RegExp(`businesses\\.0\\.id: .*\\(from ${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}\\)`),
    );
    writeFileSync(file, '{not json');
    expect(() => loadConfig({ env: { MSGBRIDGE_BUSINESSES_FILE: file } })).toThrow(
      /businesses file .* is not valid JSON/,
    );
    expect(() => loadConfig({ env: { MSGBRIDGE_BUSINESSES_FILE: join(dir, 'missing.json') } })).toThrow(
      /cannot read the businesses file/,
    );
  });

  it('rejects duplicate business ids', () => {
    const dup = file(
      'dup.json',
      JSON.stringify({
        businesses: [
          { id: 'a', signingSecrets: [], apiKey: null },
          { id: 'a', signingSecrets: [], apiKey: null },
        ],
      }),
    );
    expect(configError(() => loadConfig({ env: { MSGBRIDGE_CONFIG: dup } }))).toMatch(
      /businesses\.1\.id: duplicate business id "a"/,
    );
  });

  it('rejects an API key holding a control character (it is sent as a header), without printing it', () => {
    const bad = file(
      'crlf-key.json',
      JSON.stringify({ businesses: [{ id: 'b', signingSecrets: ['s'], apiKey: 'key-part\r\nX-Injected: 1' }] }),
    );
    const message = configError(() => loadConfig({ env: { MSGBRIDGE_CONFIG: bad } }));
    expect(message).toMatch(
      /businesses\.0\.apiKey: an API key is sent as an HTTP header: it cannot hold a control character/,
    );
    expect(message).not.toContain('key-part');
  });

  it('a deeper MSGBRIDGE__ key wins over a whole section whatever the order of the environment', () => {
    const section = {
      MSGBRIDGE__kafka__topics: JSON.stringify({
        ...loadConfig({ env: {} }).kafka.topics,
        sendRequests: 'from-section',
        sendResults: 'results-x',
      }),
    };
    const key = { MSGBRIDGE__kafka__topics__sendRequests: 'from-key' };
    for (const env of [
      { ...section, ...key },
      { ...key, ...section },
    ]) {
      const topics = loadConfig({ env }).kafka.topics;
      expect(topics.sendRequests).toBe('from-key');
      expect(topics.sendResults).toBe('results-x');
    }
  });

  it('never puts secret values in its error messages', () => {
    const message = configError(() =>
      loadConfig({
        env: { MSGBRIDGE_BUSINESS_ID: 'b', MSGBRIDGE_SIGNING_SECRET: 'topsecret', MSGBRIDGE_INGRESS_PORT: 'x' },
      }),
    );
    expect(message).not.toContain('topsecret');
  });

  it.each([
    [{ retryBudgetMs: 500 }, /sender\.retryBudgetMs: .*>=1000/],
    [{ retryBudgetMs: 8 * 24 * 3_600_000 }, /sender\.retryBudgetMs: /],
    [{ circuitFailureThreshold: 0 }, /sender\.circuitFailureThreshold: /],
    [{ circuitProbeMaxMs: 50 }, /sender\.circuitProbeMaxMs: /],
    [{ retryMaybeSent: 'yes' }, /sender\.retryMaybeSent: .*boolean/],
    [{ maxRequestAgeMs: -1 }, /sender\.maxRequestAgeMs: /],
    [{ sessionTimeoutMs: 1000 }, /sender\.sessionTimeoutMs: /],
    [
      { heartbeatIntervalMs: 3000, sessionTimeoutMs: 6000 },
      /sender\.heartbeatIntervalMs: must be at most a third of sessionTimeoutMs \(6000\)/,
    ],
    [{ backoffInitialMs: 5000, backoffMaxMs: 1000 }, /sender\.backoffInitialMs: must not exceed backoffMaxMs \(1000\)/],
    [{ completedRequestIdsMax: 0 }, /sender\.completedRequestIdsMax: /],
    [{ completedRequestIdsMax: 200_000_000 }, /sender\.completedRequestIdsMax: .*100000000/],
    [{ idempotencyWindowMs: 1000 }, /sender\.idempotencyWindowMs: .*60000/],
    [{ stateDir: '' }, /sender\.stateDir: /],
  ])('names the sender field for %j', (sender, message) => {
    const bad = file('sender.json', JSON.stringify({ sender }));
    expect(configError(() => loadConfig({ env: { MSGBRIDGE_CONFIG: bad } }))).toMatch(message);
  });

  it('reads ingress.workers (default 1) from MSGBRIDGE_INGRESS_WORKERS or the file: an integer from 1 to 256, or "auto"', () => {
    expect(loadConfig({ env: {} }).ingress.workers).toBe(1);
    expect(loadConfig({ env: { MSGBRIDGE_INGRESS_WORKERS: '4' } }).ingress.workers).toBe(4);
    expect(loadConfig({ env: { MSGBRIDGE_INGRESS_WORKERS: 'auto' } }).ingress.workers).toBe('auto');
    expect(
      loadConfig({ env: { MSGBRIDGE_CONFIG: file('workers.json', JSON.stringify({ ingress: { workers: 'auto' } })) } })
        .ingress.workers,
    ).toBe('auto');
    for (const bad of ['0', '257', '1.5', 'many', 'AUTO']) {
      expect(configError(() => loadConfig({ env: { MSGBRIDGE_INGRESS_WORKERS: bad } }))).toMatch(
        /^CONFIG_INVALID: invalid configuration:\n  - ingress\.workers: expected an integer from 1 to 256 or "auto", got .* \(from MSGBRIDGE_INGRESS_WORKERS\)$/,
      );
    }
    const inFile = file('workers-bad.json', JSON.stringify({ ingress: { workers: -2 } }));
    expect(configError(() => loadConfig({ env: { MSGBRIDGE_CONFIG: inFile } }))).toContain(
      `ingress.workers: expected an integer from 1 to 256 or "auto", got -2 (from ${inFile})`,
    );
  });

  it('reads provider.proxy (default null: the environment) from MSGBRIDGE_PROVIDER_PROXY or the file; a bad one is one line without its password', () => {
    expect(loadConfig({ env: {} }).provider.proxy).toBeNull();
    expect(loadConfig({ env: { MSGBRIDGE_PROVIDER_PROXY: ' http://proxy.corp:3128 ' } }).provider.proxy).toBe(
      'http://proxy.corp:3128',
    );
    expect(loadConfig({ env: { MSGBRIDGE_PROVIDER_PROXY: 'direct' } }).provider.proxy).toBe('direct');
    const message = configError(() =>
      loadConfig({ env: { MSGBRIDGE_PROVIDER_PROXY: 'socks5://user:hunter2@proxy:1080' } }),
    );
    expect(message).toBe(
      'CONFIG_INVALID: invalid configuration:\n  - provider.proxy: a socks5:// proxy is not supported: name an http:// proxy (https targets go through it in a CONNECT tunnel, TLS end to end); or "direct" for none, or null for the environment\'s (from MSGBRIDGE_PROVIDER_PROXY)',
    );
    const inFile = file(
      'proxy-bad.json',
      JSON.stringify({ provider: { proxy: 'http://user:hunter2@proxy:3128/some/path' } }),
    );
    const fromFile = configError(() => loadConfig({ env: { MSGBRIDGE_CONFIG: inFile } }));
    expect(fromFile).toContain(
      'provider.proxy: a proxy URL has no path, query or fragment: expected http://[user:password@]host[:port] (got http://***@proxy:3128/some/path)',
    );
    expect(fromFile).not.toContain('hunter2');
  });
});
