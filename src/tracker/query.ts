import type { KafkaPort } from '../kafka/client.js';
import { javaCompatibleHash } from '../kafka/partitioner.js';
import { readChangelog } from '../kafka/changelog-reader.js';
import { messageStateSchema, type TrackedMessage } from '../contracts/message-state.js';

/**
 * Answers "what is the state of this message / request" from `message-state` itself, for
 * `msgbridge status` when no tracker is given to ask (the tracker answers from its stores). A message id names one
 * partition (its key hash); a request id is not a key, so every partition is read and values are filtered by it. Reads
 * are read_committed and bounded by `timeoutMs`.
 */
export interface StateQueryOptions {
  kafka: KafkaPort;
  topic: string;
  /** Partition count of the topic. */
  partitions: number;
  timeoutMs: number;
  /** Called with the number of records read so far, at most once a second (long reads). */
  onProgress?(records: number): void;
}

/** Counts the records a read goes through and reports it at most once a second. */
function progress(options: StateQueryOptions): { seen(): void; done(): void } {
  let records = 0;
  const timer = options.onProgress ? setInterval(() => options.onProgress?.(records), 1000) : undefined;
  return {
    seen: () => void records++,
    done: () => clearInterval(timer),
  };
}

function parse(value: Buffer | null): TrackedMessage | undefined {
  if (value === null) return undefined;
  try {
    return messageStateSchema.parse(JSON.parse(value.toString()));
  } catch {
    return undefined;
  }
}

export async function findMessageState(
  options: StateQueryOptions,
  messageId: string,
): Promise<TrackedMessage | undefined> {
  let latest: TrackedMessage | undefined;
  const read = progress(options);
  await readChangelog({
    kafka: options.kafka,
    topic: options.topic,
    partitions: [javaCompatibleHash(Buffer.from(messageId)) % options.partitions],
    timeoutMs: options.timeoutMs,
    filter: (record) => (read.seen(), record.key?.toString() === messageId),
    // Offsets grow within the partition: the last record of the key is its current state (or a tombstone).
    onRecord: (record) => (latest = parse(record.value)),
  }).finally(() => read.done());
  return latest;
}

/** The latest-updated message of a request (a resend after `maybeSent` may have created two). */
export async function findRequestState(
  options: StateQueryOptions,
  requestId: string,
): Promise<TrackedMessage | undefined> {
  const byMessage = new Map<string, TrackedMessage | undefined>();
  const needle = Buffer.from(JSON.stringify(requestId));
  const read = progress(options);
  await readChangelog({
    kafka: options.kafka,
    topic: options.topic,
    timeoutMs: options.timeoutMs,
    filter: (record) => (read.seen(), record.value === null || record.value.includes(needle)),
    onRecord: (record) => {
      const key = record.key?.toString();
      if (key === undefined) return;
      const state = parse(record.value);
      if (record.value === null) byMessage.delete(key);
      else if (state?.requestId === requestId) byMessage.set(key, state);
    },
  }).finally(() => read.done());
  return [...byMessage.values()]
    .filter((s): s is TrackedMessage => s !== undefined)
    .sort((a, b) => b.updatedAt.localeCompare(a.updatedAt))[0];
}
