import { InvalidArgumentError, type Command } from 'commander';
import { readEnvSecret } from '../config/load.js';
import { MsgbridgeError } from '../platform/errors.js';
import { runWebhookLoad, type WebhookLoadReport } from '../simulator/load-generator.js';
import { parseIntegerOption } from './options.js';

interface LoadOptions {
  url: string;
  secret?: string;
  rate?: number;
  duration?: number;
  total?: number;
  connections: number;
  statusesPerInbound: number;
  perTopicPaths: boolean;
  json: boolean;
}

/** `msgbridge load`: signed webhook traffic to an address (an ingress), with a report of the answers. */
export function registerLoadCommand(program: Command): void {
  program
    .command('load')
    .description(
      'send signed webhook load (inbound messages and their delivery statuses) to a webhook address and report answers and latency',
    )
    .requiredOption('--url <url>', 'the webhook address, e.g. http://127.0.0.1:8080/webhooks/biz_1', parseWebhookUrl)
    .option('--secret <secret>', 'the signing secret (default MSGBRIDGE_SIGNING_SECRET, first of the list)')
    .option(
      '--rate <n>',
      'requests per second (default: as fast as the receiver answers)',
      parseIntegerOption('--rate', 1, 1_000_000),
    )
    .option('--duration <seconds>', 'how long to run (default 10 unless --total is given)', parseDuration)
    .option('--total <n>', 'stop after this many requests', parseIntegerOption('--total', 1, 1_000_000_000))
    .option('--connections <n>', 'keep-alive connections', parseIntegerOption('--connections', 1, 4096), 16)
    .option(
      '--statuses-per-inbound <n>',
      'delivery status events per inbound message',
      parseIntegerOption('--statuses-per-inbound', 0, 100),
      3,
    )
    .option('--per-topic-paths', 'post to {url}/messages and {url}/delivery_status instead of {url}', false)
    .option('--json', 'print the report as JSON', false)
    .action(async (opts: LoadOptions) => {
      const secret = opts.secret ?? readEnvSecret(process.env, 'MSGBRIDGE_SIGNING_SECRET')?.split(',')[0]?.trim();
      if (!secret) throw new MsgbridgeError('INVALID_ARGUMENT', 'give --secret (or set MSGBRIDGE_SIGNING_SECRET)');
      const durationMs =
        opts.duration !== undefined ? opts.duration * 1000 : opts.total === undefined ? 10_000 : undefined;
      const report = await runWebhookLoad({
        url: opts.url,
        signingSecret: secret,
        connections: opts.connections,
        statusesPerInbound: opts.statusesPerInbound,
        perTopicPaths: opts.perTopicPaths,
        ...(durationMs !== undefined ? { durationMs } : {}),
        ...(opts.total !== undefined ? { totalRequests: opts.total } : {}),
        ...(opts.rate !== undefined ? { ratePerSecond: opts.rate } : {}),
      });
      process.stdout.write(
        opts.json
          ? `${JSON.stringify({ ...report, acknowledged: report.acknowledged.length }, null, 2)}\n`
          : formatReport(report, opts),
      );
    });
}

export function formatReport(report: WebhookLoadReport, opts: { url: string; connections: number }): string {
  const answers = Object.entries(report.answered)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([status, count]) => `${status} × ${count}`)
    .join(', ');
  const l = report.latencyMs;
  return [
    `${opts.url}: ${report.sent} requests in ${(report.durationMs / 1000).toFixed(1)} s over ${opts.connections} connections = ${Math.round(report.ratePerSecond)} answered/s`,
    `answers: ${answers || 'none'}`,
    `errors: ${report.errors}${report.errorSamples.length > 0 ? ` (${report.errorSamples.join('; ')})` : ''}`,
    `latency ms: p50 ${l.p50}  p90 ${l.p90}  p99 ${l.p99}  p99.9 ${l.p999}  max ${l.max}`,
    `acknowledged (200): ${report.acknowledged.length}`,
    '',
  ].join('\n');
}

function parseWebhookUrl(value: string): string {
  try {
    const url = new URL(value);
    if (url.protocol === 'http:' || url.protocol === 'https:') return value;
  } catch {
    // reported below
  }
  throw new InvalidArgumentError(`--url expects an http(s) address, got "${value}"`);
}

function parseDuration(value: string): number {
  const n = Number(value);
  if (!/^\d+(\.\d+)?$/.test(value.trim()) || !(n > 0) || n > 86_400)
    throw new InvalidArgumentError(`--duration expects seconds (more than 0, at most 86400), got "${value}"`);
  return n;
}
