import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';

/** Folders that installing, building or testing makes (the .gitignore's), at any depth. */
const MADE = new Set(['node_modules', '.git', '.cache', 'dist', 'coverage']);
/** The same, at the top of the tree only. */
const MADE_AT_TOP = new Set(['scratch', 'state']);

/**
 * The repository's files, relative to `root`: as git knows them (tracked, or new and not
 * ignored). Where `root` is no git work tree (CI's copy of the tree in the Debian root, made from
 * that same list), every file but what installing, building and testing made there.
 */
export function repositoryFiles(root: string): string[] {
  const git = spawnSync('git', ['ls-files', '--cached', '--others', '--exclude-standard'], {
    cwd: root,
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  if (git.status === 0) return git.stdout.split('\n').filter((f) => f !== '' && existsSync(join(root, f)));
  const files: string[] = [];
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      const name = relative(root, path);
      if (entry.isDirectory()) {
        // The vendored packages ship their code in dist/ (vendor/README.md).
        const vendored = /^vendor\/[^/]+\/dist$/.test(name);
        if (vendored || (!MADE.has(entry.name) && !(dir === root && MADE_AT_TOP.has(entry.name)))) walk(path);
      } else if (entry.isFile() && !entry.name.endsWith('.log')) files.push(name);
    }
  };
  walk(root);
  return files;
}

/** `file:line: text` of every line of the repository's text files that matches `pattern`. */
export function grepRepository(root: string, pattern: RegExp, options: { exclude?: string[] } = {}): string[] {
  const found: string[] = [];
  for (const file of repositoryFiles(root)) {
    if (options.exclude?.includes(file)) continue;
    const bytes = readFileSync(join(root, file));
    if (bytes.includes(0)) continue; // binary
    const lines = bytes.toString('utf8').split('\n');
    lines.forEach((line, i) => {
      if (pattern.test(line)) found.push(`${file}:${i + 1}: ${line}`);
    });
  }
  return found;
}
