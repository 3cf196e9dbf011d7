import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { errorMessage, MsgbridgeError } from './errors.js';

type Uws = typeof import('uWebSockets.js');

const require = createRequire(import.meta.url);
const loaded = new Map<string, Uws>();
let inUse: UwsBuild | undefined;

/**
 * The builds of uWebSockets.js msgbridge accepts, in order of preference. Its author does not
 * publish it on the npm registry, so every build comes with a supply-chain trade-off (README,
 * "Node.js and uWebSockets.js"); package.json installs both:
 * - `@btc-vision/uwebsockets.js` 20.57: a registry republication of the official build (Node 20,
 *   22, 24, 25; glibc 2.38+ Linux, macOS), the production image's (deploy/runtime.env);
 * - `uWebSockets.js`: the registry build @trufflesuite/uws-js-unofficial 20.30 under that name
 *   (Node 20 only, glibc 2.36+), for Node 20 where glibc is older than 2.38 (Debian 12).
 * A build whose binary for this Node ABI loads wins; a slow JavaScript fallback is refused.
 */
export const UWS_BUILDS = ['@btc-vision/uwebsockets.js', 'uWebSockets.js'] as const;

/**
 * Where a build keeps the native binary for this platform and Node ABI (the registry build in binaries/, the official
 * one at its root).
 */
export function uwsBinaryCandidates(packageDir: string): string[] {
  const name = `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`;
  return [join(packageDir, 'binaries', name), join(packageDir, name)];
}

/**
 * The folder of an installed package. Not through `<name>/package.json`: the official build's
 * `exports` does not export it, so resolving it fails where the package is installed.
 */
function packageDir(name: string): string | undefined {
  for (const nodeModules of require.resolve.paths(name) ?? []) {
    const dir = join(nodeModules, name);
    if (existsSync(join(dir, 'package.json'))) return dir;
  }
  return undefined;
}

export interface UwsBuild {
  name: string;
  /** The native binary for this Node; undefined when the build has none. */
  binary: string | undefined;
}

export function installedUwsBuilds(): UwsBuild[] {
  const builds: UwsBuild[] = [];
  for (const name of UWS_BUILDS) {
    const dir = packageDir(name);
    if (dir === undefined) continue;
    builds.push({ name, binary: uwsBinaryCandidates(dir).find((p) => existsSync(p)) });
  }
  return builds;
}

/**
 * uWebSockets.js from the first installed build whose native binary loads on this Node.
 * Without one: refused (UWS_NATIVE_MISSING, naming each build and why) unless
 * MSGBRIDGE_ALLOW_UWS_FALLBACK=1 accepts the registry build's slow JavaScript fallback.
 * `builds` and `load` are for tests.
 */
export function loadUws(
  env: Record<string, string | undefined> = process.env,
  builds: UwsBuild[] = installedUwsBuilds(),
  load: (id: string) => unknown = require,
): Uws {
  const reasons: string[] = [];
  for (const build of builds) {
    if (build.binary === undefined) {
      reasons.push(`${build.name}: no binary for ABI ${process.versions.modules}`);
      continue;
    }
    const cached = loaded.get(build.binary);
    if (cached) return cached;
    try {
      load(build.binary);
      const uws = load(build.name) as Uws;
      loaded.set(build.binary, uws);
      inUse = build;
      return uws;
    } catch (err) {
      reasons.push(`${build.name}: ${errorMessage(err).split('\n')[0]}`);
    }
  }
  const allowFallback = env.MSGBRIDGE_ALLOW_UWS_FALLBACK === '1' || env.MSGBRIDGE_ALLOW_UWS_FALLBACK === 'true';
  if (!allowFallback) {
    throw new MsgbridgeError(
      'UWS_NATIVE_MISSING',
      `no native uWebSockets.js binary loads on Node ${process.version} (${process.platform}/${process.arch}, ABI ${process.versions.modules}): ${reasons.join('; ') || 'no build installed'}. ` +
        'Use Node 22 or 24 on glibc 2.38+ Linux or macOS, or Node 20 (docs/operations.md, "Node.js and uWebSockets.js"), or set MSGBRIDGE_ALLOW_UWS_FALLBACK=1 to accept the slow JavaScript fallback.',
    );
  }
  inUse = undefined;
  return load('uWebSockets.js') as Uws;
}

/** The build whose native binary the last loadUws loaded; undefined before, or on the fallback. */
export function uwsInUse(): UwsBuild | undefined {
  return inUse;
}
