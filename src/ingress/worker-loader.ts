import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { MsgbridgeError } from '../platform/errors.js';
import type { IngressWorkerData } from './worker-protocol.js';

/**
 * How a worker thread loads its module: compiled (dist, or the bench's bundle) it is
 * worker-entry.js or .mjs; from the sources (tests, `node --import tsx src/cli.ts`) it is
 * worker-entry.ts, and the thread must register tsx first (README.md, "Running the sources").
 * Apart from the supervision because it depends on how msgbridge was built, not on what the
 * threads do.
 */

/** The worker module, and whether it is TypeScript (run through tsx). */
export interface WorkerModule {
  url: URL;
  typescript: boolean;
}

/** A worker module given by the caller (StartIngressWorkersOptions.workerEntry). */
export function workerModuleAt(url: URL): WorkerModule {
  return { url, typescript: url.pathname.endsWith('.ts') };
}

/**
 * The worker module beside `beside` (the URL of the module that starts the workers, whose
 * path the error names): worker-entry.js, else .mjs, else .ts.
 */
export function defaultWorkerModule(beside: string): WorkerModule {
  for (const name of ['worker-entry.js', 'worker-entry.mjs']) {
    const url = new URL(`./${name}`, beside);
    if (existsSync(fileURLToPath(url))) return { url, typescript: false };
  }
  const url = new URL('./worker-entry.ts', beside);
  if (existsSync(fileURLToPath(url))) return { url, typescript: true };
  throw new MsgbridgeError(
    'INVALID_ARGUMENT',
    `the ingress worker module is missing: no worker-entry.js beside ${fileURLToPath(beside)}`,
  );
}

export function spawnWorker(entry: WorkerModule, workerData: IngressWorkerData): Worker {
  if (!entry.typescript) return new Worker(entry.url, { workerData });
  // Node 20 runs no TypeScript, and a worker does not inherit the tsx loader: register it first.
  const tsx = tsxEsmApi();
  const code = `import(${JSON.stringify(tsx)}).then((m) => { (m.register ?? m.default.register)(); return import(${JSON.stringify(entry.url.href)}); })`;
  return new Worker(code, { eval: true, workerData });
}

/** tsx's ESM API module (its exports map: the CommonJS one cannot be imported from ESM). */
function tsxEsmApi(): string {
  const manifest = createRequire(import.meta.url).resolve('tsx/package.json');
  const { exports } = JSON.parse(readFileSync(manifest, 'utf8')) as {
    exports: Record<string, { import: { default: string } }>;
  };
  return new URL(exports['./esm/api']!.import.default, pathToFileURL(manifest)).href;
}
