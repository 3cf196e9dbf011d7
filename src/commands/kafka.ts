import type { Command } from 'commander';
import { startLocalBroker } from '../kafka/local-broker.js';
import { parseIntegerOption } from './options.js';

export function registerKafkaCommand(program: Command): void {
  program
    .command('kafka')
    .description('run the embedded local Kafka broker (KRaft, single node) in the foreground and print its bootstrap address')
    .option('--heap-mb <mb>', 'JVM heap in MiB', parseIntegerOption('--heap-mb', 128, 8192), 512)
    .option('--partitions <n>', 'default partitions of auto-created topics', parseIntegerOption('--partitions', 1, 1000), 6)
    .action(async (opts: { heapMb: number; partitions: number }) => {
      const broker = await startLocalBroker({
        heapMb: opts.heapMb,
        partitions: opts.partitions,
        onProgress: (line) => process.stderr.write(`${line}\n`),
      });
      process.stdout.write(`${broker.bootstrap}\n`);
      process.stderr.write(`Kafka is ready at ${broker.bootstrap} (started in ${broker.startupMs} ms). Use KAFKA_BROKERS=${broker.bootstrap}. Ctrl-C stops it.\n`);
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      await broker.stop();
    });
}
