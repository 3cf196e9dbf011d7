// The benches by name: `npm run bench -- --help` lists them, `npm run bench -- <name> [options]`
// runs bench/<name>.ts with the options after the name (`npm run bench -- <name> --help` lists
// those). Each runs as its own Node process with the tsx loader and the Node flags it needs;
// the exit code is the bench's. Figures and the commands behind them: docs/benchmarks.md.
import { spawn } from 'node:child_process';
import { constants } from 'node:os';
import { fileURLToPath } from 'node:url';

export interface Bench {
  /** One line: what it measures, and what it needs beyond npm ci. */
  description: string;
  /** Node flags before the loader (a bench that calls gc() needs --expose-gc). */
  nodeFlags?: string[];
}

export const BENCHES: Record<string, Bench> = {
  ingress: {
    description: 'ingress events/s, latency, CPU and memory; side by side with Redpanda Connect (own or wrk load)',
  },
  fuzz: { description: 'hostile requests against a real ingress and broker: every answer and every record checked' },
  'hung-broker': {
    description: 'a frozen broker of three: the ingress against a librdkafka reference producer (needs Python)',
  },
  sender: { description: 'sender throughput, latency, order per recipient, provider outage and member failover' },
  'sender-throughput': {
    description: 'sender side by side with Redpanda Connect on a Kafka backlog (Go fake provider)',
  },
  'sender-idle': { description: 'what an idle sender costs: CPU, wake-ups and memory' },
  'sender-ledger': { description: "the sender's request ledger: bulk restore records/s, restart time with it on disk" },
  'provider-client': { description: "the sender's HTTP client against undici's Pool, CPU per call (Go fake provider)" },
  simulator: { description: 'the provider simulator is never the bottleneck: send endpoint and webhook delivery' },
  tracker: {
    description: 'tracker state updates/s, restore time and memory per message state',
    nodeFlags: ['--expose-gc'],
  },
  'tracker-volume': {
    description: 'the tracker at production volume: does its cost follow traffic or history (needs npm run build)',
  },
  'tracker-conversation': {
    description: "a customer's conversation at 1,000,000 messages: search and thread p99 (needs npm run build)",
  },
  kstreams: { description: 'the tracker side by side with Kafka Streams (needs npm run build and mvn package)' },
  'bounded-maps': {
    description: 'the bounded maps once full: µs per insert of the state cache and the conversation table',
  },
  campaign: {
    description:
      'end to end: 3 brokers, 2 of each role, 9 overlapping faults; lost, sent twice, wrong states (needs npm run build)',
  },
  'window-lookup': {
    description: 'the conversation window guard: lookup cost, memory per window, start-up read',
    nodeFlags: ['--expose-gc'],
  },
};

/** What `--help` (or no argument) prints. */
export function listing(): string {
  const width = Math.max(...Object.keys(BENCHES).map((name) => name.length));
  const lines = Object.entries(BENCHES).map(([name, bench]) => `  ${name.padEnd(width)}  ${bench.description}`);
  return `usage: npm run bench -- <name> [options]   (npm run bench -- <name> --help: its options)\n\nbenches:\n${lines.join('\n')}\n`;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined || name === '--help' || name === '-h') {
    process.stdout.write(listing());
    return 0;
  }
  const bench = Object.hasOwn(BENCHES, name) ? BENCHES[name]! : undefined;
  if (!bench) {
    process.stderr.write(`bench/run.ts: no bench named "${name}" (npm run bench -- --help lists them)\n`);
    return 2;
  }
  const file = fileURLToPath(new URL(`./${name}.ts`, import.meta.url));
  const child = spawn(process.execPath, [...(bench.nodeFlags ?? []), '--import', 'tsx', file, ...rest], {
    stdio: 'inherit',
  });
  // Ctrl-C reaches the whole foreground group; SIGTERM to this process alone is passed on.
  const forward = (signal: NodeJS.Signals) => child.kill(signal);
  process.on('SIGTERM', forward);
  process.on('SIGINT', () => undefined);
  return new Promise((resolve) => {
    child.once('error', (err) => {
      process.stderr.write(`bench/run.ts: ${err.message}\n`);
      resolve(1);
    });
    child.once('exit', (code, signal) => resolve(code ?? 128 + (signal ? constants.signals[signal] : 0)));
  });
}

if (process.argv[1] !== undefined && fileURLToPath(import.meta.url) === process.argv[1])
  process.exitCode = await main(process.argv.slice(2));
