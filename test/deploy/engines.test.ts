import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');
// semver is npm's own range logic (the check behind EBADENGINE), installed with the tools.
const semver = createRequire(import.meta.url)('semver') as {
  subset(sub: string, dom: string): boolean;
  satisfies(version: string, range: string): boolean;
};

interface Locked {
  version?: string;
  engines?: { node?: string };
  optional?: boolean;
  link?: boolean;
}
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
  engines: { node: string };
  overrides: Record<string, string>;
  dependencies: Record<string, string>;
};
const lock = JSON.parse(readFileSync(join(root, 'package-lock.json'), 'utf8')) as { packages: Record<string, Locked> };

describe('the supported Node versions (package.json engines)', () => {
  it('are Node 20.19.4+, 22.13+ and 24+: every LTS line msgbridge runs on, and no odd release', () => {
    for (const v of ['20.19.4', '20.20.2', '22.13.0', '22.22.0', '24.0.0', '24.21.0', '26.0.0'])
      expect(semver.satisfies(v, pkg.engines.node), v).toBe(true);
    for (const v of ['18.20.0', '20.18.1', '21.7.0', '22.12.0', '23.11.0'])
      expect(semver.satisfies(v, pkg.engines.node), v).toBe(false);
  });

  it('every installed package accepts every one of them: npm ci warns EBADENGINE on none', () => {
    const refusing = Object.entries(lock.packages)
      .filter(([path, entry]) => path !== '' && !entry.optional && entry.engines?.node !== undefined)
      .filter(([, entry]) => !semver.subset(pkg.engines.node, entry.engines!.node!))
      .map(([path, entry]) => `${path} wants ${entry.engines!.node}`);
    expect(refusing).toEqual([]);
  });

  it("@platformatic/kafka 1.x's helpers come from vendor/ (their registry releases say Node 22.19+), only those", async () => {
    expect(pkg.overrides).toEqual({
      '@platformatic/dynamic-buffer': '$@platformatic/dynamic-buffer',
      '@platformatic/wasm-utils': '$@platformatic/wasm-utils',
    });
    for (const name of ['dynamic-buffer', 'wasm-utils']) {
      expect(pkg.dependencies[`@platformatic/${name}`]).toBe(`file:vendor/${name}`);
      expect(lock.packages[`node_modules/@platformatic/${name}`]).toMatchObject({
        resolved: `vendor/${name}`,
        link: true,
      });
      const vendored = JSON.parse(readFileSync(join(root, 'vendor', name, 'package.json'), 'utf8')) as {
        engines: { node: string };
        vendored: { from: string };
      };
      // The range of the client that needs them (its 1.x line), no wider.
      expect(vendored.engines.node).toBe(
        (
          JSON.parse(readFileSync(join(root, 'node_modules', '@platformatic', 'kafka', 'package.json'), 'utf8')) as {
            engines: { node: string };
          }
        ).engines.node,
      );
      expect(vendored.vendored.from).toBe(`@platformatic/${name}@${lock.packages[`vendor/${name}`]!.version}`);
    }
    // Their code is in the tree (a clone has it: dist/ is ignored elsewhere) and works here.
    const { crc32c, snappyCompress, snappyDecompress } = await import('@platformatic/wasm-utils');
    expect(crc32c(Buffer.from('123456789'))).toBe(0xe3069283);
    const text = Buffer.from('msgbridge '.repeat(50));
    expect(snappyDecompress(snappyCompress(text))).toEqual(text);
    const links = Object.entries(lock.packages).filter(([, entry]) => entry.link);
    expect(links.map(([path]) => path).sort()).toEqual([
      'node_modules/@platformatic/dynamic-buffer',
      'node_modules/@platformatic/wasm-utils',
    ]);
  });
});
