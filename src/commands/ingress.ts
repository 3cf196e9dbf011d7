import { InvalidArgumentError, type Command } from 'commander';
import { ingressWorkersSchema } from '../config/schema.js';
import { runRole } from '../runtime/foreground.js';
import { commandConfig } from './context.js';

/** --workers: an integer from 1 to 256, or "auto" (as ingress.workers). */
export function parseWorkersOption(value: string): number | 'auto' {
  const trimmed = value.trim();
  const parsed = ingressWorkersSchema.safeParse(/^\d+$/.test(trimmed) ? Number(trimmed) : trimmed);
  if (!parsed.success)
    throw new InvalidArgumentError(`--workers expects an integer from 1 to 256 or "auto", got "${value}"`);
  return parsed.data;
}

/**
 * `msgbridge ingress`: signed provider webhooks into Kafka. Configuration from the global
 * --config file and the environment; Kafka from KAFKA_BROKERS, or an embedded local broker
 * when none is configured. SIGTERM/SIGINT drain (docs/design.md, "Failure handling") and exit 0 within
 * ingress.drainGraceMs, 1 when the drain did not finish in time. With --workers (or
 * ingress.workers) above 1, worker threads share the port (src/ingress/workers.ts); one that
 * stops on its own makes the ingress drain the others and exit 1.
 */
export function registerIngressCommand(program: Command): void {
  program
    .command('ingress')
    .description('run the webhook ingress: verify signed provider webhooks and publish them to Kafka')
    .option(
      '--workers <n>',
      'worker threads serving the port, each with its own producer: 1 to 256, or "auto" (the cores this process may use); default ingress.workers (MSGBRIDGE_INGRESS_WORKERS)',
      parseWorkersOption,
    )
    .action(async (opts: { workers?: number | 'auto' }, command: Command) => {
      const loaded = commandConfig(command);
      const [{ assertIngressConfigUsable }, { startIngressWorkers }] = await Promise.all([
        import('../ingress/index.js'),
        import('../ingress/workers.js'),
      ]);
      const config =
        opts.workers === undefined ? loaded : { ...loaded, ingress: { ...loaded.ingress, workers: opts.workers } };
      // Before an embedded broker or worker threads start for nothing.
      assertIngressConfigUsable(config);
      await runRole({
        name: 'ingress',
        config,
        drainGraceMs: config.ingress.drainGraceMs,
        unfinished:
          'requests still in progress at the grace deadline were answered 503 or left unanswered (the provider redelivers them)',
        // A worker thread that stopped on its own: the others drain, and the exit code says so.
        start: ({ logger, brokers, onFatal }) =>
          startIngressWorkers(config, {
            logger,
            brokers,
            onWorkerFailure: () => onFatal(new Error('an ingress worker thread stopped')),
          }),
        describe: (ingress) => ({
          ingress: ingress.address,
          admin: ingress.adminAddress ?? null,
          ...(ingress.workers > 1 ? { workers: ingress.workers } : {}),
        }),
        // Worker threads closed first (a no-op without them), then the last log lines out.
        beforeExit: (ingress) => ingress.terminate(),
      });
    });
}
