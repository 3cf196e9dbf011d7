import { InvalidArgumentError, type Command } from 'commander';
import { commandConfig } from './context.js';
import type { Config } from '../config/schema.js';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { createShutdown } from '../runtime/shutdown.js';
import { createLogger } from '../platform/logger.js';
import { parseIntegerOption } from './options.js';
import { localUrl } from '../platform/net.js';
import { recipientNumber } from '../contracts/common.js';

/**
 * `msgbridge simulator` runs the provider stand-in; `simulator inbound` and `simulator faults`
 * talk to a running one.
 */
export function registerSimulatorCommand(program: Command): void {
  const simulator = program
    .command('simulator')
    .description(
      'run the provider simulator: the send API, webhook registrations and signed webhook deliveries, with faults on demand',
    )
    .option('--host <host>', 'listen address (default simulator.host)')
    .option(
      '--port <port>',
      'listen port, 0 = a free one (default simulator.port or MSGBRIDGE_SIMULATOR_PORT)',
      parseIntegerOption('--port', 0, 65535),
    )
    .action(async (opts: { host?: string; port?: number }, command: Command) => {
      await runSimulator(command, opts);
    });

  simulator
    .command('inbound')
    .description(
      'make a customer write to a business on a running simulator (a `messages` event; opens the 24-hour window)',
    )
    .option('--business <id>', 'business id (optional when one business is configured)')
    .requiredOption('--from <number>', 'the customer number, international format (+15550002222)', parsePhone)
    .requiredOption('--text <text>', 'the message text')
    .option('--name <name>', "the customer's profile name")
    .option(
      '--button [payload]',
      "send it as a button reply (isButtonResponse; --text is the button's text), with the button's payload when given",
    )
    .option('--url <url>', 'the simulator address (default http://127.0.0.1:<simulator.port>)', parseUrl)
    .action(
      async (
        opts: { business?: string; from: string; text: string; name?: string; button?: string | true; url?: string },
        command: Command,
      ) => {
        const config = commandConfig(command);
        const businessId = opts.business ?? onlyBusiness(config);
        const answer = await callSimulator(
          opts.url ?? simulatorUrl(config),
          'POST',
          `/sim/businesses/${encodeURIComponent(businessId)}/inbound`,
          {
            from: opts.from,
            text: opts.text,
            ...(opts.name !== undefined ? { name: opts.name } : {}),
            ...(opts.button !== undefined ? { button: opts.button === true ? {} : { payload: opts.button } } : {}),
          },
        );
        process.stdout.write(`${JSON.stringify(answer, null, 2)}\n`);
      },
    );

  simulator
    .command('faults')
    .description('show, change or reset the faults of a running simulator')
    .option(
      '--set <json>',
      'partial faults to merge, e.g. \'{"send429Rate":0.1,"send429RetryAfterSeconds":null}\'',
      parseJsonObject,
    )
    .option('--reset', 'remove every fault')
    .option('--url <url>', 'the simulator address (default http://127.0.0.1:<simulator.port>)', parseUrl)
    .action(async (opts: { set?: Record<string, unknown>; reset?: boolean; url?: string }, command: Command) => {
      if (opts.set !== undefined && opts.reset) throw new InvalidArgumentError('use either --set or --reset');
      const url = opts.url ?? simulatorUrl(commandConfig(command));
      const answer = opts.reset
        ? await callSimulator(url, 'DELETE', '/sim/faults')
        : opts.set !== undefined
          ? await callSimulator(url, 'PUT', '/sim/faults', opts.set)
          : await callSimulator(url, 'GET', '/sim/faults');
      process.stdout.write(`${JSON.stringify(answer, null, 2)}\n`);
    });
}

async function runSimulator(command: Command, opts: { host?: string; port?: number }): Promise<void> {
  const config = commandConfig(command);
  const logger = createLogger({ level: config.log.level, name: 'simulator' });
  const { simulatorOptionsFromConfig, startSimulator } = await import('../simulator/index.js');
  const options = simulatorOptionsFromConfig(config, { logger });
  if (opts.host !== undefined) options.host = opts.host;
  if (opts.port !== undefined) options.port = opts.port;
  const running = await startSimulator(options);
  const lifecycle = createShutdown({ logger, graceMs: 5_000, drain: () => running.close() });
  lifecycle.handleSignals();
  process.stderr.write(
    `provider simulator at ${running.url} for ${config.businesses.map((b) => b.id).join(', ')}; control endpoints under ${running.url}/sim/. Ctrl-C stops it.\n`,
  );
}

function onlyBusiness(config: Config): string {
  if (config.businesses.length === 1) return config.businesses[0]!.id;
  throw new MsgbridgeError(
    'INVALID_ARGUMENT',
    config.businesses.length === 0
      ? 'give --business (no business is configured)'
      : `give --business: ${config.businesses.length} businesses are configured`,
  );
}

function simulatorUrl(config: Config): string {
  return localUrl(config.simulator.host, config.simulator.port);
}

async function callSimulator(
  base: string,
  method: 'GET' | 'POST' | 'PUT' | 'DELETE',
  path: string,
  body?: unknown,
): Promise<unknown> {
  const { request } = await import('undici');
  let response;
  try {
    response = await request(new URL(path, base), {
      method,
      headers: { 'content-type': 'application/json' },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
      headersTimeout: 10_000,
      bodyTimeout: 10_000,
    });
  } catch (err) {
    throw new MsgbridgeError('SIMULATOR_UNAVAILABLE', `no simulator answers at ${base}: ${errorMessage(err)}`, {
      cause: err,
    });
  }
  const text = await response.body.text();
  let value: unknown = text;
  try {
    value = JSON.parse(text);
  } catch {
    // not JSON: reported as text
  }
  if (response.statusCode >= 500)
    throw new MsgbridgeError('SIMULATOR_UNAVAILABLE', `the simulator answered ${response.statusCode}: ${text}`);
  if (response.statusCode !== 200) {
    const message =
      typeof value === 'object' && value !== null && 'message' in value
        ? String((value as { message: unknown }).message)
        : text;
    throw new MsgbridgeError('INVALID_ARGUMENT', `the simulator answered ${response.statusCode}: ${message}`);
  }
  return value;
}

function parsePhone(value: string): string {
  if (!recipientNumber.safeParse(value).success)
    throw new InvalidArgumentError(
      `expected a phone number in international format (+ and 5-20 digits), got "${value}"`,
    );
  return value;
}

export function parseUrl(value: string): string {
  try {
    const url = new URL(value);
    if (url.protocol === 'http:' || url.protocol === 'https:') return value;
  } catch {
    // reported below
  }
  throw new InvalidArgumentError(`expected an http(s) address, got "${value}"`);
}

function parseJsonObject(value: string): Record<string, unknown> {
  try {
    const parsed: unknown = JSON.parse(value);
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
      return parsed as Record<string, unknown>;
  } catch {
    // reported below
  }
  throw new InvalidArgumentError(`expected a JSON object, got ${value}`);
}
