import { createRequire, Module } from 'node:module';
import { withoutAbortedRecords } from './aborted-transactions.js';

/**
 * Replaces kafkajs 2.2.4's `filterAbortedMessages`, which every read_committed kafkajs consumer
 * uses to drop the records of aborted transactions. It takes the broker's list of aborted
 * transactions as sorted by first offset (the broker sends them in the order they were aborted)
 * and starts one transaction per record, so records of two producers' interleaved aborted
 * transactions reach the consumer (measured: `test/kafka/changelog-reader.int.test.ts`). This one
 * decides as the Java consumer does (aborted-transactions.ts). kafkajs captures the function when
 * its batch module loads, so this module is evaluated first (kafkajs-send-fix.ts imports it).
 */

const require = createRequire(import.meta.url);
const FILTER = require.resolve('kafkajs/src/consumer/filterAbortedMessages.js');
const BATCH = require.resolve('kafkajs/src/consumer/batch.js');

/** Marks the fixed function: a second evaluation of this module (a test runner's) recognises the first one's. */
const FIXED = Symbol.for('msgbridge.kafkajsAbortFix');

function filterAbortedMessages(options: {
  messages: Parameters<typeof withoutAbortedRecords>[0];
  abortedTransactions?: Parameters<typeof withoutAbortedRecords>[1];
}) {
  return withoutAbortedRecords(options.messages, options.abortedTransactions);
}
(filterAbortedMessages as unknown as Record<symbol, boolean>)[FIXED] = true;

function install(): void {
  if ((require.cache[FILTER]?.exports as Record<symbol, unknown> | undefined)?.[FIXED]) return;
  if (require.cache[BATCH]) {
    // Too late for this process's kafkajs (an embedding program loaded it first): said, not thrown.
    process.emitWarning(
      'kafkajs was loaded before msgbridge could fix its read_committed filter, which can let records of aborted transactions through: import msgbridge first',
      { code: 'MSGBRIDGE_KAFKAJS_ABORT_FILTER_UNFIXED' },
    );
    return;
  }
  const module = new Module(FILTER);
  module.filename = FILTER;
  module.loaded = true;
  module.exports = filterAbortedMessages;
  require.cache[FILTER] = module;
}

install();
