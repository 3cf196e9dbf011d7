// `msgbridge` bundled to plain JavaScript for the benchmarks' child processes, as `node
// dist/cli.js` runs in production (not through the tsx loader, whose compiler would be counted
// in their CPU and memory). .cache/bench/ sits at the same depth as src/<dir>/, so the bundle's
// import.meta.url-relative paths (config/) hold.
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

export const ROOT = fileURLToPath(new URL('..', import.meta.url));
export const CLI_BUNDLE = fileURLToPath(new URL('../.cache/bench/sender-cli.mjs', import.meta.url));

export async function bundleCli(): Promise<void> {
  const entry = fileURLToPath(new URL('../src/cli.ts', import.meta.url));
  await build({ entryPoints: [entry], outfile: CLI_BUNDLE, bundle: true, platform: 'node', format: 'esm', target: 'node20', packages: 'external', logLevel: 'warning' });
}
