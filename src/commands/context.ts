import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { Command } from 'commander';
import { loadConfig } from '../config/load.js';
import type { Config } from '../config/schema.js';
import { MsgbridgeError } from '../platform/errors.js';
import { defaultCacheDir } from '../local-kafka/local-broker.js';

/** The configuration, honouring the global --config option (which the CLI refuses when empty). */
export function commandConfig(command: Command): Config {
  const configFile = command.optsWithGlobals<{ config?: string }>().config;
  return loadConfig(configFile === undefined ? {} : { configFile });
}

/** What `msgbridge dev` leaves behind so that operator commands find its embedded Kafka. */
export interface DevState {
  pid: number;
  brokers: string[];
  ingressUrl: string;
  simulatorUrl: string;
  startedAt: string;
}

export function devStatePath(config: Config): string {
  return join(config.localKafka.cacheDir ?? defaultCacheDir(), 'dev-state.json');
}

export function writeDevState(config: Config, state: DevState): () => void {
  const path = devStatePath(config);
  mkdirSync(dirname(path), { recursive: true });
  writeFileSync(path, JSON.stringify(state, null, 2));
  return () => rmSync(path, { force: true });
}

export function readDevState(config: Config): DevState | undefined {
  const path = devStatePath(config);
  if (!existsSync(path)) return undefined;
  try {
    const state = JSON.parse(readFileSync(path, 'utf8')) as DevState;
    process.kill(state.pid, 0);
    return state;
  } catch {
    return undefined;
  }
}

/**
 * Brokers for operator commands (send, tail): KAFKA_BROKERS / config, else the embedded
 * Kafka of a running `msgbridge dev`. These commands never start a broker of their own:
 * a fresh one would hold none of the records they are about.
 */
export function operatorBrokers(config: Config): string[] {
  if (config.kafka.brokers.length > 0) return config.kafka.brokers;
  const dev = readDevState(config);
  if (dev) return dev.brokers;
  throw new MsgbridgeError(
    'INVALID_ARGUMENT',
    'no Kafka to talk to: set KAFKA_BROKERS (or kafka.brokers in the config), or start `msgbridge dev` first',
  );
}
