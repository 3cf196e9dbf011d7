import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { isMsgbridgeError } from '../src/errors.js';
import { loadUws, uwsBinaryPath } from '../src/uws.js';

describe('uWebSockets.js loading', () => {
  it('loads the native binary on this machine', () => {
    expect(existsSync(uwsBinaryPath())).toBe(true);
    const uws = loadUws({});
    expect(typeof uws.App).toBe('function');
  });

  it('refuses the slow JavaScript fallback when the native binary does not load', () => {
    let error: unknown;
    try {
      loadUws({}, '/nonexistent/uws_linux_x64_0.node');
    } catch (err) {
      error = err;
    }
    expect(isMsgbridgeError(error, 'UWS_NATIVE_MISSING')).toBe(true);
    expect((error as Error).message).toMatch(/set MSGBRIDGE_ALLOW_UWS_FALLBACK=1/);
  });

  it('accepts the fallback only when the user explicitly allows it', () => {
    const uws = loadUws({ MSGBRIDGE_ALLOW_UWS_FALLBACK: '1' }, '/nonexistent/uws_linux_x64_0.node');
    expect(typeof uws.App).toBe('function');
  });
});
