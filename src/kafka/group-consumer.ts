/**
 * The small surface a consumer-group member needs, next to RecordProducer in port.ts:
 * batches per partition with explicit offset resolution (the fetch position), assignment
 * notifications, explicit commits with metadata and no hidden retries, and pausing for a
 * drain. kafkajs implements it (kafkajs-group-consumer.ts).
 */
export interface ConsumedRecord {
  topic: string;
  partition: number;
  offset: string;
  /** Record timestamp, ms since the epoch, as Kafka stores it. */
  timestamp: string;
  key: Buffer | null;
  value: Buffer | null;
  headers: Record<string, string | Buffer | (string | Buffer)[] | undefined>;
}

/**
 * Thrown by `BatchControl.heartbeat` when the group is rebalancing and this member will
 * rejoin (the adapter translates its client's errors): the handler should return at once.
 */
export class RejoinNeededError extends Error {
  override readonly name = 'RejoinNeededError';
}

/** Thrown by `commit` when the broker refuses the commit metadata (offset.metadata.max.bytes). */
export class CommitMetadataTooLargeError extends Error {
  override readonly name = 'CommitMetadataTooLargeError';
}

export interface BatchControl {
  /** Marks a record as taken: the next fetch of this partition starts after it. */
  resolveOffset(offset: string): void;
  /** Keeps the group membership alive during a long wait; throws (RejoinNeededError when a rebalance started). */
  heartbeat(): Promise<void>;
  /** False once the consumer stops or the batch went stale: return without taking more. */
  isActive(): boolean;
}

export interface GroupConsumerHandlers {
  /**
   * After every (re)join: the partitions of the topic this member now owns, and the member id
   * (a new id means a new membership). Called before any batch of that generation.
   */
  onAssignment(partitions: number[], memberId: string): void;
  /** One partition's batch. Records not resolved are fetched again. */
  onBatch(partition: number, records: ConsumedRecord[], control: BatchControl): Promise<void>;
  /**
   * This member learned that the group rebalances and is about to rejoin: called synchronously,
   * while the current generation is still in force (the last moment to commit with it).
   */
  onRebalancing?(): void;
  /**
   * The member is about to rejoin a rebalancing group, still in its generation: the rebalance
   * waits for this (keep it well under the rebalance timeout). Not called after an eviction.
   */
  beforeRejoin?(): Promise<void>;
  /** The client gave up (`restarting` says whether it rejoins on its own). */
  onCrash?(error: Error, restarting: boolean): void;
}

export interface CommittedOffset {
  partition: number;
  /** Next offset to read; -1 when the group has none for the partition. */
  offset: number;
  metadata: string | null;
}

export interface OffsetToCommit {
  partition: number;
  /** Next offset to read (last processed + 1). */
  offset: number;
  metadata: string | null;
}

export interface GroupConsumer {
  start(handlers: GroupConsumerHandlers): Promise<void>;
  /**
   * Commits with the member's current generation, exactly once: no retry that could land in a
   * later generation for a partition that moved to another member. Throws on failure
   * (CommitMetadataTooLargeError when the broker refuses the metadata).
   */
  commit(offsets: OffsetToCommit[]): Promise<void>;
  /** The group's committed offsets (and their metadata) for some partitions of the topic. */
  fetchCommitted(partitions: number[]): Promise<CommittedOffset[]>;
  /** Stops fetching every partition of the topic (for a drain; membership is kept). */
  pauseAll(): void;
  /** Leaves the group and disconnects. */
  stop(): Promise<void>;
}
