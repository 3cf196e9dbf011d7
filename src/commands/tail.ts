import { randomUUID } from 'node:crypto';
import type { Command } from 'commander';
import { createKafka } from '../kafka/client.js';
import { withAdmin } from '../kafka/admin.js';
import { subscribeTopics } from '../kafka/topic-subscription.js';
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
      let seen = 0;
      let finish: () => void = () => {};
      const finished = new Promise<void>((resolve) => (finish = resolve));
      const subscription = await subscribeTopics(kafka, {
        groupId: `msgbridge-tail-${randomUUID()}`,
        topics: [topic],
        fromBeginning: opts.fromBeginning ?? false,
        maxWaitTimeInMs: 200,
        onRecord: ({ partition, offset, timestamp, key, headers, value }) => {
          const record = {
            topic,
            partition,
            offset,
            timestamp: new Date(Number(timestamp)).toISOString(),
            key: key?.toString() ?? null,
            headers: headersToStrings(headers),
            value: decodeValue(value),
          };
          if (opts.json) process.stdout.write(`${JSON.stringify(record)}\n`);
          else {
            process.stdout.write(
              `── ${topic}[${partition}]@${record.offset}  ${record.timestamp}  key=${record.key ?? '(none)'}\n`,
            );
            for (const [name, text] of Object.entries(record.headers)) process.stdout.write(`   ${name}: ${text}\n`);
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
      await subscription.stop();
    });
}
