import { Counter, Gauge, type Registry } from 'prom-client';
import { watchBusinessesFile, type BusinessesWatch } from '../config/businesses-file.js';
import type { BusinessConfig, Config } from '../config/schema.js';
import type { Logger } from '../platform/logger.js';

/**
 * A role's side of the live businesses file (src/config/businesses-file.ts): watches it when
 * `businessesFile` is set, reloads on SIGHUP too, hands each valid list to `apply` (which swaps
 * the role's businesses in one step, or throws to refuse), logs one line per change or refusal
 * (ids only, never secrets) and counts them in `msgbridge_config_reloads_total{result}`.
 */
export function watchConfiguredBusinesses(options: {
  config: Config;
  registry: Registry;
  logger: Logger;
  apply(businesses: BusinessConfig[]): void;
  pollMs?: number;
}): BusinessesWatch | undefined {
  const { config, registry, logger } = options;
  const path = config.businessesFile;
  if (path === null) return undefined;
  const reloads = new Counter({
    name: 'msgbridge_config_reloads_total',
    help: 'Reloads of the businesses file: applied, or refused (the last good set stays)',
    labelNames: ['result'],
    registers: [registry],
  });
  let count = config.businesses.length;
  new Gauge({
    name: 'msgbridge_config_businesses',
    help: 'Businesses configured now',
    registers: [registry],
    collect() {
      this.set(count);
    },
  });
  reloads.inc({ result: 'applied' }, 0);
  reloads.inc({ result: 'refused' }, 0);
  const watch = watchBusinessesFile({
    path,
    pollMs: options.pollMs,
    apply: options.apply,
    onApplied(businesses) {
      count = businesses.length;
      reloads.inc({ result: 'applied' });
      logger.info(
        {
          file: path,
          businesses: businesses.map((b) => ({
            id: b.id,
            signingSecrets: b.signingSecrets.length,
            apiKey: b.apiKey !== null,
          })),
        },
        'businesses reloaded',
      );
    },
    onError(error) {
      reloads.inc({ result: 'refused' });
      logger.error({ file: path, err: error.message }, 'businesses file refused: the last good set stays in force');
    },
  });
  const onHangup = () => watch.reload();
  process.on('SIGHUP', onHangup);
  return {
    reload: () => watch.reload(),
    stop() {
      process.off('SIGHUP', onHangup);
      watch.stop();
    },
  };
}
