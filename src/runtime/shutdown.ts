import type { Logger } from '../platform/logger.js';

/**
 * A role's stop: `drain` runs the role's own drain steps once, bounded by a grace deadline; a
 * second signal while draining is logged and otherwise ignored, so an impatient Ctrl-C cannot
 * lose acknowledged work.
 */
export interface Shutdown {
  /** Resolves when stopped; `true` when the drain finished within the grace period. */
  stop(reason: string): Promise<boolean>;
  /** Installs SIGTERM/SIGINT handlers that drain and then exit the process. */
  handleSignals(exit?: (code: number) => void): void;
}

/** `drain` resolving false (a role's drain left work unfinished) counts as an incomplete stop, as a timeout does. */
export function createShutdown(options: {
  logger: Logger;
  graceMs: number;
  drain: () => Promise<boolean | void>;
}): Shutdown {
  let stopping: Promise<boolean> | undefined;

  const stop = (reason: string): Promise<boolean> => {
    if (stopping) return stopping;
    options.logger.info({ reason, graceMs: options.graceMs }, 'draining');
    stopping = (async () => {
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<false>((resolve) => (timer = setTimeout(() => resolve(false), options.graceMs)));
      const drained = options.drain().then(
        (finished) => finished !== false,
        (err: unknown) => {
          options.logger.error({ err }, 'drain failed');
          return false;
        },
      );
      const ok = await Promise.race([drained, deadline]);
      clearTimeout(timer);
      if (ok) options.logger.info('stopped');
      else options.logger.warn({ graceMs: options.graceMs }, 'stopped before the drain finished');
      return ok;
    })();
    return stopping;
  };

  return {
    stop,
    handleSignals(exit = (code) => process.exit(code)) {
      for (const signal of ['SIGTERM', 'SIGINT'] as const) {
        process.on(signal, () => {
          if (stopping) {
            options.logger.warn({ signal }, 'already draining');
            return;
          }
          void stop(signal).then((ok) => exit(ok ? 0 : 1));
        });
      }
    },
  };
}
