import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { installedUwsBuilds, loadUws, UWS_BUILDS, uwsInUse, type UwsBuild } from '../../src/platform/uws.js';

const require = createRequire(import.meta.url);

describe('uWebSockets.js loading', () => {
  it('loads a native binary on this machine: the official 20.57 build on glibc 2.38+, else the Node 20 registry build', () => {
    // Both builds are installed (package.json); the official one's package.json is not exported.
    expect(installedUwsBuilds().map((b) => b.name)).toEqual([...UWS_BUILDS]);
    const uws = loadUws({});
    expect(typeof uws.App).toBe('function');
    const glibc =
      (process.report.getReport() as { header: { glibcVersionRuntime?: string } }).header.glibcVersionRuntime ?? '0.0';
    const [major, minor] = glibc.split('.').map(Number) as [number, number];
    const official = major > 2 || (major === 2 && minor >= 38);
    expect(uwsInUse()?.name).toBe(official ? '@btc-vision/uwebsockets.js' : 'uWebSockets.js');
    expect(existsSync(uwsInUse()!.binary!)).toBe(true);
    expect(uwsInUse()!.binary).toMatch(
      new RegExp(`uws_${process.platform}_${process.arch}_${process.versions.modules}\\.node$`),
    );
  });

  it('picks the first build whose binary loads: one without a binary for this Node, or whose binary needs a newer glibc, is skipped', () => {
    const builds: UwsBuild[] = [
      { name: 'official', binary: undefined },
      { name: 'needs-newer-glibc', binary: '/builds/glibc.node' },
      { name: uwsInUse()!.name, binary: uwsInUse()!.binary },
    ];
    const tried: string[] = [];
    const load = (id: string) => {
      tried.push(id);
      if (id === '/builds/glibc.node')
        throw new Error("/lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found");
      return require(id) as unknown;
    };
    const uws = loadUws({}, builds, load);
    expect(typeof uws.App).toBe('function');
    // The binary in use was loaded by the first test: remembered, not loaded again.
    expect(tried).toEqual(['/builds/glibc.node']);
    expect(uws).toBe(loadUws({}));
  });

  it('refuses the slow JavaScript fallback when no native binary loads, naming each build and why', () => {
    let error: unknown;
    try {
      loadUws({}, [
        { name: 'uWebSockets.js', binary: undefined },
        { name: '@btc-vision/uwebsockets.js', binary: '/nonexistent/uws_linux_x64_0.node' },
      ]);
    } catch (err) {
      error = err;
    }
    expect(isMsgbridgeError(error, 'UWS_NATIVE_MISSING')).toBe(true);
    expect((error as Error).message).toMatch(
      /uWebSockets\.js: no binary for ABI \d+; @btc-vision\/uwebsockets\.js: Cannot find module/,
    );
    expect((error as Error).message).toMatch(/set MSGBRIDGE_ALLOW_UWS_FALLBACK=1/);
  });

  it('accepts the fallback only when the user explicitly allows it', () => {
    const uws = loadUws({ MSGBRIDGE_ALLOW_UWS_FALLBACK: '1' }, [
      { name: 'uWebSockets.js', binary: '/nonexistent/uws_linux_x64_0.node' },
    ]);
    expect(typeof uws.App).toBe('function');
  });
});
