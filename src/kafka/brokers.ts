import { MsgbridgeError } from '../platform/errors.js';

/** The one check every role makes before it connects: some broker to talk to. */
export function requireBrokers(brokers: readonly string[]): void {
  if (brokers.length === 0)
    throw new MsgbridgeError('CONFIG_INVALID', 'kafka.brokers: no Kafka brokers (set KAFKA_BROKERS)');
}
