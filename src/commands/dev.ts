import { createHash, randomBytes } from 'node:crypto';
import type { Command } from 'commander';
import type { Registry } from 'prom-client';
import type { Config } from '../config/schema.js';
import { WEBHOOK_TOPICS } from '../contracts/index.js';
import type { Ingress } from '../ingress/index.js';
import type { Brokers } from '../local-kafka/obtain-brokers.js';
import { createShutdown } from '../runtime/shutdown.js';
import { roleLoggers } from '../platform/logger.js';
import type { Role } from '../runtime/role.js';
import type { Sender } from '../sender/index.js';
import type { Tracker } from '../tracker/index.js';
import { defaultCacheDir, removeKeptDir } from '../local-kafka/local-broker.js';
import { rmSync } from 'node:fs';
import { join } from 'node:path';

import type { RunningSimulator } from '../simulator/index.js';
import { commandConfig, writeDevState } from './context.js';
import { parseIntegerOption } from './options.js';
import { loopbackHost } from '../platform/net.js';

const DEFAULT_STATE_DIR = './state/tracker';
const DEFAULT_SENDER_STATE_DIR = './state/sender';

/** The business `msgbridge dev` runs with when none is configured (local use only). */
export const DEV_BUSINESS = { id: 'biz_1', signingSecrets: ['dev-signing-secret'], apiKey: 'dev-api-key' } as const;

/**
 * A fresh operator token for this run of `msgbridge dev`, added to the configured ones: the
 * console link it prints carries it in the URL fragment (never sent to a server, so never in a
 * log); the page moves it to sessionStorage. It dies with the process.
 */
export function devAccessToken(): { token: string; entry: { name: string; role: 'operator'; sha256: string } } {
  const token = randomBytes(24).toString('base64url');
  return { token, entry: { name: 'dev', role: 'operator', sha256: createHash('sha256').update(token).digest('hex') } };
}

interface DevOptions {
  summaryInterval: number;
  quiet?: boolean;
  fresh?: boolean;
}

export function registerDevCommand(program: Command): void {
  program
    .command('dev')
    .description(
      'everything in one process: embedded Kafka (or KAFKA_BROKERS), the provider simulator, the ingress, the sender and the tracker',
    )
    .option(
      '--summary-interval <seconds>',
      'seconds between live summary lines (0 = none)',
      parseIntegerOption('--summary-interval', 0, 3600),
      5,
    )
    .option('--quiet', 'no live summary')
    .option(
      '--fresh',
      "start empty: remove what earlier runs kept (the embedded Kafka's topics, the sender's and the tracker's state)",
    )
    .action(async (opts: DevOptions, command: Command) => {
      const access = devAccessToken();
      const config = devConfig(commandConfig(command));
      // A configured token named "dev" gives way to this run's.
      const tokens = [...config.tracker.accessTokens.filter((t) => t.name !== 'dev'), access.entry];
      await runDev({ ...config, tracker: { ...config.tracker, accessTokens: tokens } }, opts, access.token);
    });
}

/** Where `msgbridge dev` keeps a role's state between runs, unless a directory was configured. */
function devStateDir(role: 'sender' | 'tracker'): string {
  return join(defaultCacheDir(), 'dev-state', role);
}

/** Where the embedded Kafka of `msgbridge dev` keeps its data between runs. */
export function devKafkaDir(config: Config): string {
  return config.localKafka.devDataDir ?? join(config.localKafka.cacheDir ?? defaultCacheDir(), 'dev-state', 'kafka');
}

/**
 * `--fresh`: what earlier runs kept goes, the embedded Kafka's data first (refused while another
 * `msgbridge dev` uses it); the sender's and tracker's state only where dev placed it.
 */
function removeKeptState(config: Config): void {
  removeKeptDir(devKafkaDir(config));
  for (const role of ['sender', 'tracker'] as const)
    if (config[role].stateDir === devStateDir(role)) rmSync(config[role].stateDir, { recursive: true, force: true });
}

