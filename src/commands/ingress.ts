import { InvalidArgumentError, type Command } from 'commander';
import { ingressWorkersSchema } from '../config/schema.js';
import { MsgbridgeError } from '../platform/errors.js';
import { startIngressWorkers } from '../ingress/workers.js';
import { obtainBrokers } from '../kafka/brokers.js';
import { createLifecycle } from '../runtime/shutdown.js';
import { createLogger } from '../platform/logger.js';
import { commandConfig } from './context.js';

/** --workers: an integer from 1 to 256, or "auto" (as ingress.workers). */
export function parseWorkersOption(value: string): number | 'auto' {
  const trimmed = value.trim();
  const parsed = ingressWorkersSchema.safeParse(/^\d+$/.test(trimmed) ? Number(trimmed) : trimmed);
  if (!parsed.success) throw new InvalidArgumentError(`--workers expects an integer from 1 to 256 or "auto", got "${value}"`);
  return parsed.data;
}

/**
 * `msgbridge ingress`: signed provider webhooks into Kafka. Configuration from the global
 * --config file and the environment; Kafka from KAFKA_BROKERS, or an embedded local broker
 * when none is configured. SIGTERM/SIGINT drain (DESIGN §2) and exit 0 within
 * ingress.drainGraceMs, 1 when the drain did not finish in time. With --workers (or
 * ingress.workers) above 1, worker threads share the port (src/ingress/workers.ts); one that
 * stops on its own makes the ingress drain the others and exit 1.
 */
export function registerIngressCommand(program: Command): void {
  program
    .command('ingress')
    .description('run the webhook ingress: verify signed provider webhooks and publish them to Kafka')
    .option('--workers <n>', 'worker threads serving the port, each with its own producer: 1 to 256, or "auto" (the cores this process may use); default ingress.workers (MSGBRIDGE_INGRESS_WORKERS)', parseWorkersOption)
    .action(async (opts: { workers?: number | 'auto' }, command: Command) => {
      const loaded = commandConfig(command);
      const config = opts.workers === undefined ? loaded : { ...loaded, ingress: { ...loaded.ingress, workers: opts.workers } };
      if (!config.businesses.some((b) => b.signingSecrets.length > 0)) {
        throw new MsgbridgeError(
          'CONFIG_INVALID',
          'no business with a webhook signing secret is configured: set MSGBRIDGE_BUSINESS_ID and MSGBRIDGE_SIGNING_SECRET, or businesses[].signingSecrets in the configuration file',
        );
      }
      const logger = createLogger({ level: config.log.level, name: 'ingress' });
      const { brokers, local } = await obtainBrokers(config, logger);
      // Set once the lifecycle exists (below).
      const workerFailure: { stop?: () => void } = {};
      let ingress;
      try {
        ingress = await startIngressWorkers(config, { logger, brokers, onWorkerFailure: () => workerFailure.stop?.() });
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
      let exiting = false;
      const exit = (code: number) => {
        if (exiting) return;
        exiting = true;
        // Worker threads closed first (a no-op without them), then the last log lines out.
        void ingress.terminate().finally(() => {
          const timer = setTimeout(() => process.exit(code), 1000);
          logger.flush(() => {
            clearTimeout(timer);
            process.exit(code);
          });
        });
      };
      // A worker thread that stopped on its own: the others drain, and the exit code says so.
      workerFailure.stop = () => void lifecycle.stop('ingress worker thread stopped').then(() => exit(1));
      process.stdout.write(`${JSON.stringify({ ingress: ingress.url, brokers, ...(ingress.workers > 1 ? { workers: ingress.workers } : {}) })}\n`);
      await new Promise<never>(() => {
        lifecycle.handleSignals(exit);
      });
    });
}
