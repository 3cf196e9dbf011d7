// `msgbridge` bundled to plain JavaScript for the benchmarks' child processes, as `node
// dist/cli.js` runs in production (not through the tsx loader, whose compiler would be counted
// in their CPU and memory). .cache/bench/ sits at the same depth as src/<dir>/, so the bundle's
// import.meta.url-relative paths (config/) hold. Split into chunks, as the CLI's dynamic imports
// keep each role's modules apart: `msgbridge sender` loads none of the other roles' packages.
import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import { createWriteStream, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { firstLine } from './peers.js';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const CLI_BUNDLE = fileURLToPath(new URL('../.cache/bench/sender-cli.mjs', import.meta.url));
/**
 * The kafkajs send fix (src/kafka/kafkajs-send-fix.ts) as an entry of its own: in a bundle, the
 * imports of kafkajs are hoisted above the fix's code, so the child preloads it (`--import`).
 */
const SEND_FIX_BUNDLE = fileURLToPath(new URL('../.cache/bench/sender-cli-send-fix.mjs', import.meta.url));

export async function bundleCli(): Promise<void> {
  const outdir = dirname(CLI_BUNDLE);
  mkdirSync(outdir, { recursive: true });
  for (const file of readdirSync(outdir, { withFileTypes: true }).filter((f) => f.name.startsWith('sender-cli')))
    rmSync(`${outdir}/${file.name}`, { force: true });
  await bundleSplit(
    {
      'sender-cli': fileURLToPath(new URL('../src/cli.ts', import.meta.url)),
      'sender-cli-send-fix': fileURLToPath(new URL('../src/kafka/kafkajs-send-fix.ts', import.meta.url)),
    },
    outdir,
    'sender-cli-chunk-[hash]',
  );
}

/**
 * Entry points bundled for Node as `.mjs`, split at dynamic imports as Node loads the unbundled
 * code: a package imported only by a role that does not run is not loaded.
 */
export async function bundleSplit(
  entryPoints: Record<string, string>,
  outdir: string,
  chunkNames = 'chunk-[hash]',
): Promise<void> {
  await build({
    entryPoints,
    outdir,
    splitting: true,
    chunkNames,
    outExtension: { '.js': '.mjs' },
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    packages: 'external',
    logLevel: 'warning',
  });
}

/**
 * `msgbridge sender` from the bundle, on BENCH_TARGET_NODE or this node, with BENCH_SENDER_NODE_ARGS (e.g. --cpu-prof)
 * and `env` over PATH and HOME only. BENCH_SENDER_STDOUT=<file> appends its piped stdout there too (what
 * V8's --trace-gc prints).
 */
export function spawnSenderBundle(
  env: Record<string, string | undefined>,
  stdio: StdioOptions,
  cli = CLI_BUNDLE,
): ChildProcess {
  const nodeArgs = (process.env.BENCH_SENDER_NODE_ARGS ?? '').split(' ').filter(Boolean);
  if (cli === CLI_BUNDLE) nodeArgs.unshift('--import', pathToFileURL(SEND_FIX_BUNDLE).href);
  // BENCH_TARGET_NODE runs it on another node (.ci/root-node: the production runtime's).
  const child = spawn(process.env.BENCH_TARGET_NODE || process.execPath, [...nodeArgs, cli, 'sender'], {
    cwd: cli === CLI_BUNDLE ? ROOT : dirname(dirname(cli)),
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio,
  });
  const copy = process.env.BENCH_SENDER_STDOUT;
  if (copy && child.stdout) child.stdout.pipe(createWriteStream(copy, { flags: 'a' }));
  return child;
}

/** Waits for `msgbridge sender`'s ready line; its health server's address. */
export async function senderReady(child: ChildProcess): Promise<string> {
  // `health` is what a release before the admin ports printed (a `msgbridge-before` target).
  const { sender } = JSON.parse(await firstLine(child, (l) => l.startsWith('{"sender"'))) as {
    sender: { admin?: string; health?: string };
  };
  return (sender.admin ?? sender.health)!;
}
