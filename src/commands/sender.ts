import type { Command } from 'commander';
import { commandConfig } from './context.js';
import { runRole } from '../runtime/foreground.js';

/**
 * `msgbridge sender`: send requests from Kafka to the provider, results back to Kafka.
 * Configuration from the global --config file and the environment (the single-business
 * shorthand MSGBRIDGE_BUSINESS_ID / MSGBRIDGE_API_KEY / MSGBRIDGE_PROVIDER_URL is enough);
 * Kafka from KAFKA_BROKERS, or an embedded local broker when none is configured.
 * SIGTERM/SIGINT drain (docs/design.md, "Failure handling"): exit 0 when everything in progress finished within
 * sender.drainGraceMs, 1 otherwise; 1 too when the Kafka client gives up for good.
 */
export function registerSenderCommand(program: Command): void {
  program
    .command('sender')
    .description(
      'run the sender: consume send requests from Kafka, call the provider, publish the created message ids (or the errors) to Kafka',
    )
    .action(async (_opts: unknown, command: Command) => {
      const config = commandConfig(command);
      const { senderApiKeys, startSender } = await import('../sender/index.js');
      // Configuration errors first, before any broker is started.
      senderApiKeys(config);
      await runRole({
        name: 'sender',
        config,
        // The sender's own drain stays within drainGraceMs.
        drainGraceMs: config.sender.drainGraceMs,
        unfinished: 'requests still in progress at the grace deadline were left to run again elsewhere',
        start: ({ logger, brokers, onFatal }) => startSender({ config, logger, brokers, onFatal }),
        describe: (sender) => ({
          sender: {
            admin: sender.adminAddress ?? null,
            groupId: config.sender.groupId,
            topic: config.kafka.topics.sendRequests,
          },
        }),
      });
    });
}
