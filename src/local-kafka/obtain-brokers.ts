import type { Config } from '../config/schema.js';
import type { Logger } from '../platform/logger.js';
import { startLocalBroker, type LocalBroker } from './local-broker.js';

export interface Brokers {
  brokers: string[];
  /** The embedded broker this process started, if any. */
  local?: LocalBroker;
}

/** The configured brokers, or an embedded local broker when none are configured. */
export async function obtainBrokers(config: Config, logger: Logger): Promise<Brokers> {
  if (config.kafka.brokers.length > 0) return { brokers: config.kafka.brokers };
  logger.info('no KAFKA_BROKERS configured: starting the embedded local Kafka broker');
  const local = await startLocalBroker({
    cacheDir: config.localKafka.cacheDir,
    heapMb: config.localKafka.heapMb,
    partitions: config.localKafka.partitions,
    startTimeoutMs: config.localKafka.startTimeoutMs,
    onProgress: (line) => logger.info(line),
  });
  logger.info({ bootstrap: local.bootstrap, startupMs: local.startupMs }, 'embedded Kafka broker ready');
  return { brokers: [local.bootstrap], local };
}
