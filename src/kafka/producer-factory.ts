import type { KafkaConfig } from '../config/schema.js';
import type { Logger } from '../platform/logger.js';
import { createKafka, type KafkaPort } from './client.js';
import { createKafkajsProducer } from './kafkajs-producer.js';
import { preferBrokers, type ProducerFactory } from './port.js';

/**
 * The producers a role's batching publisher makes, one per lane, with the client `kafka.client`
 * names: each new one asks `first` (the brokers that answer) before the configured ones.
 * @platformatic/kafka encodes a batch at a fraction of kafkajs's CPU and weighs about 45 MiB of
 * memory once loaded: it is imported only when chosen (docs/benchmarks.md).
 */
export async function createProducerFactory(
  config: KafkaConfig,
  { kafka, brokers, logger }: { kafka: KafkaPort; brokers: string[]; logger: Logger },
): Promise<ProducerFactory> {
  const timeoutMs = config.requestTimeoutMs;
  if (config.client === 'platformatic') {
    const { createPlatformaticProducer } = await import('./platformatic-producer.js');
    return (first) => createPlatformaticProducer(config, { brokers: preferBrokers(brokers, first), timeoutMs });
  }
  return (first) =>
    createKafkajsProducer(
      first?.length ? createKafka(config, { logger, brokers: preferBrokers(brokers, first) }) : kafka,
      { idempotent: true, timeoutMs },
    );
}
