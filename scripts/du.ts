import { readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';

/** Human-readable size of a directory's files. */
export function du(dir: string): string {
  const bytes = readdirSync(dir).reduce((sum, f) => sum + statSync(join(dir, f)).size, 0);
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}
