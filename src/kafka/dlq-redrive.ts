import type { Admin } from 'kafkajs';

import type { Logger } from '../platform/logger.js';
import { type KafkaSource, withKafkajsAdmin } from './client.js';
import { readRange, topicEnds } from './dlq-reader.js';
import type { ConsumedRecord } from './group-consumer.js';
import { ensureTopics } from './topics.js';
import { startTransactionalEngine, type OutputRecord } from './transactional-engine.js';

/**
 * The Kafka side of `msgbridge dlq redrive`: a redrive is a consumer group of its own
 * (`msgbridge-dlq-redrive.<name>`), run by the transactional engine (transactional-engine.ts):
 * each chunk of dead letters is one Kafka transaction that produces the redriven records AND
 * commits the group's offsets past the chunk (sendOffsets). A crash (kill -9 included) leaves
 * either both or neither: the rerun's producer (same transactional id) fences the dead one and
 * aborts what it left open, then starts from the committed offsets, so no record is produced
 * twice for read_committed readers, and none is skipped (README, Operations, "Dead letters").
 */

export const REDRIVE_GROUP_PREFIX = 'msgbridge-dlq-redrive.';

/**
 * The redrive ledger of a DLQ topic, `<topic>.redriven` (compacted): one record per dead letter
 * produced again, keyed `<partition>/<offset>`, written in the same transaction as the record it
 * produced. Every redrive, whatever its name and filters, skips what the ledger holds: a dead
 * letter is produced again once, ever (README, Operations, "Dead letters"). Two redrives of one
 * topic running at the same moment do not see each other's ledger entries: run one at a time.
 */
export function redriveLedgerTopic(dlqTopic: string): string {
  return `${dlqTopic}.redriven`;
}

export const ledgerKey = (partition: number, offset: string | number) => `${partition}/${offset}`;

/** The ledger entry of one dead letter produced again (an output of its chunk's transaction). */
export function ledgerEntry(
  dlqTopic: string,
  partition: number,
  offset: string,
  entry: { redrive: string; at: number; to: string },
): OutputRecord {
  return {
    topic: redriveLedgerTopic(dlqTopic),
    key: ledgerKey(partition, offset),
    value: JSON.stringify({ redrive: entry.redrive, at: new Date(entry.at).toISOString(), to: entry.to }),
    headers: {},
  };
}

/** The ledger's keys (committed entries only); empty when no redrive of the topic ever produced anything. */
export async function readRedriveLedger(kafka: KafkaSource, dlqTopic: string): Promise<Set<string>> {
  const topic = redriveLedgerTopic(dlqTopic);
  if (!(await withKafkajsAdmin(kafka, (admin) => admin.listTopics())).includes(topic)) return new Set();
  const ends = await topicEnds(kafka, topic);
  const keys = new Set<string>();
  await readRange({
    kafka,
    topic,
    from: new Map([...ends].map(([p, e]) => [p, e.low])),
    to: new Map([...ends].map(([p, e]) => [p, e.high])),
    timeoutMs: 10 * 60_000,
    onRecord: (record) => {
      if (record.key !== null && record.value !== null) keys.add(record.key.toString());
      return 'continue';
    },
  });
  return keys;
}

/** Creates the ledger topic if it is missing (compacted, one partition, the roles' replication). */
export async function ensureRedriveLedger(
  kafka: KafkaSource,
  dlqTopic: string,
  replicationFactor: number,
  logger?: Logger,
): Promise<void> {
  await withKafkajsAdmin(kafka, (admin) =>
    ensureTopics(
      admin,
      [
        {
          topic: redriveLedgerTopic(dlqTopic),
          partitions: 1,
          replicationFactor,
          configEntries: [{ name: 'cleanup.policy', value: 'compact' }],
        },
      ],
      logger,
    ),
  );
}

export function redriveGroupId(name: string): string {
  return `${REDRIVE_GROUP_PREFIX}${name}`;
}

/** The group's committed offset per partition of `topic` (partitions without one are absent). */
export async function committedOffsets(
  kafka: KafkaSource,
  groupId: string,
  topic: string,
): Promise<Map<number, number>> {
  return withKafkajsAdmin(kafka, (admin) => committedWith(admin, groupId, topic));
}

async function committedWith(admin: Admin, groupId: string, topic: string): Promise<Map<number, number>> {
  const answer = await admin.fetchOffsets({ groupId, topics: [topic] });
  const out = new Map<number, number>();
  for (const p of answer.find((t) => t.topic === topic)?.partitions ?? []) {
    const offset = Number(p.offset);
    if (offset >= 0) out.set(p.partition, offset);
  }
  return out;
}

