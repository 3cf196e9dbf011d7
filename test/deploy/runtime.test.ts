import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
const read = (file: string) => readFileSync(join(root, file), 'utf8');

/** deploy/runtime.env: KEY=value lines (a value with spaces in double quotes, as sh reads it), # comments. */
export function parseRuntimeList(text: string): Record<string, string> {
  const list: Record<string, string> = {};
  for (const [i, line] of text.split('\n').entries()) {
    if (line.trim() === '' || line.startsWith('#')) continue;
    const match = /^([A-Z_]+)=(?:"([^"$`\\]*)"|([^\s"'$`\\]+))$/.exec(line);
    if (!match) throw new Error(`deploy/runtime.env line ${i + 1} is not KEY=value: ${line}`);
    list[match[1]!] = match[2] ?? match[3]!;
  }
  return list;
}

const list = parseRuntimeList(read('deploy/runtime.env'));

describe('the production runtime, one list (deploy/runtime.env) for the image and the CI root', () => {
  it('names the Debian release, Node, uWebSockets.js build and node flags', () => {
    expect(Object.keys(list).sort()).toEqual([
      'DEBIAN_RELEASE',
      'NODE_FLAGS',
      'NODE_MAJOR',
      'NODE_VERSION',
      'UWS_INTEGRITY',
      'UWS_PACKAGE',
      'UWS_VERSION',
    ]);
    expect(list.NODE_VERSION!.split('.')[0]).toBe(list.NODE_MAJOR);
    expect(parseRuntimeList('# c\nA=b\nB="--x --y"\n')).toEqual({ A: 'b', B: '--x --y' });
    expect(() => parseRuntimeList('DEBIAN_RELEASE = trixie')).toThrow(/line 1 is not KEY=value/);
    expect(() => parseRuntimeList('NODE_FLAGS=--a --b')).toThrow(/line 1 is not KEY=value/);
  });

  it("the Dockerfile's base image and ENTRYPOINT flags are the list's, and it checks the installed build against it", () => {
    const dockerfile = read('Dockerfile');
    expect(/^ARG NODE_IMAGE=(\S+)$/m.exec(dockerfile)?.[1]).toBe(`node:${list.NODE_MAJOR}-${list.DEBIAN_RELEASE}-slim`);
    const entrypoint = JSON.parse(/^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)![1]!) as string[];
    expect(entrypoint).toEqual(['node', ...list.NODE_FLAGS!.split(' '), 'dist/cli.js']);
    expect(dockerfile).toContain('COPY deploy/runtime.env ./deploy/');
    expect(dockerfile).toMatch(/RUN \. deploy\/runtime\.env/);
    // node_modules links the vendored packages (vendor/README.md): the runtime stage needs them too.
    expect(dockerfile).toMatch(/^COPY vendor \.\/vendor$/m);
    expect(dockerfile).toMatch(/^COPY --from=build --chown=root:root \/app\/vendor \.\/vendor$/m);
  });

  it("package.json and package-lock.json install the list's uWebSockets.js build, pinned by its integrity", () => {
    const pkg = JSON.parse(read('package.json')) as { dependencies: Record<string, string> };
    expect(pkg.dependencies[list.UWS_PACKAGE!]).toBe(list.UWS_VERSION);
    const lock = JSON.parse(read('package-lock.json')) as {
      packages: Record<string, { version: string; integrity: string }>;
    };
    const locked = lock.packages[`node_modules/${list.UWS_PACKAGE}`];
    expect(locked).toMatchObject({ version: list.UWS_VERSION, integrity: list.UWS_INTEGRITY });
  });

  it('the CI root is built from the list', () => {
    const script = read('.ci/debian-root');
    expect(script).toContain('. deploy/runtime.env');
    expect(script).toMatch(/debootstrap .*"\$DEBIAN_RELEASE"/);
    expect(script).toContain('"node@$NODE_VERSION"');
    const runner = read('.ci/in-root');
    expect(runner).toContain('. deploy/runtime.env');
    expect(runner).toContain('NODE_OPTIONS="$flags"');
    expect(runner).toMatch(/' in-root "\$root" "\$cache" "\$NODE_FLAGS" "\$@"$/m);
  });

  // Set by .ci/in-root: this run is inside the root, which must be the list's runtime.
  it.runIf(process.env.MSGBRIDGE_CI_ROOT === '1')(
    "inside the CI root: the Debian release, Node and node flags are the list's",
    () => {
      expect(/^VERSION_CODENAME=(\S+)$/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1]).toBe(list.DEBIAN_RELEASE);
      expect(process.version).toBe(`v${list.NODE_VERSION}`);
      expect(process.env.NODE_OPTIONS).toBe(list.NODE_FLAGS);
    },
  );
});
