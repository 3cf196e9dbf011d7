import { randomUUID } from 'node:crypto';
import type { Consumer } from 'kafkajs';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';
import { EndOfLog, onBatchEnd, partitionEnds } from './changelog-reader.js';
import { consumedRecord, createConsumer, type KafkaSource, withKafkajsAdmin } from './client.js';
import type { ConsumedRecord } from './group-consumer.js';

/**
 * Read a compacted topic to its end, then keep following it (a Kafka Streams GlobalKTable's
 * consumer): one consumer of a private group reads every partition from its beginning,
 * read_committed; the read is complete once each partition reached the high watermark it had
 * when the read began (the end of readChangelog, changelog-reader.ts), and the same consumer
 * then goes on, so there is no gap between the full read and the follow. It waits for the topic
 * to exist first. Generic: what the records mean is the caller's (the sender's conversation
 * table, src/sender/conversation-follower.ts).
 */
export interface ChangelogFollowerOptions {
  kafka: KafkaSource;
  topic: string;
  /** The consumer's group is `<prefix>-<uuid>` (ACLs: Read on this prefix). */
  groupIdPrefix: string;
  /** The topic must exist and be read to its end within this, or `loaded` rejects. */
  timeoutMs: number;
  logger: Logger;
  /**
   * Names the records in the follower's own log lines: `the <name> consumer crashed; it restarts` (default: the topic).
   */
  name?: string;
  /**
   * Every record of one fetched batch of a partition, in offset order: during the read and
   * while following. A throw is the caller's bug: kafkajs retries the batch.
   */
  onRecords(records: ConsumedRecord[]): void;
  /** Called once, when the topic was first found missing (it is then asked again every second). */
  onWaitingForTopic?(): void;
  /**
   * Every partition reached its end: called synchronously when the read completes, before
   * `loaded` resolves and before any later stop can be reported (`onStopped` only comes after).
   */
  onCaughtUp?(load: ChangelogLoad): void;
  /** The consumer stopped for good after the read was complete (kafkajs will not restart it). */
  onStopped?(error: Error): void;
  /** The error `loaded` rejects with past `timeoutMs` (default: KAFKA_UNAVAILABLE naming where the read stood). */
  timeoutError?(status: ChangelogFollowStatus): Error;
  /** Longest a fetch waits for data (default 500 ms). */
  maxWaitTimeMs?: number;
  /** Default 4 MiB. */
  maxBytesPerPartition?: number;
}

export type ChangelogFollowStatus =
  | { stage: 'waiting-for-topic' }
  | {
      stage: 'reading';
      /** Offsets between each partition's log start and its end, summed. */
      offsets: number;
      partitions: number;
      /** `partition 0 at 12 of 40, ...`: the partitions not yet at their end. */
      progress: string;
    }
  | { stage: 'following' }
  /** Stopped for good after the read was complete. */
  | { stage: 'stopped'; error: Error };

export interface ChangelogLoad {
  /** Records handed to onRecords up to the end (and any that came with the last batches). */
  records: number;
  durationMs: number;
}

export interface ChangelogFollower {
  /**
   * Resolves once every partition was read to its end; rejects past `timeoutMs`, when the
   * consumer stops for good first, or on stop() (SHUTTING_DOWN), always with a MsgbridgeError.
   */
  readonly loaded: Promise<ChangelogLoad>;
  /** Where it stands. A read that failed or was stopped keeps the stage it had reached. */
  status(): ChangelogFollowStatus;
  stop(): Promise<void>;
}

