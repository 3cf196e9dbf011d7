import { InvalidArgumentError, type Command } from 'commander';
import { providerErrorSchema, WEBHOOK_TOPICS, type WebhookTopic } from '../contracts/index.js';
import type { BusinessConfig, Config } from '../config/schema.js';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { chooseProxy } from '../platform/proxy.js';
import { commandConfig } from './context.js';

interface WebhookOptions {
  business?: string[];
  addressBase?: string;
  providerUrl?: string;
  topics: WebhookTopic[];
  all?: boolean;
}

interface ListedRegistration {
  id: string;
  topic: string;
  address: string;
}

export function registerWebhooksCommand(program: Command): void {
  const webhooks = program
    .command('webhooks')
    .description('manage the webhook registrations of each configured business with the provider');
  const common = (command: Command) =>
    command
      .option('--business <id...>', 'only these businesses (default: every configured business)')
      .option('--provider-url <url>', 'provider base URL (default: provider.url / MSGBRIDGE_PROVIDER_URL)', parseUrl)
      .option(
        '--address-base <url>',
        'public base URL of the ingress (default: http://127.0.0.1:<ingress.port>)',
        parseUrl,
      )
      .option('--topics <list>', 'comma-separated topics', parseTopics, [...WEBHOOK_TOPICS]);

  common(
    webhooks
      .command('register')
      .description('register <address-base>/webhooks/<business>/<topic> for each business and topic (idempotent)'),
  ).action(async (opts: WebhookOptions, command: Command) => {
    const { config, businesses } = setup(command, opts);
    let failures = 0;
    for (const business of businesses) {
      const client = providerClient(config, business, opts);
      const existing = await client.list();
      for (const topic of opts.topics) {
        const address = addressFor(config, opts, business.id, topic);
        if (existing?.some((r) => r.topic === topic && r.address === address)) {
          say(`${business.id} ${topic}: already registered → ${address}`);
          continue;
        }
        const answer = await client.call('POST', 'create/webhooks', { topic, address });
        if (answer.ok) say(`${business.id} ${topic}: registered → ${address}`);
        else {
          failures += 1;
          say(`${business.id} ${topic}: ${answer.message}`);
        }
      }
    }
    if (failures > 0) process.exitCode = 1;
  });

  common(
    webhooks
      .command('list')
      .description('list the registrations of each business (a simulator extension; real providers may not offer it)'),
  ).action(async (opts: WebhookOptions, command: Command) => {
    const { config, businesses } = setup(command, opts);
    for (const business of businesses) {
      const listed = await providerClient(config, business, opts).list();
      if (listed === undefined) {
        say(`${business.id}: the provider does not offer listing registrations`);
        continue;
      }
      if (listed.length === 0) say(`${business.id}: no registrations`);
      for (const r of listed) say(`${business.id} ${r.topic} ${r.address} (id ${r.id})`);
    }
  });

  common(
    webhooks.command('delete').description("delete this ingress's registrations (or every registration with --all)"),
  )
    .option('--all', 'delete every registration of the business, not only this ingress address')
    .action(async (opts: WebhookOptions, command: Command) => {
      const { config, businesses } = setup(command, opts);
      let failures = 0;
      for (const business of businesses) {
        const client = providerClient(config, business, opts);
        const listed = await client.list();
        if (listed === undefined)
          throw new MsgbridgeError('INVALID_ARGUMENT', 'the provider does not offer listing or deleting registrations');
        const targets = listed.filter(
          (r) =>
            opts.topics.includes(r.topic as WebhookTopic) &&
            (opts.all || r.address === addressFor(config, opts, business.id, r.topic as WebhookTopic)),
        );
        if (targets.length === 0) say(`${business.id}: nothing to delete`);
        for (const r of targets) {
          const answer = await client.call('DELETE', `webhooks/${encodeURIComponent(r.id)}`);
          if (answer.ok) say(`${business.id} ${r.topic}: deleted ${r.address}`);
          else {
            failures += 1;
            say(`${business.id} ${r.topic}: ${answer.message}`);
          }
        }
      }
      if (failures > 0) process.exitCode = 1;
    });
}

function say(line: string) {
  process.stdout.write(`${line}\n`);
}

function parseUrl(value: string): string {
  try {
    const url = new URL(value);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('not http(s)');
    return value.replace(/\/+$/, '');
  } catch {
    throw new InvalidArgumentError(`expected an http(s) URL, got "${value}"`);
  }
}

function parseTopics(value: string): WebhookTopic[] {
  const topics = value
    .split(',')
    .map((t) => t.trim())
    .filter(Boolean);
  const bad = topics.filter((t) => !(WEBHOOK_TOPICS as readonly string[]).includes(t));
  if (topics.length === 0 || bad.length > 0)
    throw new InvalidArgumentError(`topics must be among ${WEBHOOK_TOPICS.join(', ')}, got "${value}"`);
  return topics as WebhookTopic[];
}

