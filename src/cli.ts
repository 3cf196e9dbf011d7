#!/usr/bin/env node
import './kafka/kafkajs-send-fix.js'; // first: kafkajs's producers must load with their send fixed
import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { Command, CommanderError, InvalidArgumentError, Option } from 'commander';
import { registerDevCommand } from './commands/dev.js';
import { registerDlqCommand } from './commands/dlq.js';
import { registerIngressCommand } from './commands/ingress.js';
import { registerKafkaCommand } from './commands/kafka.js';
import { registerLoadCommand } from './commands/load.js';
import { registerSendCommand } from './commands/send.js';
import { registerSenderCommand } from './commands/sender.js';
import { registerSimulatorCommand } from './commands/simulator.js';
import { registerTailCommand } from './commands/tail.js';
import { registerTrackerCommand } from './commands/tracker.js';
import { registerWebhooksCommand } from './commands/webhooks.js';
import { isMsgbridgeError } from './platform/errors.js';
import { describeKafkaFailure, isKafkaClientError } from './kafka/failure.js';

/** Exit codes: 0 ok, 1 runtime failure, 2 bad usage or configuration. */
export function buildProgram(): Command {
  const program = new Command('msgbridge')
    .description('Relay between a WhatsApp/SMS messaging provider and Apache Kafka')
    .version('0.1.0')
    .addOption(
      new Option(
        '-c, --config <file>',
        'configuration file overriding config/default.json (or MSGBRIDGE_CONFIG)',
      ).argParser(configFileArgument),
    )
    .showHelpAfterError()
    .exitOverride();
  registerDevCommand(program);
  registerIngressCommand(program);
  registerSenderCommand(program);
  registerTrackerCommand(program);
  registerSimulatorCommand(program);
  registerLoadCommand(program);
  registerKafkaCommand(program);
  registerSendCommand(program);
  registerTailCommand(program);
  registerWebhooksCommand(program);
  registerDlqCommand(program);
  return program;
}

/** An empty --config is a mistake (an unset shell variable, say), never "no file": refused for every command alike. */
function configFileArgument(value: string): string {
  if (value.trim() === '')
    throw new InvalidArgumentError('expected the path of a JSON configuration file, got an empty value');
  return value;
}

export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv);
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.exitCode === 0) return 0;
      return 2;
    }
    if (isMsgbridgeError(err)) {
      process.stderr.write(`msgbridge: ${err.message}\n`);
      return err.code === 'CONFIG_INVALID' ||
        err.code === 'CONFIG_FILE_UNREADABLE' ||
        err.code === 'INVALID_ARGUMENT' ||
        err.code === 'KAFKA_CONNECT_FAILED'
        ? 2
        : 1;
    }
    // A command that talks to Kafka (send, tail, status...) fails in one line naming the cause.
    if (isKafkaClientError(err)) {
      process.stderr.write(`msgbridge: cannot use Kafka: ${describeKafkaFailure(err)}\n`);
      return 2;
    }
    process.stderr.write(`msgbridge: ${(err as Error).stack ?? String(err)}\n`);
    return 1;
  }
}

function invokedDirectly(): boolean {
  const entry = process.argv[1];
  if (entry === undefined) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(entry)).href;
  } catch {
    return false;
  }
}

if (invokedDirectly()) {
  main(process.argv).then((code) => {
    // An action may have set its own exit code (send: 1 failed, 3 timeout); keep it.
    if (code !== 0 || process.exitCode === undefined) process.exitCode = code;
  });
}
