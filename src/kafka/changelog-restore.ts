import { partitionEnds, readChangelog, type PartitionEnds } from './changelog-reader.js';
import type { ConsumedRecord } from './group-consumer.js';
import { type KafkaSource, withKafkajsAdmin } from './client.js';
import type { ChangelogEntry } from '../platform/local-store.js';

/**
 * Bringing a local store (src/platform/local-store.ts) up to its changelog partitions, shared by
 * the tracker's task stores and the sender's request ledger: the cluster's id (a store written
 * against another cluster is not reused), whether a checkpoint can be continued, a bounded
 * number of reads at once, and one changelog read into the store in chunks whose positions
 * become the checkpoint as they are applied. src/kafka/README.md, "Reading changelogs".
 */

export interface ChunkedRead {
  topic: string;
  /** The store's own partition: its position is what the checkpoint records. */
  partition: number;
  /** Also read every other partition (records the store's position never covers). */
  allPartitions?: boolean;
  /** Next offset to read in `partition` (a checkpoint); default: the beginning of the log. */
  from?: number;
  /** Records it refuses are skipped before they are handed over (the key is at hand, the value is not parsed). */
  filter?(record: ConsumedRecord): boolean;
  /** Records per chunk (one store transaction each). */
  chunkSize: number;
  /**
   * A chunk: the records of `partition` (and of the others, with `allPartitions`), and the
   * position after the last of `partition`'s (undefined when it had none).
   */
  apply(own: ChangelogEntry[], others: ChangelogEntry[], reached: number | undefined): void;
  /** After each fetched batch: a promise holds the read until the store caught up with what it was given. */
  afterBatch?(): Promise<void> | undefined;
  signal?: AbortSignal;
  timeoutMs: number;
  maxBytesPerPartition: number;
}

export type { PartitionEnds };

export class ChangelogRestorer {
  private clusterIdRead: Promise<string> | undefined;
  private reading = 0;
  private readonly waiting: (() => void)[] = [];

  /**
   * `concurrentReads`: stores read at once, enough to overlap fetch latency, few enough to bound the fetched bytes in
   * memory.
   */
  constructor(
    private readonly kafka: KafkaSource,
    private readonly concurrentReads = 3,
  ) {}

  /** The cluster's id: a store written against another cluster (a new local broker) is not reused. */
  clusterId(): Promise<string> {
    this.clusterIdRead ??= withKafkajsAdmin(
      this.kafka,
      async (admin) => (await admin.describeCluster()).clusterId,
    ).catch((error: unknown) => {
      this.clusterIdRead = undefined;
      throw error;
    });
    return this.clusterIdRead;
  }

  /**
   * Why the stored positions cannot be continued from the changelog partitions (the topic was
   * recreated, or records the store never read were deleted); undefined when they can. A
   * position left out is read from the start, which always works.
   */
  async inconsistency(
    positions: { topic: string; partition: number; position: number | undefined }[],
  ): Promise<string | undefined> {
    const ends = await Promise.all(positions.map((p) => partitionEnds(this.kafka, p.topic)));
    for (const [i, p] of positions.entries()) {
      if (p.position === undefined) continue;
      const problem = why(p.position, ends[i]!.get(p.partition));
      if (problem) return `${p.topic}: ${problem}`;
    }
    return undefined;
  }

  /**
   * Each partition's low and high watermarks (read_uncommitted), asked once: for a caller that
   * looks again at its next round (the sender's ledger, every few seconds), not one that waits up
   * to LEADER_WAIT_MS while a leader is elected (a drain's final commit waits for it).
   */
  ends(topic: string): Promise<Map<number, PartitionEnds>> {
    return partitionEnds(this.kafka, topic, { leaderWaitMs: 0 });
  }

  /** Runs `read` once one of the concurrent read slots is free. */
  async inTurn<T>(read: () => Promise<T>): Promise<T> {
    while (this.reading >= this.concurrentReads) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.reading++;
    try {
      return await read();
    } finally {
      this.reading--;
      this.waiting.shift()?.();
    }
  }

  /**
   * One changelog into a store, chunk by chunk; the last chunk carries the end the read reached
   * (markers and aborted records past the last delivered one are covered too), so an
   * interrupted read resumes where its last chunk stopped. Answers the records read.
   */
  async read(options: ChunkedRead): Promise<{ records: number; end: number | undefined }> {
    const { partition } = options;
    let own: ChangelogEntry[] = [];
    let others: ChangelogEntry[] = [];
    let position: number | undefined;
    const flush = () => {
      if (own.length > 0 || others.length > 0 || position !== undefined) options.apply(own, others, position);
      own = [];
      others = [];
      position = undefined;
    };
    const result = await readChangelog({
      kafka: this.kafka,
      topic: options.topic,
      timeoutMs: options.timeoutMs,
      maxBytesPerPartition: options.maxBytesPerPartition,
      ...(options.signal ? { signal: options.signal } : {}),
      ...(options.allPartitions ? {} : { partitions: [partition] }),
      ...(options.from !== undefined ? { from: new Map([[partition, options.from]]) } : {}),
      filter: (r) => r.key !== null && (options.filter?.(r) ?? true),
      ...(options.afterBatch ? { afterBatch: options.afterBatch } : {}),
      onRecord: (r) => {
        if (r.partition !== partition) others.push({ key: r.key!.toString(), value: r.value });
        else {
          own.push({ key: r.key!.toString(), value: r.value });
          position = Number(r.offset) + 1;
        }
        if (own.length + others.length >= options.chunkSize) flush();
      },
    });
    flush();
    const end = result.ends.get(partition);
    if (end !== undefined) options.apply([], [], end);
    return { records: result.delivered, end };
  }
}

/** Why a stored position cannot be continued from the changelog partition; undefined when it can. */
function why(position: number, ends: PartitionEnds | undefined): string | undefined {
  if (!ends) return 'the changelog partition does not exist';
  if (position > ends.high)
    return `its position ${position} is past the end of the changelog (${ends.high}): the topic was recreated or truncated`;
  if (position < ends.low)
    return `its position ${position} is before the start of the changelog (${ends.low}): records it never read were deleted`;
  return undefined;
}