function setup(command: Command, opts: WebhookOptions): { config: Config; businesses: BusinessConfig[] } {
  const config = commandConfig(command);
  if (config.businesses.length === 0) {
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      'no business configured: set MSGBRIDGE_BUSINESS_ID and MSGBRIDGE_API_KEY, or businesses in the config file',
    );
  }
  const wanted = opts.business ?? config.businesses.map((b) => b.id);
  const unknown = wanted.filter((id) => !config.businesses.some((b) => b.id === id));
  if (unknown.length > 0) {
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      `unknown business ${unknown.join(', ')}; configured: ${config.businesses.map((b) => b.id).join(', ')}`,
    );
  }
  const businesses = config.businesses.filter((b) => wanted.includes(b.id));
  const keyless = businesses.filter((b) => !b.apiKey).map((b) => b.id);
  if (keyless.length > 0)
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      `business ${keyless.join(', ')} has no API key (MSGBRIDGE_API_KEY or businesses[].apiKey)`,
    );
  return { config, businesses };
}

function addressFor(config: Config, opts: WebhookOptions, businessId: string, topic: WebhookTopic): string {
  const base = opts.addressBase ?? `http://127.0.0.1:${config.ingress.port}`;
  return `${base}/webhooks/${encodeURIComponent(businessId)}/${topic}`;
}

/** The provider's webhook operations for one business, with one clear message per failure. */
function providerClient(config: Config, business: BusinessConfig, opts: WebhookOptions) {
  const base = `${opts.providerUrl ?? config.provider.url.replace(/\/+$/, '')}/v1/businesses/${encodeURIComponent(business.id)}`;
  // The sender's egress proxy, chosen the same way (src/sender/README.md "Egress proxy").
  const origin = new URL(base);
  const protocol = origin.protocol === 'https:' ? 'https:' : 'http:';
  const { proxy } = chooseProxy(
    {
      protocol,
      host: origin.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: Number(origin.port || (protocol === 'https:' ? 443 : 80)),
    },
    config.provider.proxy,
    process.env,
  );
  const through = proxy ? ` through the proxy ${proxy.display}` : '';
  let dispatcher: import('undici').Dispatcher | undefined;
  const call = async (
    method: 'GET' | 'POST' | 'DELETE',
    path: string,
    body?: unknown,
  ): Promise<{ ok: boolean; status: number; body: unknown; message: string }> => {
    const { request, ProxyAgent } = await import('undici');
    // Absolute form for an http provider, a CONNECT tunnel for https: as the sender's pool does.
    if (proxy && !dispatcher)
      dispatcher = new ProxyAgent({
        uri: proxy.display,
        ...(proxy.authorization ? { token: proxy.authorization } : {}),
        proxyTunnel: false,
      });
    let status: number;
    let text: string;
    try {
      const answer = await request(`${base}/${path}`, {
        method,
        headers: { accept: 'application/json', 'content-type': 'application/json', 'x-api-key': business.apiKey! },
        body: body === undefined ? undefined : JSON.stringify(body),
        headersTimeout: config.provider.timeoutMs,
        bodyTimeout: config.provider.timeoutMs,
        ...(dispatcher ? { dispatcher } : {}),
      });
      status = answer.statusCode;
      text = await answer.body.text();
    } catch (err) {
      throw new MsgbridgeError(
        'PROVIDER_UNAVAILABLE',
        `cannot reach the provider at ${base}${through}: ${errorMessage(err)}`,
        { cause: err },
      );
    }
    let parsed: unknown = text;
    try {
      parsed = text === '' ? null : JSON.parse(text);
    } catch {
      // not JSON: keep the text
    }
    const ok = status >= 200 && status < 300;
    return { ok, status, body: parsed, message: ok ? 'ok' : describeFailure(status, parsed) };
  };
  return {
    call,
    /** The registrations, or undefined when the provider has no listing operation. */
    async list(): Promise<ListedRegistration[] | undefined> {
      const answer = await call('GET', 'webhooks');
      if (answer.status === 404 || answer.status === 405) return undefined;
      if (!answer.ok)
        throw new MsgbridgeError(
          'INVALID_ARGUMENT',
          `listing the webhooks of ${business.id} failed: ${answer.message}`,
        );
      const body = answer.body as
        { webhooks?: ListedRegistration[]; registrations?: ListedRegistration[] } | ListedRegistration[];
      return Array.isArray(body) ? body : (body.webhooks ?? body.registrations ?? []);
    },
  };
}

function describeFailure(status: number, body: unknown): string {
  const error = providerErrorSchema.safeParse(body);
  const detail = error.success
    ? `${error.data.code}: ${error.data.message}${error.data.cntTraceId ? ` (trace ${error.data.cntTraceId})` : ''}`
    : String(body).slice(0, 200);
  if (status === 401 || status === 403) return `the provider rejected the API key (HTTP ${status}) ${detail}`;
  if (status === 429) return `the provider is rate limiting (HTTP 429), try again later: ${detail}`;
  if (status >= 500) return `the provider failed (HTTP ${status}), try again later: ${detail}`;
  return `the provider refused (HTTP ${status}): ${detail}`;
}
