import type { Command } from 'commander';
import { MsgbridgeError } from '../errors.js';
import { startIngress } from '../ingress/index.js';
import { obtainBrokers } from '../kafka/brokers.js';
import { createLifecycle } from '../lifecycle.js';
import { createLogger } from '../observability/logger.js';
import { commandConfig } from './context.js';

/**
 * `msgbridge ingress`: signed provider webhooks into Kafka. Configuration from the global
 * --config file and the environment; Kafka from KAFKA_BROKERS, or an embedded local broker
 * when none is configured. SIGTERM/SIGINT drain (DESIGN §2) and exit 0 within
 * ingress.drainGraceMs, 1 when the drain did not finish in time.
 */
export function registerIngressCommand(program: Command): void {
  program
    .command('ingress')
    .description('run the webhook ingress: verify signed provider webhooks and publish them to Kafka')
    .action(async (_opts: unknown, command: Command) => {
      const config = commandConfig(command);
      if (!config.businesses.some((b) => b.signingSecrets.length > 0)) {
        throw new MsgbridgeError(
          'CONFIG_INVALID',
          'no business with a webhook signing secret is configured: set MSGBRIDGE_BUSINESS_ID and MSGBRIDGE_SIGNING_SECRET, or businesses[].signingSecrets in the configuration file',
        );
      }
      const logger = createLogger({ level: config.log.level, name: 'ingress' });
      const { brokers, local } = await obtainBrokers(config, logger);
      let ingress;
      try {
        ingress = await startIngress({ config, logger, brokers });
      } catch (err) {
        await local?.stop();
        throw err;
      }
      const lifecycle = createLifecycle({
        logger,
        graceMs: config.ingress.drainGraceMs,
        drain: async () => {
          await ingress.drain();
          await local?.stop();
        },
      });
      process.stdout.write(`${JSON.stringify({ ingress: ingress.url, brokers })}\n`);
      await new Promise<never>(() => {
        lifecycle.handleSignals((code) => {
          // Last log lines out before the process goes.
          const exit = () => process.exit(code);
          const timer = setTimeout(exit, 1000);
          logger.flush(() => {
            clearTimeout(timer);
            exit();
          });
        });
      });
    });
}
