import { accessSync, constants, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { errorMessage, MsgbridgeError } from './errors.js';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';

/**
 * A persistent local store that materialises changelog partitions (LMDB, one environment per
 * directory): the tracker's task stores and the sender's request ledger are built on it. It
 * keeps what every such store needs and nothing of what they hold: the identity that says which
 * cluster, topics and partition the directory belongs to (a directory of another identity is
 * wiped), the checkpoint (the changelog offsets up to which the store reflects its topics),
 * writes on lmdb's write thread counted until durable, remapping (to give back the resident
 * pages of the map), and closing. src/platform/README.md, "Local stores".
 */

/** The handles of one open environment; `meta` holds the identity and the checkpoint. */
export interface StoreHandles {
  env: RootDatabase;
  meta: Database<unknown, string>;
}

/** A changelog record as a store takes it: raw bytes, parsed by the store. */
export interface ChangelogEntry {
  key: string;
  value: Buffer | null;
}

/** Next offset to read per changelog: everything before it is in the store. */
export type Checkpoint = Record<string, number | undefined>;

export abstract class LocalStore<H extends StoreHandles, C extends Checkpoint, I extends object> {
  protected h: H;
  /** A checkpoint written and not yet durable: the next change builds on it. */
  private nextCheckpoint: C | undefined;
  protected lastWrite: Promise<unknown> = Promise.resolve();
  private writesInFlight = 0;
  private asyncWrites = 0;
  private remapping = false;
  protected closed = false;

  protected constructor(
    readonly dir: string,
    readonly identity: I,
    private readonly openHandles: (env: RootDatabase) => H,
  ) {
    mkdirSync(dir, { recursive: true });
    this.h = this.openEnvironment();
  }

  private openEnvironment(): H {
    // Async commits run on lmdb's write thread, batched; a kill -9 never tears a transaction
    // (copy-on-write pages, the meta page is the commit).
    return this.openHandles(open({ path: join(this.dir, 'store.mdb'), maxDbs: 16, compression: false }));
  }

  /** The open handles; reads and writes throw while `remap` replaces them. */
  protected get live(): H {
    if (this.remapping) throw new Error(`the store in ${this.dir} is being remapped: ask again`);
    return this.h;
  }

  protected get env(): RootDatabase {
    return this.live.env;
  }

  protected get meta(): Database<unknown, string> {
    return this.live.meta;
  }

  /** The identity stored in the directory, if any. */
  storedIdentity(): I | undefined {
    return this.meta.get('identity') as I | undefined;
  }

  /**
   * Wipes the directory when it holds a store of another identity (or `adopt` cannot make the
   * stored identity this one), and records this identity; answers whether the store was kept.
   */
  protected claim(adopt: (stored: I) => I = (stored) => stored): boolean {
    const stored = this.storedIdentity();
    if (stored !== undefined && sameFields(adopt(stored), this.identity)) {
      if (!sameFields(stored, this.identity)) this.meta.putSync('identity', this.identity);
      return true;
    }
    if (stored !== undefined) this.wipe();
    this.meta.putSync('identity', this.identity);
    return false;
  }

  /** Empties the directory and opens it again (its offsets are inconsistent with the changelog). */
  protected wipe(): void {
    this.closeNow();
    rmSync(this.dir, { recursive: true, force: true });
    mkdirSync(this.dir, { recursive: true });
    this.closed = false;
    this.nextCheckpoint = undefined;
    this.h = this.openEnvironment();
  }

  checkpoint(): C | undefined {
    return this.meta.get('checkpoint') as C | undefined;
  }

  /** The checkpoint a change builds on: the last one written, durable or not. */
  protected pendingCheckpoint(empty: C): C {
    return this.nextCheckpoint ?? this.checkpoint() ?? empty;
  }

  /** Remembers the checkpoint just written (in a transaction of the caller's). */
  protected advanceCheckpoint(next: C): void {
    this.nextCheckpoint = next;
  }

  /**
   * Runs `write` as one asynchronous LMDB transaction, counted until durable; `settled` runs
   * once it is (to drop what the caller kept readable meanwhile). Resolves once durable.
   */
  protected writeAsync(write: () => void, settled: () => void): Promise<void> {
    return this.track(this.env.transaction(write), settled);
  }

  /**
   * Counts writes issued outside a transaction (lmdb's `put` and `remove`, done on its write
   * thread in the order issued) until `done`, the last of them, is durable; `settled` runs then.
   * lmdb-js runs queued transaction callbacks after the single operations queued with them,
   * whatever the order they were issued in: a store that needs its writes to land in the order
   * issued makes them all single operations.
   */
  protected trackWrites(done: Promise<unknown>, settled: () => void = () => undefined): Promise<void> {
    return this.track(done, settled);
  }

  private track(done: Promise<unknown>, settled: () => void): Promise<void> {
    this.assertOpen();
    this.writesInFlight++;
    this.asyncWrites++;
    done.then(
      () => this.writesInFlight--,
      () => this.writesInFlight--,
    );
    this.lastWrite = done.then(settled, () => undefined);
    return done.then(() => undefined);
  }

  /**
   * Unmaps and maps the file again, once no write is in flight: the pages this process touched
   * leave its resident set (they stay in the OS page cache). LMDB reads through a memory map, so
   * without this a process's RSS grows towards the size of its stores. The caller runs it when
   * nothing else uses the store: reads in between throw. Answers false when writes kept coming.
   */
  async remap(): Promise<boolean> {
    // Writes take a few milliseconds each: a moment with none in flight comes soon, even under load.
    for (let attempt = 0; attempt < 100 && !this.closed; attempt++) {
      if (this.writesInFlight === 0) {
        this.remapping = true;
        try {
          // After an async write, lmdb closes the environment only once its write thread is done:
          // reopening before that would reuse the old mapping.
          await this.h.env.close();
          this.h = this.openEnvironment();
        } finally {
          this.remapping = false;
        }
        return true;
      }
      await this.lastWrite;
    }
    return false;
  }

  /** `remap` for a store that never wrote asynchronously (a restore): synchronous. */
  remapNow(): boolean {
    if (this.closed || this.asyncWrites > 0) return false;
    void this.h.env.close();
    this.h = this.openEnvironment();
    return true;
  }

  isClosed(): boolean {
    return this.closed;
  }

  /** True while `remap` runs: the store cannot be read. */
  isRemapping(): boolean {
    return this.remapping;
  }

  /** No write of this store is in flight. */
  protected idle(): boolean {
    return this.writesInFlight === 0;
  }

  /** Entries of a database of this store. */
  protected entries(db: { getStats(): unknown }): number {
    return (db.getStats() as { entryCount: number }).entryCount;
  }

  /** Bytes the directory takes on disk. */
  bytes(): number {
    return directoryBytes(this.dir);
  }

  /** Every write issued so far is durable. */
  async flushed(): Promise<void> {
    await this.lastWrite;
  }

  /** Waits for the writes in flight, then closes the environment (the directory stays for a later start). */
  async close(): Promise<void> {
    if (this.closed) return;
    await this.flushed();
    if (this.closed) return;
    this.closed = true;
    // Resolves once lmdb really closed it (after its write thread): a later open maps anew.
    await Promise.resolve(this.h.env.close()).catch(() => undefined);
  }

  protected closeNow(): void {
    if (this.closed) return;
    this.closed = true;
    try {
      void this.h.env.close();
    } catch {
      // Already closed by lmdb (process exit): nothing to release.
    }
  }

  protected assertOpen(): void {
    if (this.closed) throw new Error(`the store in ${this.dir} is closed`);
  }
}

/** The same fields and values, whatever the order they were written in (fields are added over releases). */
function sameFields(a: object, b: object): boolean {
  const text = (x: object) => JSON.stringify(x, Object.keys(x).sort());
  return text(a) === text(b);
}

function directoryBytes(dir: string): number {
  let total = 0;
  try {
    for (const name of readdirSync(dir)) total += statSync(join(dir, name)).size;
  } catch {
    return 0;
  }
  return total;
}

/** The directory of one store: `<stateDir>/<groupId>/<name>`, the group id made safe for a path. */
export function localStoreDir(stateDir: string, groupId: string, name: string): string {
  return join(stateDir, groupId.replace(/[^A-Za-z0-9._-]/g, '_'), name);
}

/** A time as a sortable key part (expiry indexes): 15 digits of milliseconds. */
export const sortableTime = (ms: number): string => String(Math.max(0, Math.floor(ms))).padStart(15, '0');

/**
 * A role's stores' directory exists (created when missing) and is writable: a clear error at
 * start (naming the setting and its variable), not a store that fails forever.
 */
export function checkLocalStoreDir(dir: string, setting: string, envName: string, role: string): void {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, constants.W_OK);
  } catch (error) {
    throw new MsgbridgeError(
      'CONFIG_INVALID',
      `${setting} ${dir}: ${role} cannot write its stores there (${(error as NodeJS.ErrnoException).code ?? errorMessage(error)}); set ${envName} to a writable directory on a volume that outlives the process`,
    );
  }
}
