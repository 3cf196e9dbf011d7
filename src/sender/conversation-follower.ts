import { MsgbridgeError } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';
import { followChangelog, type ChangelogFollowStatus } from '../kafka/changelog-follower.js';
import type { KafkaPort } from '../kafka/client.js';
import { conversationEntry, type ConversationTable } from './conversation-table.js';

/**
 * The Kafka side of the conversation table (README "Conversation window"): the compacted
 * `conversations` topic read from its beginning (read_committed, a private group) and followed
 * for good by src/kafka/changelog-follower.ts. The table is complete once every partition
 * reached the high watermark it had when the read began (the same end as the tracker's restore,
 * changelog-reader.ts); the same consumer then keeps following, so there is no gap between the
 * full read and the follow. This file gives the records their meaning, the log lines and the
 * texts of readiness and errors.
 */
export interface ConversationFollowerOptions {
  kafka: KafkaPort;
  topic: string;
  table: ConversationTable;
  /** Businesses this sender sends for: records of others are not kept. */
  businesses: ReadonlySet<string>;
  /** The consumer's group is `<prefix>-<uuid>` (ACLs: Read on this prefix). */
  groupIdPrefix: string;
  /** The topic must exist and be read to its end within this, or `loaded` rejects. */
  timeoutMs: number;
  logger: Logger;
  /** A record that is not a conversation window (skipped). */
  onSkipped?: (reason: string) => void;
  /** The consumer stopped for good after the table was complete (the table is marked incomplete). */
  onFatal?: (error: Error) => void;
}

export interface ConversationLoad {
  /** Records read up to the end. */
  records: number;
  /** Open windows kept. */
  entries: number;
  durationMs: number;
}

export interface ConversationFollower {
  /** Resolves once the table is complete; rejects with a clear error when that takes longer than `timeoutMs`. */
  readonly loaded: Promise<ConversationLoad>;
  /** What it is doing, for readiness while `loaded` is pending. */
  status(): string;
  stop(): Promise<void>;
}

/** Starts reading at once; await `loaded` before sending anything that needs the table. */
export function followConversations(options: ConversationFollowerOptions): ConversationFollower {
  const { topic, table, logger } = options;
  let skipped = 0;
  let evictedLogged = 0;
  let evictedLoggedAt = 0;
  let entries = 0;

  const skip = (reason: string) => {
    skipped += 1;
    options.onSkipped?.(reason);
    // One line for the first, then one per thousand: a topic full of foreign records must not flood the log.
    if (skipped === 1 || skipped % 1000 === 0)
      logger.warn({ topic, skipped, reason }, 'conversations record skipped: not a conversation window');
  };

  /** The readiness text of a stage. */
  const describe = (status: ChangelogFollowStatus): string => {
    switch (status.stage) {
      case 'waiting-for-topic':
        return `waiting for topic ${topic} (written by the tracker)`;
      case 'reading':
        return `reading ${topic} to its end (${status.offsets} offsets over ${status.partitions} partitions)`;
      case 'following':
        return `following ${topic}`;
      case 'stopped':
        return `no longer following ${topic}: its consumer stopped for good (${status.error.message.split('\n')[0]})`;
    }
  };

  const changelog = followChangelog({
    kafka: options.kafka,
    topic,
    groupIdPrefix: options.groupIdPrefix,
    timeoutMs: options.timeoutMs,
    logger,
    name: 'conversations',
    maxWaitTimeMs: 500,
    maxBytesPerPartition: 4 * 1024 * 1024,
    onRecords(records) {
      for (const record of records) {
        const entry = conversationEntry(record.key, record.value);
        if ('invalid' in entry) skip(entry.invalid);
        else if (options.businesses.has(entry.businessId)) table.apply(entry);
      }
      const { evictedOpen, evictedUntil } = table.stats();
      // At most a line a minute while the table overflows.
      if (evictedOpen > evictedLogged && Date.now() - evictedLoggedAt >= 60_000) {
        logger.warn(
          { topic, entries: table.size, evictedOpen, unknownUntil: new Date(evictedUntil).toISOString() },
          'conversation table full (sender.conversationTableMaxEntries): open windows were dropped, so texts to customers it does not hold are sent as they are (not refused) until those windows would have closed',
        );
        evictedLogged = evictedOpen;
        evictedLoggedAt = Date.now();
      }
    },
    onWaitingForTopic() {
      logger.warn(
        { topic },
        'waiting for the conversations topic to exist (the tracker creates it) before consuming send requests',
      );
    },
    onCaughtUp({ records, durationMs }) {
      table.markComplete();
      entries = table.size;
      logger.debug(
        { topic, records, entries, durationMs },
        'conversation table complete: every open window of the topic is known; following it from here',
      );
    },
    onStopped(error) {
      table.markIncomplete();
      logger.fatal(
        { err: error.message, topic },
        'the conversations consumer stopped for good: the table no longer follows the topic, so texts to customers without a known open window are sent as they are',
      );
      options.onFatal?.(error);
    },
    timeoutError(status) {
      const progress =
        status.stage === 'reading'
          ? `: ${status.progress}; a partition that does not move is held by a transaction left open on it, or Kafka is slow`
          : '';
      return new MsgbridgeError(
        'KAFKA_UNAVAILABLE',
        `the conversation table was not ready within sender.conversationTableReadTimeoutMs (${options.timeoutMs} ms): still ${describe(status)}${progress}. With sender.conversationWindow "reject" the sender consumes no send request before it has read ${topic} to its end: check that the tracker runs (it creates and writes ${topic}) and that Kafka is reachable, raise the timeout for a large topic, or set sender.conversationWindow to "off"`,
      );
    },
  });

  const loaded = changelog.loaded.then(({ records, durationMs }): ConversationLoad => ({
    records,
    entries,
    durationMs,
  }));
  // The caller awaits `loaded`; this keeps an unawaited rejection from being reported twice.
  loaded.catch(() => undefined);

  return {
    loaded,
    status: () => describe(changelog.status()),
    stop: () => changelog.stop(),
  };
}
