import { InvalidArgumentError, type Command } from 'commander';
import { startLocalCluster } from '../local-kafka/local-broker.js';
import { parseIntegerOption } from './options.js';

export function registerKafkaCommand(program: Command): void {
  program
    .command('kafka')
    .description(
      'run the embedded local Kafka (KRaft; one node, or --nodes 3) in the foreground and print its bootstrap address',
    )
    .option('--heap-mb <mb>', 'JVM heap in MiB', parseIntegerOption('--heap-mb', 128, 8192), 512)
    .option(
      '--partitions <n>',
      'default partitions of auto-created topics',
      parseIntegerOption('--partitions', 1, 1000),
      6,
    )
    .option(
      '--secure <mode>',
      'a TLS client listener with a throw-away CA: scram (SASL_SSL, SCRAM-SHA-512) or mtls (client certificates)',
      (value: string) => {
        if (value !== 'scram' && value !== 'mtls') throw new InvalidArgumentError('expected scram or mtls');
        return value;
      },
    )
    .option(
      '--nodes <n>',
      'KRaft nodes (broker and controller each, own JVM): 3 for failover',
      parseIntegerOption('--nodes', 1, 5),
      1,
    )
    .action(async (opts: { heapMb: number; partitions: number; nodes: number; secure?: 'scram' | 'mtls' }) => {
      const broker = await startLocalCluster({
        nodes: opts.nodes,
        heapMb: opts.heapMb,
        partitions: opts.partitions,
        ...(opts.secure ? { secure: opts.secure } : {}),
        onProgress: (line) => process.stderr.write(`${line}\n`),
      });
      process.stdout.write(`${broker.bootstrap}\n`);
      if (broker.client) {
        // The exact environment a role or a CLI command needs, ready to paste or `export`.
        for (const [name, value] of Object.entries(broker.client.env)) process.stdout.write(`${name}=${value}\n`);
      }
      process.stderr.write(
        `Kafka is ready at ${broker.bootstrap} (started in ${broker.startupMs} ms). Use ${broker.client ? 'the variables above' : `KAFKA_BROKERS=${broker.bootstrap}`}. Ctrl-C stops it.\n`,
      );
      await new Promise<void>((resolve) => {
        process.once('SIGINT', resolve);
        process.once('SIGTERM', resolve);
      });
      await broker.stop();
    });
}
