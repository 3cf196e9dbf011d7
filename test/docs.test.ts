import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { grepRepository, repositoryFiles } from './helpers/repository.js';

const root = join(import.meta.dirname, '..');
const readme = readFileSync(join(root, 'README.md'), 'utf8');
const configuration = readFileSync(join(root, 'docs', 'configuration.md'), 'utf8');

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
    const ci = readFileSync(join(root, '.ci', 'run'), 'utf8');
    // The whole suite: one test held back to run alone right after it, nothing excluded.
    expect(ci).toContain(
      `.ci/in-root --root "$root" -- bash -c 'npm ci --no-audit --no-fund && npm test -- -t "^(?!.*SIGSTOP)"'\n`,
    );
    expect(ci).toContain(
      `.ci/in-root --root "$root" --no-copy -- npx vitest run test/kafka/cluster.int.test.ts -t SIGSTOP\n`,
    );
  });
});

describe('docs/configuration.md', () => {
  it('documents every configuration key of config/default.json', () => {
    const config = JSON.parse(readFileSync(join(root, 'config', 'default.json'), 'utf8'));
    const missing = keys(config).filter((k) => !configuration.includes(`| \`${k}\` |`));
    expect(missing).toEqual([]);
  });
});

/** The repository's markdown files (test/helpers/repository.ts). */
function markdownFiles(): string[] {
  return repositoryFiles(root).filter((f) => f.endsWith('.md') && !f.split('/').includes('node_modules'));
}

/** The anchors GitHub gives a markdown file's headings. */
function anchors(markdown: string): Set<string> {
  const slugs = new Set<string>();
  for (const [, heading] of markdown.replace(/```[\s\S]*?```/g, '').matchAll(/^#{1,6} +(.+?) *#*$/gm)) {
    const base = heading!
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');
    let slug = base;
    for (let n = 1; slugs.has(slug); n++) slug = `${base}-${n}`;
    slugs.add(slug);
  }
  return slugs;
}

describe("links between the repository's markdown files", () => {
  it('every relative link resolves to a file of the repository, and every anchor to a heading of a markdown file', () => {
    const broken: string[] = [];
    for (const file of markdownFiles()) {
      const text = readFileSync(join(root, file), 'utf8')
        .replace(/```[\s\S]*?```/g, '')
        .replace(/`[^`\n]*`/g, '');
      for (const [, target] of text.matchAll(/\]\(([^)\s]+)(?: "[^"]*")?\)/g)) {
        if (/^[a-z][a-z0-9+.-]*:/i.test(target!) || target!.startsWith('//')) continue;
        const [path, anchor] = target!.split('#') as [string, string | undefined];
        const resolved = path ? resolve(root, dirname(file), decodeURIComponent(path)) : join(root, file);
        if (!resolved.startsWith(root + '/') && resolved !== root)
          broken.push(`${file}: ${target} leaves the repository`);
        else if (!existsSync(resolved)) broken.push(`${file}: ${target} does not exist`);
        else if (anchor && resolved.endsWith('.md') && !anchors(readFileSync(resolved, 'utf8')).has(anchor))
          broken.push(`${file}: ${target} names no heading`);
      }
    }
    expect(broken).toEqual([]);
  });

  it('nothing in the repository refers to a design brief or a specification outside it', () => {
    const found = grepRepository(
      root,
      /DESIGN [§]|[.][.]\/shared\/|DESIGN[.]md|spec\/messaging[-]api|provider[-]facts/,
    );
    expect(found).toEqual([]);
  });
});
