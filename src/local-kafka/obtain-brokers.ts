import type { Config } from '../config/schema.js';
import type { Logger } from '../platform/logger.js';
import { MsgbridgeError } from '../platform/errors.js';
import { startLocalBroker, type LocalBroker } from './local-broker.js';

export interface Brokers {
  brokers: string[];
  /** The embedded broker this process started, if any. */
  local?: LocalBroker;
}

/**
 * The configured brokers, or an embedded local broker when none are configured: one that keeps
 * its data in `keepDir` between runs when given (`msgbridge dev`), or a throw-away one when
 * another process holds that directory.
 */
export async function obtainBrokers(config: Config, logger: Logger, keepDir?: string): Promise<Brokers> {
  if (config.kafka.brokers.length > 0) return { brokers: config.kafka.brokers };
  logger.info('no KAFKA_BROKERS configured: starting the embedded local Kafka broker');
  const options = {
    cacheDir: config.localKafka.cacheDir,
    heapMb: config.localKafka.heapMb,
    partitions: config.localKafka.partitions,
    startTimeoutMs: config.localKafka.startTimeoutMs,
    onProgress: (line: string) => logger.info(line),
  };
  let local: LocalBroker;
  try {
    local = await startLocalBroker(keepDir === undefined ? options : { ...options, keepDir });
  } catch (err) {
    if (!(err instanceof MsgbridgeError && err.code === 'LOCAL_BROKER_BUSY')) throw err;
    logger.warn(`${err.message}: this run's embedded Kafka keeps nothing`);
    local = await startLocalBroker(options);
  }
  logger.info({ bootstrap: local.bootstrap, startupMs: local.startupMs }, 'embedded Kafka broker ready');
  return { brokers: [local.bootstrap], local };
}
