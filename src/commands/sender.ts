import type { Command } from 'commander';
import { obtainBrokers } from '../kafka/brokers.js';
import { createLifecycle } from '../lifecycle.js';
import { createLogger } from '../observability/logger.js';
import { commandConfig } from './context.js';
import { senderApiKeys, startSender } from '../sender/index.js';

/**
 * `msgbridge sender`: send requests from Kafka to the provider, results back to Kafka.
 * Configuration from the global --config file and the environment (the single-business
 * shorthand MSGBRIDGE_BUSINESS_ID / MSGBRIDGE_API_KEY / MSGBRIDGE_PROVIDER_URL is enough);
 * Kafka from KAFKA_BROKERS, or an embedded local broker when none is configured.
 * SIGTERM/SIGINT drain (DESIGN §2): exit 0 when everything in progress finished within
 * sender.drainGraceMs, 1 otherwise; 1 too when the Kafka client gives up for good.
 */
export function registerSenderCommand(program: Command): void {
  program
    .command('sender')
    .description('run the sender: consume send requests from Kafka, call the provider, publish the created message ids (or the errors) to Kafka')
    .action(async (_opts: unknown, command: Command) => {
      const config = commandConfig(command);
      // Configuration errors first, before any broker is started.
      senderApiKeys(config);
      const logger = createLogger({ level: config.log.level, name: 'sender' });
      const { brokers, local } = await obtainBrokers(config, logger);
      let fatal: Error | undefined;
      // Set below; the fatal handler may only fire once the sender runs.
      const role: { lifecycle?: ReturnType<typeof createLifecycle> } = {};
      const exit = (code: number) => {
        const timer = setTimeout(() => process.exit(code), 1000);
        logger.flush(() => {
          clearTimeout(timer);
          process.exit(code);
        });
      };
      let sender;
      try {
        sender = await startSender({
          config,
          logger,
          brokers,
          onFatal: (error) => {
            fatal = error;
            void role.lifecycle?.stop('kafka consumer failed').then(() => exit(1));
          },
        });
      } catch (err) {
        await local?.stop();
        throw err;
      }
      const running = sender;
      const lifecycle = createLifecycle({
        logger,
        // The sender's own drain stays within drainGraceMs; a little more for the local broker.
        graceMs: config.sender.drainGraceMs + (local ? 15_000 : 2_000),
        drain: async () => {
          const finished = await running.drain();
          await local?.stop();
          if (!finished || fatal) throw new Error(fatal ? `the Kafka consumer failed: ${fatal.message}` : 'requests still in progress at the grace deadline were left to run again elsewhere');
        },
      });
      role.lifecycle = lifecycle;
      lifecycle.handleSignals(exit);
      await running.ready;
      process.stdout.write(`${JSON.stringify({ sender: { health: running.healthUrl ?? null, groupId: config.sender.groupId, topic: config.kafka.topics.sendRequests }, brokers })}\n`);
      await new Promise<never>(() => {});
    });
}
