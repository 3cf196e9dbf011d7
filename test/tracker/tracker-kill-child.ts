import { loadConfig } from '../../src/config/load.js';
import { createLogger } from '../../src/platform/logger.js';
import { startTracker } from '../../src/tracker/index.js';
import { TaskStore } from '../../src/tracker/state-store.js';

/**
 * A tracker that kills itself with SIGKILL at one chosen moment (KILL_AT, the KILL_AFTER-th
 * time it gets there): `sent` (outputs written, commit not yet asked), `committed` (the
 * transaction committed, the local store not yet written) or `store-write` (inside the store's
 * LMDB transaction, half of its states written). KILL_AT unset: runs until SIGTERM. Prints
 * `ready <url>` once its tasks are restored.
 */
const killAt = process.env.KILL_AT;
const killAfter = Number(process.env.KILL_AFTER ?? '1');
let seen = 0;
const die = () => {
  if (++seen === killAfter) process.kill(process.pid, 'SIGKILL');
};

if (killAt === 'store-write') {
  // The store's write transaction runs its callback later (lmdb batches it); putMessage is called
  // inside it, before its commit: a kill there tears the write.
  type Method = (this: unknown, ...a: unknown[]) => unknown;
  const proto = TaskStore.prototype as unknown as Record<'write' | 'putMessage', Method>;
  const { write, putMessage } = proto;
  let size = 0;
  let puts = 0;
  proto.write = function (...args) {
    size = (args[0] as { messages: unknown[] }).messages.length;
    puts = 0;
    return write.apply(this, args);
  };
  proto.putMessage = function (...args) {
    const result = putMessage.apply(this, args);
    if (size > 1 && ++puts === Math.ceil(size / 2)) die();
    return result;
  };
}

const config = loadConfig({ env: process.env });
const tracker = await startTracker({
  config,
  logger: createLogger({ level: config.log.level, name: 'tracker' }),
  onTransaction: (event) => {
    if ((killAt === 'sent' && event.phase === 'sent') || (killAt === 'committed' && event.phase === 'committed')) die();
  },
});
await tracker.ready;
process.stdout.write(`ready ${tracker.address}\n`);
process.on('SIGTERM', () => void tracker.drain().then((ok) => process.exit(ok ? 0 : 1)));
