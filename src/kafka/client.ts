import './kafkajs-send-fix.js'; // first: kafkajs's producers must load with their send fixed
import {
  Kafka,
  logLevel,
  type Admin,
  type Consumer,
  type ConsumerConfig,
  type KafkaConfig as KafkajsConfig,
  type KafkaMessage,
  type LogEntry,
  type SASLOptions,
} from 'kafkajs';
import type { KafkaConfig } from '../config/schema.js';
import type { Logger } from '../platform/logger.js';
import type { ConsumedRecord } from './group-consumer.js';
import './kafkajs-idle-fix.js';
import './kafkajs-failover-fix.js';
import { tlsOptions } from './tls.js';

/**
 * The one place that knows how to build a kafkajs client from configuration
 * (brokers, client id, TLS, SASL). Everything else talks to the ports (port.ts, admin.ts,
 * group-consumer.ts, topic-subscription.ts) over a `KafkaPort`.
 */
/**
 * What a client is built from: the connection settings of `kafka` (the producer client of `msgbridge/client/kafka` has
 * no more).
 */
export type KafkaConnectionConfig = Pick<
  KafkaConfig,
  'brokers' | 'clientId' | 'connectionTimeoutMs' | 'requestTimeoutMs' | 'ssl' | 'sasl'
>;

/**
 * The relay's way to one cluster (brokers, client id, TLS, SASL), as the roles and commands
 * hold it and hand it on to src/kafka: opaque outside this folder, whose adapters alone reach
 * the client behind it (`kafkajsClient`). What can be done with it is src/kafka's: `withAdmin`
 * (admin.ts), `subscribeTopics` (topic-subscription.ts), the group consumer, the producers and
 * the changelog readers.
 */
export interface KafkaPort {
  readonly [portBrand]: true;
}
declare const portBrand: unique symbol;

/**
 * What src/kafka's functions take: a port, or a kafkajs client that a test or a benchmark
 * built itself (they may use kafkajs as an independent client; the roles never do).
 */
export type KafkaSource = KafkaPort | Kafka;

const kafkajsClients = new WeakMap<KafkaPort, Kafka>();

/** The port to the cluster the relay's configuration describes. */
export function createKafka(
  config: KafkaConnectionConfig,
  options: { logger?: Logger; clientId?: string; brokers?: string[] } = {},
): KafkaPort {
  return kafkaPort(createKafkajsClient(config, options));
}

/** A port over a kafkajs client already built. */
function kafkaPort(client: Kafka): KafkaPort {
  const port = Object.freeze({}) as KafkaPort;
  kafkajsClients.set(port, client);
  return port;
}

/** The kafkajs client behind a port: for src/kafka's adapters only (the lint rule keeps it there). */
export function kafkajsClient(source: KafkaSource): Kafka {
  // A port's client, or the source itself: a test's or benchmark's own kafkajs client (no instanceof: a second copy of
  // kafkajs would fail it).
  return kafkajsClients.get(source as KafkaPort) ?? (source as Kafka);
}

/** The kafkajs client built from configuration (`createKafka` wraps it in a port). */
export function createKafkajsClient(
  config: KafkaConnectionConfig,
  options: { logger?: Logger; clientId?: string; brokers?: string[] } = {},
): Kafka {
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
    kafkaConfig.sasl = {
      mechanism: config.sasl.mechanism,
      username: config.sasl.username,
      password: config.sasl.password,
    } as SASLOptions;
  }
  return new Kafka(kafkaConfig);
}

/**
 * Runs `use` on a connected kafkajs admin client and disconnects it whatever happens. A failed
 * disconnect is not the caller's failure: its answer (or its error) stands. Outside src/kafka,
 * `withAdmin` (admin.ts) offers the port's operations instead.
 */
export async function withKafkajsAdmin<T>(kafka: KafkaSource, use: (admin: Admin) => Promise<T>): Promise<T> {
  const admin = kafkajsClient(kafka).admin();
  await admin.connect();
  try {
    return await use(admin);
  } finally {
    await admin.disconnect().catch(() => undefined);
  }
}

/**
 * The one retry policy of every consumer of the relay. kafkajs uses a consumer's `retry` for
 * its group runner only (join, sync, fetch, offset commits; broker requests retry with the
 * client's policy above): a retriable failure is retried in place this long (about 40 s:
 * 300 ms doubling up to 10 s, 8 times), then the consumer crashes and kafkajs restarts it
 * (CRASH with `restart: true`); a failure that is not retriable stops it at once, whatever the
 * policy. The two long-lived group members (the send-requests consumer, the transactional
 * engine) already had this one. A lost broker or coordinator no longer reaches this retry at
 * all (kafkajs-failover-fix.ts: README "Losing a broker"); it is for what is left.
 * The readers of changelogs and the CLI's follow had shorter ones (5 or 10 retries, up to
 * 5 s), which only made them restart sooner; each has its own deadline (the read's timeout,
 * the command's `--timeout`), so the longer budget can never make them wait longer.
 */
export const CONSUMER_RETRY = Object.freeze({ retries: 8, initialRetryTime: 300, maxRetryTime: 10_000 });

