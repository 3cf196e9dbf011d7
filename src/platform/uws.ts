import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { MsgbridgeError } from './errors.js';

type Uws = typeof import('uWebSockets.js');

const require = createRequire(import.meta.url);
const loaded = new Map<string, Uws>();

/**
 * The builds of uWebSockets.js msgbridge accepts, in order of preference. Its author does not
 * publish it on the npm registry, so every build comes with a supply-chain trade-off (README,
 * "uWebSockets.js"):
 * - `uWebSockets.js`: what package.json installs under that name (the registry build
 *   @trufflesuite/uws-js-unofficial 20.30, native binaries for Node 20 on glibc 2.36+ Linux), or
 *   the official build where a user installs it from its git tag
 *   (`npm install uNetworking/uWebSockets.js#v20.x.y`, binaries for Node 20–25, glibc 2.38+);
 * - `@btc-vision/uwebsockets.js`: a registry republication of the official build (20.57: Node
 *   20, 22, 24, 25; glibc 2.38+), installed by the Docker image for its Node 24 runtime.
 * A build whose binary for this Node ABI loads wins; a slow JavaScript fallback is refused.
 */
export const UWS_BUILDS = ['uWebSockets.js', '@btc-vision/uwebsockets.js'] as const;

/** Where a build keeps the native binary for this platform and Node ABI (the registry build in binaries/, the official one at its root). */
export function uwsBinaryCandidates(packageDir: string): string[] {
  const name = `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`;
  return [join(packageDir, 'binaries', name), join(packageDir, name)];
}

/** The binary of the default build (tests). */
export function uwsBinaryPath(): string {
  const dir = dirname(require.resolve('uWebSockets.js/package.json'));
  return uwsBinaryCandidates(dir).find((p) => existsSync(p)) ?? uwsBinaryCandidates(dir)[0]!;
}

export interface UwsBuild {
  name: string;
  /** The native binary for this Node; undefined when the build has none. */
  binary: string | undefined;
}

function installedBuilds(): UwsBuild[] {
  const builds: UwsBuild[] = [];
  for (const name of UWS_BUILDS) {
    let dir: string;
    try {
      dir = dirname(require.resolve(`${name}/package.json`));
    } catch {
      continue;
    }
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
export function loadUws(env: Record<string, string | undefined> = process.env, builds: UwsBuild[] = installedBuilds(), load: (id: string) => unknown = require): Uws {
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
      return uws;
    } catch (err) {
      reasons.push(`${build.name}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  const allowFallback = env.MSGBRIDGE_ALLOW_UWS_FALLBACK === '1' || env.MSGBRIDGE_ALLOW_UWS_FALLBACK === 'true';
  if (!allowFallback) {
    throw new MsgbridgeError(
      'UWS_NATIVE_MISSING',
      `no native uWebSockets.js binary loads on Node ${process.version} (${process.platform}/${process.arch}, ABI ${process.versions.modules}): ${reasons.join('; ') || 'no build installed'}. ` +
        'Use Node 20 on glibc Linux, or Node 22/24 on glibc 2.38+ with a build that has their binaries (README, "uWebSockets.js"), or set MSGBRIDGE_ALLOW_UWS_FALLBACK=1 to accept the slow JavaScript fallback.',
    );
  }
  return load('uWebSockets.js') as Uws;
}
