import { randomUUID } from 'node:crypto';
import type { Command } from 'commander';
import { createConsumer, createKafka, withAdmin } from '../kafka/client.js';
import { commandConfig, operatorBrokers } from './context.js';
import { parseIntegerOption } from './options.js';
import { decodeValue } from './render.js';
import { headersToStrings } from '../kafka/headers.js';

interface TailOptions {
  fromBeginning?: boolean;
  max?: number;
  timeout?: number;
  json?: boolean;
}

export function registerTailCommand(program: Command): void {
  program
    .command('tail')
    .description('pretty-print records of a topic: key, partition/offset, headers and decoded value')
    .argument('<topic>', 'topic name (for example messages, delivery_status, send-results)')
    .option('--from-beginning', 'start at the oldest record instead of new ones')
    .option('-n, --max <count>', 'exit after this many records', parseIntegerOption('--max', 1, 1_000_000))
    .option('--timeout <seconds>', 'exit after this many seconds', parseIntegerOption('--timeout', 1, 86_400))
    .option('--json', 'one JSON object per line instead of the pretty form')
    .action(async (topic: string, opts: TailOptions, command: Command) => {
      const config = commandConfig(command);
      const kafka = createKafka(config.kafka, { brokers: operatorBrokers(config), clientId: 'msgbridge-tail' });
      const topics = await withAdmin(kafka, (admin) => admin.listTopics());
      if (!topics.includes(topic)) {
        process.stderr.write(
          `msgbridge: topic "${topic}" does not exist; topics: ${
            topics
              .filter((t) => !t.startsWith('__'))
              .sort()
              .join(', ') || '(none)'
          }\n`,
        );
        process.exitCode = 2;
        return;
      }
      const consumer = createConsumer(kafka, { groupId: `msgbridge-tail-${randomUUID()}`, maxWaitTimeInMs: 200 });
      await consumer.connect();
      let seen = 0;
      let finish: () => void = () => {};
      const finished = new Promise<void>((resolve) => (finish = resolve));
      await consumer.subscribe({ topic, fromBeginning: opts.fromBeginning ?? false });
      await consumer.run({
        autoCommit: false,
        eachMessage: async ({ partition, message }) => {
          const record = {
            topic,
            partition,
            offset: message.offset,
            timestamp: new Date(Number(message.timestamp)).toISOString(),
            key: message.key?.toString() ?? null,
            headers: headersToStrings(message.headers),
            value: decodeValue(message.value),
          };
          if (opts.json) process.stdout.write(`${JSON.stringify(record)}\n`);
          else {
            process.stdout.write(`── ${topic}[${partition}]@${record.offset}  ${record.timestamp}  key=${record.key ?? '(none)'}\n`);
            for (const [name, value] of Object.entries(record.headers)) process.stdout.write(`   ${name}: ${value}\n`);
            process.stdout.write(`${JSON.stringify(record.value, null, 2).replace(/^/gm, '   ')}\n`);
          }
          seen += 1;
          if (opts.max !== undefined && seen >= opts.max) finish();
        },
      });
      const timer = opts.timeout ? setTimeout(finish, opts.timeout * 1000) : undefined;
      process.once('SIGINT', finish);
      process.once('SIGTERM', finish);
      await finished;
      clearTimeout(timer);
      await consumer.disconnect();
    });
}
