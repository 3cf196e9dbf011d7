import { readFileSync } from 'node:fs';
import type { ConnectionOptions } from 'node:tls';
import type { KafkaConfig } from '../config/schema.js';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';

/**
 * The TLS options of a Kafka connection, for either client: `kafka.ssl` true (the system's
 * CAs), or an object with PEM texts (`ca`, `cert`, `key`) or files (`caFile`, `certFile`,
 * `keyFile`, which is what `KAFKA_SSL_CA_FILE`, `KAFKA_SSL_CERT_FILE`, `KAFKA_SSL_KEY_FILE`
 * set). Files are read here, once per client, so a rotated certificate is picked up by the next
 * client; an unreadable one is a configuration error naming the setting.
 */
export function tlsOptions(ssl: KafkaConfig['ssl']): ConnectionOptions | undefined {
  if (ssl === false) return undefined;
  if (ssl === true) return {};
  const read = (file: string | undefined, setting: string): string | undefined => {
    if (file === undefined) return undefined;
    try {
      return readFileSync(file, 'utf8');
    } catch (err) {
      throw new MsgbridgeError(
        'CONFIG_FILE_UNREADABLE',
        `cannot read kafka.ssl.${setting} (${file}): ${errorMessage(err)}`,
        { cause: err },
      );
    }
  };
  const options: ConnectionOptions = {};
  const ca = ssl.ca ?? read(ssl.caFile, 'caFile');
  const cert = ssl.cert ?? read(ssl.certFile, 'certFile');
  const key = ssl.key ?? read(ssl.keyFile, 'keyFile');
  if (ca !== undefined) options.ca = ca;
  if (cert !== undefined) options.cert = cert;
  if (key !== undefined) options.key = key;
  if (ssl.rejectUnauthorized !== undefined) options.rejectUnauthorized = ssl.rejectUnauthorized;
  return options;
}
