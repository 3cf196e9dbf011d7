import { obtainBrokers } from '../kafka/brokers.js';
import type { Config } from '../config/schema.js';
import { createLifecycle } from './shutdown.js';
import { createLogger, type Logger } from '../platform/logger.js';

/** A consumer-group role as the CLI runs it (sender, tracker). */
export interface ConsumerRole {
  readonly ready: Promise<void>;
  /** Resolves true when everything in progress finished within the role's grace period. */
  drain(): Promise<boolean>;
}

/**
 * Runs a consumer-group role in the foreground: Kafka from KAFKA_BROKERS or an embedded broker,
 * SIGTERM/SIGINT drain (exit 0 when the drain finished in time, 1 otherwise), exit 1 when the
 * Kafka client gives up for good, one JSON line on stdout once ready.
 */
export async function runConsumerRole<R extends ConsumerRole>(options: {
  name: string;
  config: Config;
  /** The role's own drain deadline (a little more is given for an embedded broker). */
  drainGraceMs: number;
  /** What an unfinished drain means, for the log. */
  unfinished: string;
  start(context: { logger: Logger; brokers: string[]; onFatal(error: Error): void }): Promise<R>;
  /** The ready line's content. */
  describe(role: R, brokers: string[]): Record<string, unknown>;
}): Promise<never> {
  const { config } = options;
  const logger = createLogger({ level: config.log.level, name: options.name });
  const { brokers, local } = await obtainBrokers(config, logger);
  let fatal: Error | undefined;
  // Set below; the fatal handler may only fire once the role runs.
  const holder: { lifecycle?: ReturnType<typeof createLifecycle> } = {};
  const exit = (code: number) => {
    const timer = setTimeout(() => process.exit(code), 1000);
    logger.flush(() => {
      clearTimeout(timer);
      process.exit(code);
    });
  };
  let role: R;
  try {
    role = await options.start({
      logger,
      brokers,
      onFatal: (error) => {
        fatal = error;
        void holder.lifecycle?.stop('kafka consumer failed').then(() => exit(1));
      },
    });
  } catch (err) {
    await local?.stop();
    throw err;
  }
  const lifecycle = createLifecycle({
    logger,
    graceMs: options.drainGraceMs + (local ? 15_000 : 2_000),
    drain: async () => {
      const finished = await role.drain();
      await local?.stop();
      if (!finished || fatal) throw new Error(fatal ? `the Kafka consumer failed: ${fatal.message}` : options.unfinished);
    },
  });
  holder.lifecycle = lifecycle;
  lifecycle.handleSignals(exit);
  await role.ready;
  process.stdout.write(`${JSON.stringify({ ...options.describe(role, brokers), brokers })}\n`);
  return new Promise<never>(() => {});
}