/**
 * Local defaults: one demo business when none is configured, services on loopback, and the
 * sender pointed at the simulator. Ports stay those of the configuration (8080, 8082, 8090; the
 * admin ports 9080, 9081, 9082).
 */
export function devConfig(config: Config): Config {
  const businesses =
    config.businesses.length > 0
      ? config.businesses
      : [{ ...DEV_BUSINESS, signingSecrets: [...DEV_BUSINESS.signingSecrets] }];
  return {
    ...config,
    businesses,
    ingress: {
      ...config.ingress,
      host: loopbackHost(config.ingress.host),
      adminHost: loopbackHost(config.ingress.adminHost),
    },
    // The tracker runs here, so the sender can know the conversation window: both paths show.
    sender: {
      ...config.sender,
      adminHost: loopbackHost(config.sender.adminHost),
      conversationWindow: 'reject',
      // Its request ledger beside the tracker's stores unless a directory was configured.
      stateDir: config.sender.stateDir === DEFAULT_SENDER_STATE_DIR ? devStateDir('sender') : config.sender.stateDir,
    },
    // The tracker's stores go under the project's cache unless a directory was configured.
    tracker: {
      ...config.tracker,
      host: loopbackHost(config.tracker.host),
      adminHost: loopbackHost(config.tracker.adminHost),
      stateDir: config.tracker.stateDir === DEFAULT_STATE_DIR ? devStateDir('tracker') : config.tracker.stateDir,
    },
  };
}

function line(text = '') {
  process.stdout.write(`${text}\n`);
}

