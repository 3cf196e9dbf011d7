import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { MsgbridgeError } from './errors.js';

type Uws = typeof import('uWebSockets.js');

const require = createRequire(import.meta.url);
let loaded: Uws | undefined;

/**
 * uWebSockets.js, insisting on its native binary. The registry build falls back to a slow
 * pure-JavaScript server when the binary does not load; we refuse that unless the user
 * explicitly allows it with MSGBRIDGE_ALLOW_UWS_FALLBACK=1.
 */
export function loadUws(env: Record<string, string | undefined> = process.env): Uws {
  if (loaded) return loaded;
  const packageDir = dirname(require.resolve('uWebSockets.js/package.json'));
  const binary = join(packageDir, 'binaries', `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`);
  const allowFallback = env.MSGBRIDGE_ALLOW_UWS_FALLBACK === '1' || env.MSGBRIDGE_ALLOW_UWS_FALLBACK === 'true';
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
  }
  loaded = require('uWebSockets.js') as Uws;
  return loaded;
}
