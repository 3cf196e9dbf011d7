import { obtainBrokers } from '../local-kafka/obtain-brokers.js';
import type { Config } from '../config/schema.js';
import { createShutdown, type Shutdown } from './shutdown.js';
import type { Role } from './role.js';
import { createLogger, type Logger } from '../platform/logger.js';

/**
 * Runs a role in the foreground, the same way for every role command: Kafka from KAFKA_BROKERS
 * or an embedded broker, SIGTERM/SIGINT drain (exit 0 when the drain finished in time, 1
 * otherwise), exit 1 when the role fails for good (its Kafka client gave up, a worker thread
 * stopped), one JSON line on stdout once ready.
 */
export async function runRole<R extends Role>(options: {
  name: string;
  config: Config;
  /** The role's own drain deadline (a little more is given for an embedded broker). */
  drainGraceMs: number;
  /** What an unfinished drain means, for the log. */
  unfinished: string;
  start(context: { logger: Logger; brokers: string[]; onFatal(error: Error): void }): Promise<R>;
  /** The ready line's content. */
  describe(role: R, brokers: string[]): Record<string, unknown>;
  /** Last step before the process exits (after the drain, or at once when it failed). */
  beforeExit?(role: R): Promise<void>;
}): Promise<never> {
  const { config } = options;
  const logger = createLogger({ level: config.log.level, name: options.name });
  const { brokers, local } = await obtainBrokers(config, logger);
  let fatal: Error | undefined;
  // Set below; the fatal handler may only fire once the role runs.
  const holder: { lifecycle?: Shutdown } = {};
  let role: R | undefined;
  let exiting = false;
  const exit = (code: number) => {
    if (exiting) return;
    exiting = true;
    void Promise.resolve(role && options.beforeExit?.(role))
      .catch(() => undefined)
      .finally(() => {
        const timer = setTimeout(() => process.exit(code), 1000);
        logger.flush(() => {
          clearTimeout(timer);
          process.exit(code);
        });
      });
  };
  try {
    role = await options.start({
      logger,
      brokers,
      onFatal: (error) => {
        fatal = error;
        void holder.lifecycle?.stop(`${options.name} failed`).then(() => exit(1));
      },
    });
  } catch (err) {
    await local?.stop();
    throw err;
  }
  const started = role;
  const lifecycle = createShutdown({
    logger,
    graceMs: options.drainGraceMs + (local ? 15_000 : 2_000),
    drain: async () => {
      const finished = await started.drain();
      await local?.stop();
      if (!finished || fatal) throw new Error(fatal ? `${options.name} failed: ${fatal.message}` : options.unfinished);
    },
  });
  holder.lifecycle = lifecycle;
  lifecycle.handleSignals(exit);
  await started.ready;
  process.stdout.write(`${JSON.stringify({ ...options.describe(started, brokers), brokers })}\n`);
  return new Promise<never>(() => {});
}
