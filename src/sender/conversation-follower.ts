import { randomUUID } from 'node:crypto';
import type { Consumer, Kafka } from 'kafkajs';
import { MsgbridgeError } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';
import { partitionEnds } from '../kafka/changelog-reader.js';
import { conversationEntry, type ConversationTable } from './conversation-table.js';

/**
 * The Kafka side of the conversation table (README "Conversation window"): one consumer reads
 * the compacted `conversations` topic from its beginning (read_committed, a private group) and
 * never stops. The table is complete once every partition reached the high watermark it had
 * when the read began (the same end as the tracker's restore, changelog-restore.ts); the same
 * consumer then keeps following, so there is no gap between the full read and the follow.
 */
export interface ConversationFollowerOptions {
  kafka: Kafka;
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
  const { kafka, topic, table, logger } = options;
  const started = Date.now();
  let consumer: Consumer | undefined;
  let stage = `waiting for topic ${topic} (written by the tracker)`;
  let records = 0;
  let skipped = 0;
  let loadedDone = false;
  let timer: NodeJS.Timeout | undefined;
  /** Set once the load ended (done, failed, timed out or stopped). */
  let over = false;
  let finish: (error?: Error) => void = () => {};
  const finished = new Promise<void>((resolve, reject) => {
    finish = (error) => {
      if (over) return;
      over = true;
      clearTimeout(timer);
      if (error) reject(error);
      else resolve();
    };
  });
  // Awaited below; this keeps a rejection while nothing awaits it yet from being reported as unhandled.
  finished.catch(() => undefined);

  const skip = (reason: string) => {
    skipped += 1;
    options.onSkipped?.(reason);
    // One line for the first, then one per thousand: a topic full of foreign records must not flood the log.
    if (skipped === 1 || skipped % 1000 === 0) logger.warn({ topic, skipped, reason }, 'conversations record skipped: not a conversation window');
  };

  /** Where the partitions still being read are, for the timeout's message. */
  let progress = (): string => '';

  const load = async (): Promise<ConversationLoad> => {
    timer = setTimeout(() => {
      finish(
        new MsgbridgeError(
          'KAFKA_UNAVAILABLE',
          `the conversation table was not ready within sender.conversationTableReadTimeoutMs (${options.timeoutMs} ms): still ${stage}${progress()}. With sender.conversationWindow "reject" the sender consumes no send request before it has read ${topic} to its end: check that the tracker runs (it creates and writes ${topic}) and that Kafka is reachable, raise the timeout for a large topic, or set sender.conversationWindow to "off"`,
        ),
      );
    }, options.timeoutMs);
    await Promise.race([waitForTopic(), finished]);
    const ends = await Promise.race([partitionEnds(kafka, topic), finished.then(() => new Map())]);
    const pending = new Map<number, number>();
    const position = new Map<number, number>();
    for (const [partition, { low, high }] of ends) if (high > low) pending.set(partition, high);
    const total = [...ends.values()].reduce((sum, { low, high }) => sum + (high - low), 0);
    stage = `reading ${topic} to its end (${total} offsets over ${ends.size} partitions)`;
    const reached = (partition: number, next: number) => {
      const end = pending.get(partition);
      if (end === undefined) return;
      position.set(partition, next);
      if (next < end) return;
      pending.delete(partition);
      if (pending.size === 0) finish();
    };
    if (pending.size === 0) finish();
    progress = () => `: ${[...pending].map(([p, end]) => `partition ${p} at ${position.get(p) ?? ends.get(p)?.low ?? 0} of ${end}`).join(', ')}; a partition that does not move is held by a transaction left open on it, or Kafka is slow`;

    consumer = kafka.consumer({
      groupId: `${options.groupIdPrefix}-${randomUUID()}`,
      readUncommitted: false,
      maxWaitTimeInMs: 500,
      maxBytesPerPartition: 4 * 1024 * 1024,
      allowAutoTopicCreation: false,
      retry: { retries: 10, initialRetryTime: 200, maxRetryTime: 5_000 },
    });
    // After every batch, also one kafkajs filtered to nothing (transaction markers, aborted
    // records): the one place the position is known exactly (as in changelog-restore.ts).
    consumer.on(consumer.events.END_BATCH_PROCESS, ({ payload }) => {
      if (payload.topic === topic) reached(payload.partition, Number(payload.lastOffset) + 1);
    });
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      if (payload.restart) {
        logger.error({ err: payload.error.message, topic }, 'the conversations consumer crashed; it restarts');
        return;
      }
      if (!loadedDone) {
        finish(payload.error);
        return;
      }
      table.markIncomplete();
      stage = `no longer following ${topic}: its consumer stopped for good (${payload.error.message.split('\n')[0]})`;
      logger.fatal({ err: payload.error.message, topic }, 'the conversations consumer stopped for good: the table no longer follows the topic, so texts to customers without a known open window are sent as they are');
      options.onFatal?.(payload.error);
    });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    let evictedLogged = 0;
    let evictedLoggedAt = 0;
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        for (const message of batch.messages) {
          records += 1;
          const entry = conversationEntry(message.key ?? null, message.value ?? null);
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
    });
    await finished;
    loadedDone = true;
    table.markComplete();
    stage = `following ${topic}`;
    const report = { records, entries: table.size, durationMs: Date.now() - started };
    logger.debug({ topic, ...report }, 'conversation table complete: every open window of the topic is known; following it from here');
    return report;
  };

  async function waitForTopic(): Promise<void> {
    const admin = kafka.admin();
    await admin.connect();
    try {
      for (let logged = false; !over; logged = true) {
        if ((await admin.listTopics()).includes(topic)) return;
        if (!logged) logger.warn({ topic }, 'waiting for the conversations topic to exist (the tracker creates it) before consuming send requests');
        await Promise.race([new Promise((resolve) => setTimeout(resolve, 1000)), finished.catch(() => undefined)]);
      }
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  }

  const loaded = load().catch(async (error: unknown) => {
    clearTimeout(timer);
    await consumer?.disconnect().catch(() => undefined);
    throw error instanceof MsgbridgeError ? error : new MsgbridgeError('KAFKA_UNAVAILABLE', `reading ${topic} failed: ${((error as Error)?.message ?? String(error)).split('\n')[0]}`, { cause: error });
  });
  // The caller awaits `loaded`; this keeps an unawaited rejection from being reported twice.
  loaded.catch(() => undefined);

  return {
    loaded,
    status: () => stage,
    async stop() {
      finish(new MsgbridgeError('SHUTTING_DOWN', `reading ${topic} was cancelled`));
      clearTimeout(timer);
      await consumer?.disconnect().catch(() => undefined);
    },
  };
}
