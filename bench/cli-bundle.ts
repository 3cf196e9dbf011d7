// `msgbridge` bundled to plain JavaScript for the benchmarks' child processes, as `node
// dist/cli.js` runs in production (not through the tsx loader, whose compiler would be counted
// in their CPU and memory). .cache/bench/ sits at the same depth as src/<dir>/, so the bundle's
// import.meta.url-relative paths (config/) hold.
import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const CLI_BUNDLE = fileURLToPath(new URL('../.cache/bench/sender-cli.mjs', import.meta.url));

export async function bundleCli(): Promise<void> {
  const entry = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
  await build({ entryPoints: [entry], outfile: CLI_BUNDLE, bundle: true, platform: 'node', format: 'esm', target: 'node20', packages: 'external', logLevel: 'warning' });
}

/** `msgbridge sender` from the bundle, with BENCH_SENDER_NODE_ARGS (e.g. --cpu-prof) and `env` over PATH and HOME only. */
export function spawnSenderBundle(env: Record<string, string | undefined>, stdio: StdioOptions): ChildProcess {
  const nodeArgs = (process.env.BENCH_SENDER_NODE_ARGS ?? '').split(' ').filter(Boolean);
  return spawn(process.execPath, [...nodeArgs, CLI_BUNDLE, 'sender'], { cwd: ROOT, env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env }, stdio });
}
