import { errorMessage, MsgbridgeError } from '../platform/errors.js';

/**
 * One line naming why Kafka could not be reached, for either client: the TLS certificate, the
 * client certificate, authentication, authorization or reachability, with the setting to look
 * at. Never a stack trace, never a secret (messages of the clients name neither passwords nor
 * keys).
 */
export function describeKafkaFailure(error: unknown): string {
  // Every cause, wrapped error and aggregated attempt ("initProducerId failed 6 times" holds
  // the authentication failure in its `errors`), breadth first and bounded.
  const chain: unknown[] = [];
  const seen = new Set<unknown>();
  for (let queue: unknown[] = [error]; queue.length > 0 && chain.length < 24;) {
    const e = queue.shift();
    if (!e || seen.has(e)) continue;
    seen.add(e);
    chain.push(e);
    const { cause, originalError, errors } = e as { cause?: unknown; originalError?: unknown; errors?: unknown[] };
    queue = [...queue, cause, originalError, ...(Array.isArray(errors) ? errors.slice(0, 8) : [])];
  }
  const text = chain
    .map(
      (e) =>
        `${(e as { name?: string }).name ?? ''} ${(e as { code?: string }).code ?? ''} ${(e as { type?: string }).type ?? ''} ${errorMessage(e)}`,
    )
    .join(' | ');
  const first = firstLine(error);
  if (
    /SASLAuthentication|SASL_AUTHENTICATION_FAILED|Authentication failed|authentication failed|SaslAuthenticat/i.test(
      text,
    )
  ) {
    return `authentication failed: check KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD (${first})`;
  }
  if (
    /UNABLE_TO_VERIFY_LEAF_SIGNATURE|SELF_SIGNED_CERT_IN_CHAIN|DEPTH_ZERO_SELF_SIGNED_CERT|unable to verify the first certificate|self[- ]signed certificate|unable to get local issuer certificate|CERT_UNTRUSTED/i.test(
      text,
    )
  ) {
    return "the broker's TLS certificate is not trusted: set KAFKA_SSL_CA_FILE to the CA that signed it";
  }
  if (/ERR_TLS_CERT_ALTNAME_INVALID|Hostname\/IP does not match/i.test(text)) {
    return "the broker's TLS certificate does not name the address used to reach it (KAFKA_BROKERS)";
  }
  if (/CERT_HAS_EXPIRED|certificate has expired/i.test(text)) return "the broker's TLS certificate has expired";
  if (
    /certificate required|alert number 116|SSLV3_ALERT_BAD_CERTIFICATE|bad certificate|alert handshake failure/i.test(
      text,
    )
  ) {
    return 'the broker refused the TLS handshake: it requires a client certificate (set KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE) or refused the one given';
  }
  if (/wrong version number|WRONG_VERSION_NUMBER|packet length too long|EPROTO/i.test(text)) {
    return 'TLS is not spoken on that port: check KAFKA_SSL and the listener KAFKA_BROKERS points at';
  }
  if (/TOPIC_AUTHORIZATION_FAILED|Not authorized to access topics|TopicAuthorization/i.test(text)) {
    return `not authorized on the relay's topics: grant the principal Describe, Read and Write on them (${first})`;
  }
  if (
    /CLUSTER_AUTHORIZATION_FAILED|GROUP_AUTHORIZATION_FAILED|TRANSACTIONAL_ID_AUTHORIZATION_FAILED|authoriz/i.test(text)
  ) {
    return `not authorized: the cluster's ACLs refuse this principal (${first})`;
  }
  if (
    /ECONNREFUSED|ENOTFOUND|EHOSTUNREACH|ENETUNREACH|EAI_AGAIN|ETIMEDOUT|Connection timeout|timed out|ECONNRESET|Closed connection|Connection error/i.test(
      text,
    )
  ) {
    return `unreachable: no broker answered (${first})`;
  }
  return first;
}

/**
 * One line for a log field or an error message while running (the transactional engine's
 * tasks, its group): the error's name, its protocol error type and the first line of its
 * message, never a stack. Unlike describeKafkaFailure it does not translate the cause into the
 * setting to look at: a running member's errors are protocol answers (INVALID_PRODUCER_EPOCH,
 * REBALANCE_IN_PROGRESS...) whose type is the fact worth logging.
 */
export function describeKafkaError(error: unknown): string {
  const e = error as { name?: string; type?: string };
  return [e?.name && e.name !== 'Error' ? e.name : undefined, e?.type, firstLine(error)].filter(Boolean).join(': ');
}

/** The first line of an error's message, at most 300 characters. */
function firstLine(error: unknown): string {
  return errorMessage(error).split('\n')[0]!.slice(0, 300);
}

/** Runs a start-up step that talks to Kafka; a failure becomes one line naming the cause (exit 2 from the CLI). */
export async function connectingToKafka<T>(brokers: readonly string[], step: () => Promise<T>): Promise<T> {
  try {
    return await step();
  } catch (error) {
    if (error instanceof MsgbridgeError && error.code !== 'KAFKA_UNAVAILABLE') throw error;
    throw new MsgbridgeError(
      'KAFKA_CONNECT_FAILED',
      `cannot use Kafka at ${brokers.join(',')}: ${describeKafkaFailure(error)}`,
      { cause: error },
    );
  }
}

/** An error thrown by either Kafka client (not by the relay): the CLI turns it into one line. */
export function isKafkaClientError(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 6; depth++) {
    const { name, code } = e as { name?: string; code?: string };
    if (
      (typeof name === 'string' && name.startsWith('KafkaJS')) ||
      (typeof code === 'string' && code.startsWith('PLT_KFK_'))
    )
      return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}
