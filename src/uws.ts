import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { MsgbridgeError } from './errors.js';

type Uws = typeof import('uWebSockets.js');

const require = createRequire(import.meta.url);
const loaded = new Map<string, Uws>();

/** Where the registry build keeps the native binary for this platform and Node ABI. */
export function uwsBinaryPath(): string {
  const packageDir = dirname(require.resolve('uWebSockets.js/package.json'));
  return join(packageDir, 'binaries', `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`);
}

/**
 * uWebSockets.js, insisting on its native binary. The registry build falls back to a slow
 * pure-JavaScript server when the binary does not load; we refuse that unless the user
 * explicitly allows it with MSGBRIDGE_ALLOW_UWS_FALLBACK=1.
 */
export function loadUws(env: Record<string, string | undefined> = process.env, binary = uwsBinaryPath()): Uws {
  const cached = loaded.get(binary);
  if (cached) return cached;
  const allowFallback = env.MSGBRIDGE_ALLOW_UWS_FALLBACK === '1' || env.MSGBRIDGE_ALLOW_UWS_FALLBACK === 'true';
  let native = true;
  try {
    if (!existsSync(binary)) throw new Error(`${binary} does not exist`);
    require(binary);
  } catch (err) {
    if (!allowFallback) {
      throw new MsgbridgeError(
        'UWS_NATIVE_MISSING',
        `the native uWebSockets.js binary does not load on Node ${process.version} (${process.platform}/${process.arch}, ABI ${process.versions.modules}): ${(err as Error).message}. ` +
          'Use Node 20 on glibc Linux, or set MSGBRIDGE_ALLOW_UWS_FALLBACK=1 to accept the slow JavaScript fallback.',
        { cause: err },
      );
    }
    native = false;
  }
  const uws = require('uWebSockets.js') as Uws;
  // Only a native load is remembered: a refused or allowed fallback is decided per call.
  if (native) loaded.set(binary, uws);
  return uws;
}
