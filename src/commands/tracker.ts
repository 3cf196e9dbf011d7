import type { Command } from 'commander';
import { createKafka } from '../kafka/client.js';
import { connectingToKafka } from '../kafka/failure.js';
import { messageStateOf } from '../tracker/message-state.js';
import { findMessageState, findRequestState } from '../tracker/query.js';
import { startTracker } from '../tracker/index.js';
import { MsgbridgeError } from '../errors.js';
import { commandConfig, operatorBrokers } from './context.js';
import { runConsumerRole } from './role-runner.js';

/**
 * `msgbridge tracker`: one monotonic state per message and the customers' conversation windows,
 * exactly once, on compacted topics (src/tracker/README.md). SIGTERM/SIGINT drain: exit 0 when
 * it left its group within tracker.drainGraceMs, 1 otherwise or when the Kafka client gives up.
 *
 * `msgbridge status <messageId|requestId>`: the current state, read from message-state (no
 * tracker needed); exit 1 when no state is known.
 */
export function registerTrackerCommand(program: Command): void {
  program
    .command('tracker')
    .description('run the tracker: fold send results and delivery statuses into one state per message (message-state), and inbound messages into conversation windows (conversations), exactly once')
    .action(async (_opts: unknown, command: Command) => {
      const config = commandConfig(command);
      await runConsumerRole({
        name: 'tracker',
        config,
        drainGraceMs: config.tracker.drainGraceMs,
        unfinished: 'the tracker did not leave its group within tracker.drainGraceMs',
        start: ({ logger, brokers, onFatal }) => startTracker({ config, logger, brokers, onFatal }),
        describe: (tracker) => ({ tracker: { url: tracker.url ?? null, groupId: config.tracker.groupId, topics: [config.kafka.topics.messageState, config.kafka.topics.conversations] } }),
      });
    });

  program
    .command('status')
    .description('print the current state of a message (by message id or request id), read from the message-state topic')
    .argument('<id>', 'a message id, or the requestId of a send request')
    .action(async (id: string, _opts: unknown, command: Command) => {
      const config = commandConfig(command);
      if (id.trim() === '' || id.length > 512) throw new MsgbridgeError('INVALID_ARGUMENT', 'expected a message id or a request id (1 to 512 characters)');
      const brokers = operatorBrokers(config);
      const kafka = createKafka(config.kafka, { brokers });
      const topic = config.kafka.topics.messageState;
      const partitions = await connectingToKafka(brokers, async () => {
        const admin = kafka.admin();
        await admin.connect();
        try {
          const { topics } = await admin.fetchTopicMetadata({ topics: [topic] });
          return topics[0]?.partitions.length ?? 0;
        } catch {
          throw new MsgbridgeError('INVALID_ARGUMENT', `topic ${topic} does not exist: is a tracker running (msgbridge tracker)?`);
        } finally {
          await admin.disconnect();
        }
      });
      const query = { kafka, topic, partitions, timeoutMs: config.tracker.queryTimeoutMs };
      const state = (await findMessageState(query, id)) ?? (await findRequestState(query, id));
      if (!state) {
        process.stderr.write(`msgbridge: no state for ${id} in ${topic} (neither a message id nor a request id the tracker has seen)\n`);
        process.exitCode = 1;
        return;
      }
      process.stdout.write(`${JSON.stringify(messageStateOf(state), null, 2)}\n`);
    });
}