/** Starts at once; await `loaded` before relying on having read everything. */
export function followChangelog(options: ChangelogFollowerOptions): ChangelogFollower {
  const { kafka, topic, logger } = options;
  const name = options.name ?? topic;
  const started = Date.now();
  let consumer: Consumer | undefined;
  let status: ChangelogFollowStatus = { stage: 'waiting-for-topic' };
  /** Where the partitions still being read are, once their ends are known. */
  let tracker: EndOfLog | undefined;
  let records = 0;
  let caughtUp = false;
  let timer: NodeJS.Timeout | undefined;
  /** Set once the read ended (done, failed, timed out or stopped). */
  let over = false;
  let finish: (error?: Error) => void = () => {};
  /** Stops asking for the partitions' ends once the read is over. */
  const ended = new AbortController();
  const finished = new Promise<void>((resolve, reject) => {
    finish = (error) => {
      if (over) return;
      over = true;
      ended.abort();
      clearTimeout(timer);
      if (error) reject(error);
      else resolve();
    };
  });
  // Awaited below; this keeps a rejection while nothing awaits it yet from being reported as unhandled.
  finished.catch(() => undefined);

  const currentStatus = (): ChangelogFollowStatus =>
    status.stage === 'reading' && tracker ? { ...status, progress: tracker.describe() } : status;

  const timeoutError = (current: ChangelogFollowStatus): Error =>
    options.timeoutError?.(current) ??
    new MsgbridgeError(
      'KAFKA_UNAVAILABLE',
      current.stage === 'waiting-for-topic'
        ? `topic ${topic} did not exist within ${options.timeoutMs} ms`
        : `reading ${topic} did not reach its end within ${options.timeoutMs} ms${current.stage === 'reading' ? ` (${current.progress})` : ''}: Kafka is slow or unreachable, or another producer holds a transaction open on it`,
    );

  const load = async (): Promise<ChangelogLoad> => {
    timer = setTimeout(() => finish(timeoutError(currentStatus())), options.timeoutMs);
    await Promise.race([waitForTopic(), finished]);
    const ends = await Promise.race([
      partitionEnds(kafka, topic, { signal: ended.signal }),
      finished.then(() => new Map()),
    ]);
    const ofLog = new EndOfLog(ends);
    for (const [partition, { low }] of ends) ofLog.expect(partition, low);
    const offsets = [...ends.values()].reduce((sum, { low, high }) => sum + (high - low), 0);
    status = { stage: 'reading', offsets, partitions: ends.size, progress: '' };
    tracker = ofLog;
    if (ofLog.done) finish();

    consumer = createConsumer(kafka, {
      groupId: `${options.groupIdPrefix}-${randomUUID()}`,
      maxWaitTimeInMs: options.maxWaitTimeMs ?? 500,
      maxBytesPerPartition: options.maxBytesPerPartition ?? 4 * 1024 * 1024,
    });
    onBatchEnd(consumer, topic, (partition, next) => {
      if (ofLog.reached(partition, next) && ofLog.done) finish();
    });
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      if (payload.restart) {
        logger.warn({ err: payload.error.message, topic }, `the ${name} consumer crashed; it restarts`);
        return;
      }
      if (!caughtUp) {
        finish(payload.error);
        return;
      }
      status = { stage: 'stopped', error: payload.error };
      options.onStopped?.(payload.error);
    });
    await consumer.connect();
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    await consumer.run({
      autoCommit: false,
      eachBatch: async ({ batch }) => {
        const batchRecords = batch.messages.map((m) => consumedRecord(topic, batch.partition, m));
        records += batchRecords.length;
        options.onRecords(batchRecords);
      },
    });
    await finished;
    caughtUp = true;
    status = { stage: 'following' };
    const result = { records, durationMs: Date.now() - started };
    options.onCaughtUp?.(result);
    return result;
  };

  async function waitForTopic(): Promise<void> {
    await withKafkajsAdmin(kafka, async (admin) => {
      for (let told = false; !over; told = true) {
        if ((await admin.listTopics()).includes(topic)) return;
        if (!told) options.onWaitingForTopic?.();
        await Promise.race([new Promise((resolve) => setTimeout(resolve, 1000)), finished.catch(() => undefined)]);
      }
    });
  }

  const loaded = load().catch(async (error: unknown) => {
    clearTimeout(timer);
    await consumer?.disconnect().catch(() => undefined);
    throw error instanceof MsgbridgeError
      ? error
      : new MsgbridgeError('KAFKA_UNAVAILABLE', `reading ${topic} failed: ${errorMessage(error).split('\n')[0]}`, {
          cause: error,
        });
  });
  // The caller awaits `loaded`; this keeps an unawaited rejection from being reported twice.
  loaded.catch(() => undefined);

  return {
    loaded,
    status: currentStatus,
    async stop() {
      finish(new MsgbridgeError('SHUTTING_DOWN', `reading ${topic} was cancelled`));
      clearTimeout(timer);
      await consumer?.disconnect().catch(() => undefined);
    },
  };
}