async function runDev(config: Config, opts: DevOptions, devToken: string): Promise<void> {
  // Logs go to stderr (warnings and up by default), the screen to stdout.
  const loggers = roleLoggers(['dev', 'simulator', 'ingress', 'tracker', 'sender'], {
    level: process.env.MSGBRIDGE_LOG_LEVEL ?? 'warn',
  });
  const logger = loggers.dev;
  const started = Date.now();
  let brokers: Brokers | undefined;
  let simulator: RunningSimulator | undefined;
  let ingress: Ingress | undefined;
  let sender: Sender | undefined;
  let tracker: Tracker | undefined;
  // Every role alike, in the order they stop: the edges first, so no new work starts.
  const roles = (): Role[] => [sender, ingress, tracker].filter((r): r is NonNullable<typeof r> => r !== undefined);
  let removeState: (() => void) | undefined;
  let summary: NodeJS.Timeout | undefined;

  const stopAll = async () => {
    clearInterval(summary);
    // Inward first: stop taking work at the edges, then drain, then stop Kafka last.
    let finished = true;
    for (const role of roles()) finished = (await role.drain()) && finished;
    await simulator?.close();
    await brokers?.local?.stop();
    removeState?.();
    return finished;
  };

  const lifecycle = createShutdown({
    logger,
    graceMs: Math.max(config.ingress.drainGraceMs, config.sender.drainGraceMs) + config.tracker.drainGraceMs + 15_000,
    drain: stopAll,
  });
  lifecycle.handleSignals((code) => {
    line(code === 0 ? 'stopped.' : 'stopped (drain incomplete).');
    process.exit(code);
  });

  try {
    line('msgbridge dev: starting…');
    // Loaded here, not at the CLI's start: `msgbridge sender` loads none of the other roles (src/commands/README.md).
    const [
      { obtainBrokers },
      { startSimulator, simulatorOptionsFromConfig },
      { startIngress },
      { startTracker },
      { startSender },
      { createDlqPort },
    ] = await Promise.all([
      import('../local-kafka/obtain-brokers.js'),
      import('../simulator/index.js'),
      import('../ingress/index.js'),
      import('../tracker/index.js'),
      import('../sender/index.js'),
      import('./dlq-console.js'),
    ]);
    if (opts.fresh) removeKeptState(config);
    brokers = await obtainBrokers(config, logger, devKafkaDir(config));
    simulator = await startSimulator({ ...simulatorOptionsFromConfig(config), logger: loggers.simulator });
    // One embedded broker cannot hold three replicas: ask for what it can give.
    const replicationFactor = brokers.local ? 1 : config.kafka.replicationFactor;
    const wired: Config = {
      ...config,
      kafka: { ...config.kafka, brokers: brokers.brokers, replicationFactor },
      // The simulator runs in this process: a proxy set in the developer's shell (HTTPS_PROXY...) must not carry its
      // calls.
      provider: { ...config.provider, url: simulator.url, proxy: 'direct' },
    };
    ingress = await startIngress({ config: wired, brokers: brokers.brokers, logger: loggers.ingress });
    // The tracker first: it creates the conversations topic the sender reads before it consumes.
    tracker = await startTracker({
      config: wired,
      brokers: brokers.brokers,
      logger: loggers.tracker,
      dlq: createDlqPort(wired, brokers.brokers, loggers.tracker),
    });
    sender = await startSender({ config: wired, brokers: brokers.brokers, logger: loggers.sender });
    await Promise.all(roles().map((role) => role.ready));
    for (const business of config.businesses) {
      for (const topic of WEBHOOK_TOPICS)
        simulator.registerWebhook(
          business.id,
          topic,
          `${ingress.address}/webhooks/${encodeURIComponent(business.id)}/${topic}`,
        );
    }
    removeState = writeDevState(config, {
      pid: process.pid,
      brokers: brokers.brokers,
      ingressUrl: ingress.address,
      simulatorUrl: simulator.url,
      startedAt: new Date().toISOString(),
    });
  } catch (err) {
    await lifecycle.stop('start-up failed');
    throw err;
  }
  printScreen(config, { brokers, simulator, ingress, sender, tracker, startupMs: Date.now() - started, devToken });

  if (!opts.quiet && opts.summaryInterval > 0) {
    const registries = { ingress: ingress.metrics, sender: sender.metrics, tracker: tracker.metrics };
    let last = '';
    summary = setInterval(() => {
      void summarize(registries).then((text) => {
        if (text !== last) line(`[${new Date().toISOString().slice(11, 19)}] ${text}`);
        last = text;
      });
    }, opts.summaryInterval * 1000);
    summary.unref();
  }
  await new Promise(() => {}); // runs until a signal drains and exits
}