/** Every redrive that has read `topic`: its name and committed offsets. */
export async function listRedrives(
  kafka: KafkaSource,
  topic: string,
): Promise<{ name: string; offsets: Map<number, number> }[]> {
  return withKafkajsAdmin(kafka, async (admin) => {
    const { groups } = await admin.listGroups();
    const names = groups
      .map((g) => g.groupId)
      .filter((id) => id.startsWith(REDRIVE_GROUP_PREFIX))
      .sort();
    const out: { name: string; offsets: Map<number, number> }[] = [];
    for (const groupId of names) {
      const offsets = await committedWith(admin, groupId, topic);
      if (offsets.size > 0) out.push({ name: groupId.slice(REDRIVE_GROUP_PREFIX.length), offsets });
    }
    return out;
  });
}

/**
 * Where a redrive that has never committed starts (the first offset at `--since`): written as
 * the group's offsets before its first transaction. Only when the group has none, so a rerun
 * after a crash keeps the position its transactions committed.
 */
export async function setStartOffsets(
  kafka: KafkaSource,
  groupId: string,
  topic: string,
  offsets: Map<number, number>,
): Promise<void> {
  await withKafkajsAdmin(kafka, async (admin) => {
    if ((await committedWith(admin, groupId, topic)).size > 0) return;
    await admin.setOffsets({
      groupId,
      topic,
      partitions: [...offsets].map(([partition, offset]) => ({ partition, offset: String(offset) })),
    });
  });
}

export interface RedriveChunk {
  outputs: OutputRecord[];
  /** Applied once the chunk's transaction committed (counters), never otherwise. */
  committed?(): void;
}

export interface RedriveRunOptions {
  kafka: KafkaSource;
  topic: string;
  groupId: string;
  /** Partition → offset the redrive must reach (the end when it began); it stops once every partition is there. */
  ends: Map<number, number>;
  /** Partition → where it starts when the group has no committed offset (the log start). */
  starts: Map<number, number>;
  /** One chunk of dead letters (offset order, one partition) → the records to produce. */
  process(records: ConsumedRecord[]): Promise<RedriveChunk> | RedriveChunk;
  /** After each committed chunk: the committed position of every partition. */
  onCommitted?(positions: Map<number, number>): void;
  /** Records per transaction (default 500). */
  maxBatchRecords?: number;
  logger?: Logger;
  /** Rejects the run (the chunk in progress is aborted by the coordinator or the next run). */
  signal?: AbortSignal;
}

/** Runs the redrive to the ends; resolves with the committed positions. */
export async function runRedrive(options: RedriveRunOptions): Promise<Map<number, number>> {
  const { kafka, topic, groupId, ends } = options;
  const positions = new Map<number, number>();
  let settle: (error?: Error) => void = () => {};
  const done = new Promise<void>((resolve, reject) => (settle = (error) => (error ? reject(error) : resolve())));
  const check = () => {
    for (const [partition, end] of ends) if ((positions.get(partition) ?? -1) < end) return;
    settle();
  };
  const engine = await startTransactionalEngine({
    kafka,
    groupId,
    inputTopics: [topic],
    // The same on every run of this redrive: a rerun fences a crashed one and aborts what it left open.
    transactionalIdPrefix: groupId,
    fromBeginning: true,
    maxBatchRecords: options.maxBatchRecords ?? 500,
    partitionsConsumedConcurrently: 1,
    sessionTimeoutMs: 10_000,
    heartbeatIntervalMs: 1_000,
    logger: options.logger,
    // Called after the fence: the committed offsets are final, so a partition already at its end is known done.
    onTaskAssigned: async (task) => {
      const committed = await committedOffsets(kafka, groupId, topic);
      positions.set(task, Math.max(positions.get(task) ?? -1, committed.get(task) ?? options.starts.get(task) ?? 0));
      check();
    },
    process: async (task, records) => {
      const chunk = await options.process(records);
      const next = Number(records[records.length - 1]!.offset) + 1;
      return {
        outputs: chunk.outputs,
        commit: () => {
          positions.set(task, Math.max(positions.get(task) ?? -1, next));
          chunk.committed?.();
          options.onCommitted?.(new Map(positions));
          check();
        },
      };
    },
    onFatal: (error) => settle(error),
  });
  const onAbort = () => settle(new Error('the redrive was interrupted'));
  options.signal?.addEventListener('abort', onAbort, { once: true });
  try {
    await done;
  } finally {
    options.signal?.removeEventListener('abort', onAbort);
    await engine.stop();
  }
  return positions;
}
