import { withoutAbortedRecords } from './aborted-transactions.js';
import { replaceKafkajsModule } from './kafkajs-module.js';

/**
 * Replaces kafkajs 2.2.4's `filterAbortedMessages`, which every read_committed kafkajs consumer
 * uses to drop the records of aborted transactions. It takes the broker's list of aborted
 * transactions as sorted by first offset (the broker sends them in the order they were aborted)
 * and starts one transaction per record, so records of two producers' interleaved aborted
 * transactions reach the consumer (measured: `test/kafka/changelog-reader.int.test.ts`). This one
 * decides as the Java consumer does (aborted-transactions.ts). kafkajs captures the function when
 * its batch module loads, so this module is evaluated first (kafkajs-send-fix.ts imports it).
 */

function filterAbortedMessages(options: {
  messages: Parameters<typeof withoutAbortedRecords>[0];
  abortedTransactions?: Parameters<typeof withoutAbortedRecords>[1];
}) {
  return withoutAbortedRecords(options.messages, options.abortedTransactions);
}

replaceKafkajsModule({
  path: 'kafkajs/src/consumer/filterAbortedMessages.js',
  replacement: filterAbortedMessages,
  fixed: Symbol.for('msgbridge.kafkajsAbortFix'),
  capturedBy: 'kafkajs/src/consumer/batch.js',
  warning:
    'kafkajs was loaded before msgbridge could fix its read_committed filter, which can let records of aborted transactions through: import msgbridge first',
  code: 'MSGBRIDGE_KAFKAJS_ABORT_FILTER_UNFIXED',
});
