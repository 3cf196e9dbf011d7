import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');

function keys(value: unknown, prefix = ''): string[] {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return [prefix];
  // Maps keyed by user data (template names, business ids) are documented as one key.
  if (['simulator.templates', 'simulator.businessNumbers'].includes(prefix)) return [prefix];
  const entries = Object.entries(value as Record<string, unknown>);
  if (entries.length === 0) return [prefix];
  return entries.flatMap(([k, v]) => keys(v, prefix ? `${prefix}.${k}` : k));
}

describe('README', () => {
  it("opens with the two set-up commands, and CI runs the test one in the production runtime's root", () => {
    const firstBlock = /```sh\n([\s\S]*?)```/.exec(readme)![1]!;
    expect(firstBlock).toContain('npm ci && npm start');
    expect(firstBlock).toContain('npm ci && npm test');
    expect(readFileSync(join(root, '.ci', 'run'), 'utf8')).toContain(
      `.ci/in-root --root "$root" -- bash -c 'npm ci --no-audit --no-fund && npm test -- --exclude test/ingress/connections.int.test.ts -t "^(?!.*SIGSTOP)"'\n`,
    );
  });

  it('documents every configuration key of config/default.json', () => {
    const config = JSON.parse(readFileSync(join(root, 'config', 'default.json'), 'utf8'));
    const missing = keys(config).filter((k) => !readme.includes(`| \`${k}\` |`));
    expect(missing).toEqual([]);
  });
});