function printScreen(
  config: Config,
  s: {
    brokers: Brokers;
    simulator: RunningSimulator;
    ingress: Ingress;
    sender: Sender;
    tracker: Tracker;
    startupMs: number;
    devToken: string;
  },
) {
  const biz = config.businesses[0]!.id;
  const t = config.kafka.topics;
  const kept = s.brokers.local?.dataDir === devKafkaDir(config);
  const kafka = s.brokers.local
    ? `${s.brokers.brokers.join(',')}  (embedded Apache Kafka, KRaft${kept ? `; keeps its topics between runs in ${s.brokers.local.dataDir}, --fresh empties it` : ''})`
    : `${s.brokers.brokers.join(',')}  (KAFKA_BROKERS)`;
  line();
  line(`msgbridge dev is running (ready in ${(s.startupMs / 1000).toFixed(1)} s). Ctrl-C stops everything.`);
  line();
  line(`  Kafka       ${kafka}`);
  line(`  simulator   ${s.simulator.url}  (the provider stand-in; /sim/ endpoints for faults and history)`);
  line(
    `  ingress     ${s.ingress.address}/webhooks/<business>/{${t.messages},${t.deliveryStatus}}  (registered with the simulator)`,
  );
  line(
    `  sender      ${t.sendRequests} → provider → ${t.sendResults}${s.sender.adminAddress ? `  (admin ${s.sender.adminAddress})` : ''}`,
  );
  line(
    `  tracker     ${t.sendResults} + ${t.deliveryStatus} → ${t.messageState}, ${t.requestOutcomes}; ${t.messages} → ${t.conversations}, ${t.inboundMessages}${s.tracker.address ? `  (queries ${s.tracker.address}/messages/<id>)` : ''}`,
  );
  line(`  businesses  ${config.businesses.map((b) => b.id).join(', ')}`);
  line(
    `  metrics     ${[s.ingress, s.sender, s.tracker].flatMap((r) => (r.adminAddress ? [`${r.adminAddress}/metrics`] : [])).join('  ')}  (the admin ports; /healthz and /readyz there too)`,
  );
  if (s.tracker.address)
    line(
      `  console     ${s.tracker.address}/console/#token=${s.devToken}  (a dev operator token, valid while this runs)`,
    );
  line();
  line('Try it, in another terminal:');
  line(
    `  npx msgbridge simulator inbound --business ${biz} --from +15550002222 --text "Hi!" --url ${s.simulator.url}   # the customer writes first`,
  );
  line(
    `  npx msgbridge send text --business ${biz} --to +15550002222 --text "Hello from msgbridge"                       # → accepted, sent, delivered, read`,
  );
  line(
    `  npx msgbridge send text --business ${biz} --to +15550009999 --text "Hello"                                   # no window: rejected at once, no provider call`,
  );
  line(
    `  npx msgbridge send text --business ${biz} --to +15550009999 --text "Hello" --fallback-template order_update -p order=42   # the template goes out instead`,
  );
  line(`  npx msgbridge send template --business ${biz} --to +15550009999 --template order_update --param order=42`);
  line(`  npx msgbridge tail ${t.deliveryStatus} --from-beginning`);
  line(
    `  npx msgbridge status <messageId or requestId>                                                                # one state per message, never going back`,
  );
  if (s.tracker.address)
    line(
      `  MSGBRIDGE_TRACKER_TOKEN=${s.devToken} npx msgbridge status --tracker ${s.tracker.address} <id>   # asked of the tracker`,
    );
  line(
    `The operator commands find this Kafka by themselves; elsewhere: export KAFKA_BROKERS=${s.brokers.brokers.join(',')}`,
  );
  line();
}

async function counter(registry: Registry, name: string, label?: string): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  const metric = registry.getSingleMetric(name);
  if (!metric) return out;
  const { values } = await metric.get();
  for (const v of values) {
    const key = label ? String(v.labels[label] ?? '') : '';
    out.set(key, (out.get(key) ?? 0) + v.value);
  }
  return out;
}

const sum = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);

/** One line: events in (by topic), sends out (by outcome), errors. */
async function summarize(registries: { ingress: Registry; sender: Registry; tracker: Registry }): Promise<string> {
  const requests = await counter(registries.ingress, 'msgbridge_ingress_requests_total', 'outcome');
  const byTopic = await counter(registries.ingress, 'msgbridge_ingress_requests_total', 'topic');
  const sends = await counter(registries.sender, 'msgbridge_sender_requests_total', 'outcome');
  const retries = sum(await counter(registries.sender, 'msgbridge_sender_retries_total'));
  const kept = (requests.get('published') ?? 0) + (requests.get('dead_lettered') ?? 0);
  const refused = sum(requests) - kept;
  const topics = [...byTopic]
    .filter(([k]) => k !== '')
    .map(([k, v]) => `${k} ${v}`)
    .join(', ');
  const outcomes = [...sends].map(([k, v]) => `${k} ${v}`).join(', ');
  const dlq = requests.get('dead_lettered') ?? 0;
  const tracked = sum(await counter(registries.tracker, 'msgbridge_tracker_records_out'));
  return `events in: ${kept}${topics ? ` (${topics})` : ''} · sends out: ${outcomes || '0'} · state changes: ${tracked} · errors: ${refused} refused webhooks, ${dlq} dead-lettered, ${retries} provider retries`;
}
