import { cpSync, rmSync } from 'node:fs';
import { join } from 'node:path';

/**
 * `npm run build`'s second step: the tracker console's static files (src/tracker/console/: HTML,
 * one ES module, CSS; no bundler) next to the compiled tracker, where console-assets.ts reads
 * them, so the published package and the image carry them.
 */
const root = join(import.meta.dirname, '..');
const target = join(root, 'dist', 'tracker', 'console');
rmSync(target, { recursive: true, force: true });
cpSync(join(root, 'src', 'tracker', 'console'), target, { recursive: true });
