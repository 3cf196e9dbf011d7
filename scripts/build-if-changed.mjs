// @ts-check
// `npm start` builds only when dist/ is not the build of the current sources: a SHA-256 over the
// build's inputs (src/, the tsconfigs, the lockfile, the console copy step), kept in
// dist/.build-inputs after each `npm run build`. Content, not times: a checkout that touches
// files without changing them rebuilds nothing, and one that changes them always rebuilds.
//   node scripts/build-if-changed.mjs           build when the inputs changed
//   node scripts/build-if-changed.mjs --record  (the end of `npm run build`) record them, and make
//                                               dist/cli.js executable
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, relative } from 'node:path';

const root = join(import.meta.dirname, '..');
const stamp = join(root, 'dist', '.build-inputs');
const INPUTS = ['src', 'tsconfig.json', 'tsconfig.build.json', 'package-lock.json', 'scripts/copy-console.ts'];

/** Every file under a path (the path itself when it is a file or missing). @param {string} path @returns {string[]} */
const files = (path) =>
  existsSync(path) && statSync(path).isDirectory()
    ? readdirSync(path).flatMap((name) => files(join(path, name)))
    : [path];

function inputsHash() {
  const hash = createHash('sha256');
  for (const file of INPUTS.flatMap((input) => files(join(root, input))).sort()) {
    hash.update(`${relative(root, file)}\0`);
    hash.update(existsSync(file) ? readFileSync(file) : '(none)');
    hash.update('\0');
  }
  return hash.digest('hex');
}

if (process.argv[2] === '--record') {
  // The bin is run by its #! line (`npx msgbridge`), and tsc writes it without the execute bit.
  chmodSync(join(root, 'dist', 'cli.js'), 0o755);
  writeFileSync(stamp, `${inputsHash()}\n`);
} else if (
  !existsSync(join(root, 'dist', 'cli.js')) ||
  !existsSync(stamp) ||
  readFileSync(stamp, 'utf8').trim() !== inputsHash()
) {
  const result = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
  process.exit(result.status ?? 1);
}
