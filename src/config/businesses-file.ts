import { createHash } from 'node:crypto';
import { readFileSync, watch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import { businessesSchema, type BusinessConfig } from './schema.js';

/**
 * The live businesses file (`businessesFile`, MSGBRIDGE_BUSINESSES_FILE): a JSON array in the
 * shape of the configuration's `businesses`. Read at start by the loader, then watched by every
 * role: on a change of its content (including a Kubernetes Secret volume's symlink swap, which
 * replaces the file without writing it) and on SIGHUP it is read, validated, and handed to the
 * role, which swaps its businesses at once (one synchronous step: no request sees half of a
 * change). An invalid file keeps the last good set. Why a poll beside fs.watch: a watch on a
 * directory misses a swapped symlink on some file systems; reading a small file every two
 * seconds and comparing its hash cannot miss it.
 */

/** The file's raw JSON (no validation: the loader validates it with the rest of the configuration). */
export function readBusinessesJson(path: string): unknown {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new MsgbridgeError(
      'CONFIG_FILE_UNREADABLE',
      `cannot read the businesses file ${path}: ${errorMessage(err)}`,
      { cause: err },
    );
  }
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new MsgbridgeError('CONFIG_INVALID', `the businesses file ${path} is not valid JSON: ${errorMessage(err)}`, {
      cause: err,
    });
  }
}

/** Reads and validates the file; errors name the file and the field, never a secret value. */
export function readBusinessesFile(path: string): BusinessConfig[] {
  const parsed = businessesSchema.safeParse(readBusinessesJson(path));
  if (!parsed.success) {
    const lines = parsed.error.issues.map((i) => `  - businesses.${i.path.map(String).join('.')}: ${i.message}`);
    throw new MsgbridgeError('CONFIG_INVALID', `invalid businesses file ${path}:\n${lines.join('\n')}`);
  }
  return parsed.data;
}

export interface BusinessesWatchOptions {
  path: string;
  /**
   * The new, valid list. Throw (a MsgbridgeError naming what is wrong) to refuse it for this
   * role (the sender needs an API key per business): the last good set stays.
   */
  apply(businesses: BusinessConfig[]): void;
  /** One call per refused change (invalid file, or refused by apply). */
  onError(error: Error): void;
  /** A change was applied. */
  onApplied?(businesses: BusinessConfig[]): void;
  /** How often the file is read and compared (default 2 s). */
  pollMs?: number;
}

export interface BusinessesWatch {
  /** Reads the file now (SIGHUP). */
  reload(): void;
  stop(): void;
}

export function watchBusinessesFile(options: BusinessesWatchOptions): BusinessesWatch {
  return watchValidatedFile({ ...options, read: readBusinessesFile });
}

export interface ValidatedFileWatchOptions<T> {
  path: string;
  /** Reads and validates the file; throws (naming the file and field, never a secret) when it is not valid. */
  read(path: string): T;
  apply(value: T): void;
  onError(error: Error): void;
  onApplied?(value: T): void;
  pollMs?: number;
}

const digest = (path: string): string | undefined => {
  try {
    return createHash('sha256').update(readFileSync(path)).digest('hex');
  } catch {
    return undefined;
  }
};

/**
 * Any live file read the same way (the businesses file, the tracker's tokens file): a change of
 * content, a swapped symlink or `reload()` reads it; an invalid one is reported once and the
 * last good value stays.
 */
export function watchValidatedFile<T>(options: ValidatedFileWatchOptions<T>): BusinessesWatch {
  const { path } = options;
  let last = digest(path);
  /** The content last refused: reported once, not at every poll. */
  let refused: string | undefined;
  const check = (force: boolean) => {
    const now = digest(path);
    if (!force && (now === last || now === refused)) return;
    try {
      const value = options.read(path);
      options.apply(value);
      last = now;
      refused = undefined;
      options.onApplied?.(value);
    } catch (err) {
      if (now !== refused || force) options.onError(err as Error);
      refused = now;
    }
  };
  let debounce: NodeJS.Timeout | undefined;
  let watcher: FSWatcher | undefined;
  try {
    // The directory, not the file: a swapped symlink (Kubernetes ..data) replaces the entry.
    watcher = watch(dirname(path), { persistent: false }, (_event, name) => {
      if (name !== null && name !== basename(path) && !String(name).startsWith('..')) return;
      clearTimeout(debounce);
      debounce = setTimeout(() => check(false), 100);
    });
    watcher.on('error', () => undefined);
  } catch {
    // No watch support here: the poll alone.
  }
  const poll = setInterval(() => check(false), options.pollMs ?? 2000);
  poll.unref();
  return {
    reload: () => check(true),
    stop() {
      clearInterval(poll);
      clearTimeout(debounce);
      watcher?.close();
    },
  };
}
