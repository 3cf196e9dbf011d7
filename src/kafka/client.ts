import { Kafka, logLevel, type KafkaConfig as KafkajsConfig, type LogEntry, type SASLOptions } from 'kafkajs';
import type { KafkaConfig } from '../config/schema.js';
import type { Logger } from '../platform/logger.js';
import { tlsOptions } from './tls.js';

/**
 * The one place that knows how to build a kafkajs client from configuration
 * (brokers, client id, TLS, SASL). Everything else talks to the ports in port.ts.
 */
export function createKafka(config: KafkaConfig, options: { logger?: Logger; clientId?: string; brokers?: string[] } = {}): Kafka {
  const brokers = options.brokers ?? config.brokers;
  if (brokers.length === 0) throw new Error('createKafka needs at least one broker (start the local broker first)');
  const kafkaConfig: KafkajsConfig = {
    clientId: options.clientId ?? config.clientId,
    brokers,
    connectionTimeout: config.connectionTimeoutMs,
    requestTimeout: config.requestTimeoutMs,
    ssl: tlsOptions(config.ssl) ?? false,
    retry: { initialRetryTime: 100, maxRetryTime: 2000, retries: 5 },
    logLevel: logLevel.WARN,
    logCreator: kafkajsLogCreator(options.logger),
  };
  if (config.sasl) {
    kafkaConfig.sasl = { mechanism: config.sasl.mechanism, username: config.sasl.username, password: config.sasl.password } as SASLOptions;
  }
  return new Kafka(kafkaConfig);
}

function kafkajsLogCreator(logger?: Logger) {
  return () =>
    ({ level, log }: LogEntry) => {
      if (!logger) return;
      const { message, ...extra } = log;
      const fields = { component: 'kafkajs', ...pickSafe(extra) };
      if (isExpectedNoise(message, extra.error)) logger.debug(fields, message);
      else if (level === logLevel.ERROR) logger.error(fields, message);
      else if (level === logLevel.WARN) logger.warn(fields, message);
      else if (level === logLevel.INFO) logger.info(fields, message);
      else logger.debug(fields, message);
    };
}

/**
 * kafkajs logs, at error level, conditions it retries by itself (a coordinator still loading
 * after a broker start, metadata not yet propagated after a topic was created) and warns about
 * settings we chose on purpose. They go to debug so that real errors stand out.
 */
const EXPECTED = [
  /coordinator is (loading|not available)|not the correct coordinator/i,
  /does not host this topic-partition/i,
  /leader (is )?not available|There is no leader for this topic-partition/i,
  // Metadata not yet current after a leader election (fresh topics at start): refreshed and retried.
  /not the leader for that topic-partition/i,
  // Transactions (tracker): the previous one still being closed, retried; a fenced zombie, handled by the engine.
  /concurrent operation on the same transaction/i,
  /operation with an old epoch|newer producer with the same transactionalId/i,
  /^Limiting retries for the idempotent producer/,
  /switched default partitioner/,
];

function isExpectedNoise(message: string, error: unknown): boolean {
  return EXPECTED.some((re) => re.test(message) || (typeof error === 'string' && re.test(error)));
}

/** kafkajs log extras can carry SASL settings in nested config; keep only plain facts. */
function pickSafe(extra: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of ['broker', 'clientId', 'groupId', 'topic', 'partition', 'error', 'retryCount', 'retryTime', 'memberId', 'stack']) {
    if (extra[key] !== undefined) out[key] = extra[key];
  }
  return out;
}