export type ConsumerOptions = Omit<ConsumerConfig, 'retry'>;

/**
 * Every kafkajs consumer of the relay is built here: the retry policy above, topics never
 * created by a subscription (`allowAutoTopicCreation: false`; the relay creates its topics with
 * their settings, see topics.ts), read_committed unless `readUncommitted` says otherwise.
 */
export function createConsumer(kafka: KafkaSource, options: ConsumerOptions): Consumer {
  return kafkajsClient(kafka).consumer({
    allowAutoTopicCreation: false,
    readUncommitted: false,
    ...options,
    retry: { ...CONSUMER_RETRY },
  });
}

/** A fetched kafkajs message as the port's record (group-consumer.ts). */
export function consumedRecord(topic: string, partition: number, message: KafkaMessage): ConsumedRecord {
  return {
    topic,
    partition,
    offset: message.offset,
    timestamp: message.timestamp,
    key: message.key ?? null,
    value: message.value ?? null,
    headers: (message.headers ?? {}) as ConsumedRecord['headers'],
  };
}

function kafkajsLogCreator(logger?: Logger) {
  const transient = new TransientBrokerErrors();
  return () =>
    ({ level, log }: LogEntry) => {
      if (!logger) return;
      const { message, ...extra } = log;
      // A key the logger already binds (a role's `component`, an engine's `groupId`) would appear twice in the line.
      const bound = logger.bindings();
      const fields: Record<string, unknown> = {};
      for (const [key, value] of Object.entries({ component: 'kafkajs', ...pickSafe(extra) }))
        if (!(key in bound)) fields[key] = value;
      if ('component' in bound) fields.library = 'kafkajs';
      if (isExpectedNoise(message, extra.error)) logger.debug(fields, message);
      // kafkajs restarting a consumer after a retriable crash: the member's crash handler has
      // logged the crash with its cause; the restart is recovery, not a second failure.
      else if (level === logLevel.ERROR && RESTARTING.test(message)) logger.warn(fields, message);
      else if ((level === logLevel.ERROR || level === logLevel.WARN) && isTransientBrokerError(message, extra.error)) {
        const broker = typeof extra.broker === 'string' ? extra.broker : undefined;
        delete fields.stack;
        if (transient.firstIn(broker ?? '', Date.now())) {
          logger.warn(
            { ...fields, cause: transientCause(message, extra.error) },
            `${broker ? `Kafka broker ${broker}` : 'A Kafka broker'} does not answer: retrying, and following partition leaders and the group coordinator elsewhere (repeats for ${TRANSIENT_LOG_EVERY_MS / 1000} s at debug level)`,
          );
        } else logger.debug(fields, message);
      } else if (level === logLevel.ERROR) logger.error(fields, message);
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
  // A rebalance: the heartbeat's answer and a commit of the ended generation; the member logs
  // the rebalance itself at info, and commits again once it rejoined.
  /The group is rebalancing/,
  /Specified group generation id is not valid/,
  /^Limiting retries for the idempotent producer/,
  /switched default partitioner/,
];

const RESTARTING = /^Restarting the consumer in \d+ms$/;

/**
 * A broker that is down or frozen makes kafkajs log an error for every connection attempt and
 * every timed-out request, several a second per client, while the consumer (see
 * kafkajs-failover-fix.ts) and the producers ride it out. One warning per broker every half
 * minute says what is happening; the repeats go to debug.
 */
const TRANSIENT =
  /ECONNREFUSED|ECONNRESET|EPIPE|ETIMEDOUT|EHOSTUNREACH|Connection error|Connection timeout|Connection closed|request timed out|write after end/i;
const TRANSIENT_LOG_EVERY_MS = 30_000;

export function isTransientBrokerError(message: string, error: unknown): boolean {
  return TRANSIENT.test(message) || (typeof error === 'string' && TRANSIENT.test(error));
}

function transientCause(message: string, error: unknown): string {
  const text = typeof error === 'string' && error.length > 0 ? error : message;
  return text.length > 200 ? `${text.slice(0, 200)}…` : text;
}

/** When each broker's last warning was logged; bounded by the brokers a client talks to. */
class TransientBrokerErrors {
  private readonly lastWarned = new Map<string, number>();
  firstIn(broker: string, now: number): boolean {
    const last = this.lastWarned.get(broker);
    if (last !== undefined && now - last < TRANSIENT_LOG_EVERY_MS) return false;
    if (this.lastWarned.size >= 1000) this.lastWarned.clear();
    this.lastWarned.set(broker, now);
    return true;
  }
}

function isExpectedNoise(message: string, error: unknown): boolean {
  return EXPECTED.some((re) => re.test(message) || (typeof error === 'string' && re.test(error)));
}

/** kafkajs log extras can carry SASL settings in nested config; keep only plain facts. */
function pickSafe(extra: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of [
    'broker',
    'clientId',
    'groupId',
    'topic',
    'partition',
    'error',
    'retryCount',
    'retryTime',
    'memberId',
    'stack',
  ]) {
    if (extra[key] !== undefined) out[key] = extra[key];
  }
  return out;
}
