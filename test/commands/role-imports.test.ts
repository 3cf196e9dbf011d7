import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../..', import.meta.url));

async function metafileOf(entries: string[]) {
  const result = await build({
    entryPoints: entries.map((e) => `${ROOT}/${e}`),
    bundle: true,
    platform: 'node',
    format: 'esm',
    packages: 'external',
    write: false,
    metafile: true,
    logLevel: 'silent',
    outdir: '/nowhere',
    absWorkingDir: ROOT,
  });
  return result.metafile.inputs;
}

const packageOf = (path: string) =>
  path
    .split('/')
    .slice(0, path.startsWith('@') ? 2 : 1)
    .join('/');

/**
 * The packages a module loads before any of its code runs: its static imports, followed through the project's files.
 */
async function packagesLoadedBy(entries: string[]): Promise<Set<string>> {
  const inputs = await metafileOf(entries);
  const seen = new Set<string>();
  const packages = new Set<string>();
  const pending = entries.map((e) => relative(ROOT, `${ROOT}/${e}`));
  while (pending.length > 0) {
    const file = pending.pop()!;
    if (seen.has(file)) continue;
    seen.add(file);
    for (const i of inputs[file]?.imports ?? []) {
      if (i.kind !== 'import-statement') continue;
      if (!i.external) pending.push(i.path);
      else if (!i.path.startsWith('node:')) packages.add(packageOf(i.path));
    }
  }
  expect(seen.size).toBeGreaterThan(entries.length);
  return packages;
}

// Each role's modules are imported when its command runs (src/commands/README.md): a sender
// process holds none of the tracker's LMDB, the ingress's uWebSockets.js or the simulator's
// undici, and `msgbridge --help` starts without any of them.
describe('what each command loads', () => {
  it('the CLI itself loads no role and none of their packages', async () => {
    const packages = await packagesLoadedBy(['src/cli.ts']);
    expect(packages).toContain('commander');
    for (const heavy of ['lmdb', 'uWebSockets.js', 'undici', '@platformatic/kafka', 'prom-client'])
      expect(packages, heavy).not.toContain(heavy);
  });

  it('msgbridge/client (the package export for producers) loads zod and nothing heavier; msgbridge/client/kafka adds kafkajs only', async () => {
    expect([...(await packagesLoadedBy(['src/client/index.ts']))]).toEqual(['zod']);
    expect([...(await packagesLoadedBy(['src/client/kafka.ts']))].sort()).toEqual(['kafkajs', 'zod']);
  });

  it('msgbridge sender loads the sender (LMDB for its request ledger) and none of the other roles’ packages', async () => {
    const packages = await packagesLoadedBy(['src/cli.ts', 'src/sender/index.ts']);
    expect(packages).toContain('kafkajs');
    expect(packages).toContain('prom-client');
    expect(packages).toContain('lmdb');
    for (const other of ['uWebSockets.js', 'undici']) expect(packages, other).not.toContain(other);
  });

  it('msgbridge tracker loads LMDB, and the ingress and simulator packages only when their roles run', async () => {
    expect(await packagesLoadedBy(['src/tracker/index.ts'])).toContain('lmdb');
    const tracker = await packagesLoadedBy(['src/cli.ts', 'src/tracker/index.ts', 'src/commands/dlq-console.ts']);
    for (const other of ['uWebSockets.js', 'undici']) expect(tracker, other).not.toContain(other);
    expect(await packagesLoadedBy(['src/simulator/index.ts'])).toContain('undici');
  });

  it('msgbridge ingress loads neither LMDB nor undici', async () => {
    const packages = await packagesLoadedBy(['src/cli.ts', 'src/ingress/index.ts', 'src/ingress/workers.ts']);
    for (const other of ['lmdb', 'undici']) expect(packages, other).not.toContain(other);
  });

  it('each command imports, when it runs, only what its action needs', async () => {
    const inputs = await metafileOf(['src/cli.ts']);
    const dynamic = (file: string) =>
      (inputs[file]?.imports ?? [])
        .filter((i) => i.kind === 'dynamic-import')
        .map((i) => (i.external ? packageOf(i.path) : i.path))
        .sort();
    expect(dynamic('src/commands/sender.ts')).toEqual(['src/sender/index.ts']);
    expect(dynamic('src/commands/tracker.ts')).toEqual(['src/commands/dlq-console.ts', 'src/tracker/index.ts']);
    expect(dynamic('src/commands/ingress.ts')).toEqual(['src/ingress/index.ts', 'src/ingress/workers.ts']);
    expect(dynamic('src/commands/simulator.ts')).toEqual(['src/simulator/index.ts', 'undici']);
    expect(dynamic('src/commands/webhooks.ts')).toEqual(['undici']);
    expect(dynamic('src/commands/dev.ts')).toEqual([
      'src/commands/dlq-console.ts',
      'src/ingress/index.ts',
      'src/local-kafka/obtain-brokers.ts',
      'src/sender/index.ts',
      'src/simulator/index.ts',
      'src/tracker/index.ts',
    ]);
  });
});
