import './kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed
import kafkajs, { type Admin } from 'kafkajs';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import type { Logger } from '../platform/logger.js';

export interface TopicSpec {
  topic: string;
  partitions: number;
  replicationFactor: number;
  /** Topic-level settings for topics created here (for example max.message.bytes). */
  configEntries?: { name: string; value: string }[];
  /**
   * min.insync.replicas of a topic created here; default 2 when its replication factor is 3
   * or more (acks=all then means two disks), else 1. Never above the replication factor.
   */
  minInsyncReplicas?: number | null;
}

/**
 * The min.insync.replicas a topic of this replication factor gets (docs/design.md, "Delivery semantics": durable on a
 * real cluster).
 */
export function minInsyncReplicasFor(replicationFactor: number, configured?: number | null): number {
  const wanted = configured ?? (replicationFactor >= 3 ? 2 : 1);
  return Math.max(1, Math.min(wanted, replicationFactor));
}

/**
 * Creates the topics that do not exist yet and leaves existing ones alone (their partition
 * counts and settings are the operator's). On a one-broker cluster (development) the
 * replication factor is capped to 1, so the same configuration works there; on a real cluster
 * it never is: with fewer brokers alive than the replication factor, creation fails with a
 * clear error instead of giving the topic fewer replicas for good. Returns the names it created.
 */
export async function ensureTopics(admin: Admin, specs: TopicSpec[], logger?: Logger): Promise<string[]> {
  const existing = new Set(await admin.listTopics());
  const missing = dedupe(specs).filter((s) => !existing.has(s.topic));
  if (missing.length === 0) return [];
  const wantedReplicas = Math.max(...missing.map((s) => s.replicationFactor));
  let { brokers } = await admin.describeCluster();
  // A broker that just (re)started may not be in every broker's metadata yet: give the
  // cluster a few seconds before concluding that it has fewer brokers than the topics need.
  for (
    const deadline = Date.now() + 10_000;
    brokers.length > 1 && brokers.length < wantedReplicas && Date.now() < deadline;
  ) {
    await new Promise((r) => setTimeout(r, 500));
    ({ brokers } = await admin.describeCluster());
  }
  const topics = missing.map((s) => {
    let replicationFactor = s.replicationFactor;
    if (replicationFactor > brokers.length) {
      if (brokers.length > 1) {
        throw new MsgbridgeError(
          'KAFKA_CONNECT_FAILED',
          `cannot create topic ${s.topic} with replication factor ${s.replicationFactor}: only ${brokers.length} brokers are alive (kafka.replicationFactor); start the missing brokers, or create the topic yourself`,
        );
      }
      replicationFactor = 1;
      logger?.info({ topic: s.topic, wanted: s.replicationFactor }, 'one-broker cluster: replication factor 1');
    }
    const entries = [...(s.configEntries ?? [])];
    if (!entries.some((e) => e.name === 'min.insync.replicas'))
      entries.push({
        name: 'min.insync.replicas',
        value: String(minInsyncReplicasFor(replicationFactor, s.minInsyncReplicas)),
      });
    return { topic: s.topic, numPartitions: s.partitions, replicationFactor, configEntries: entries };
  });
  // Another instance may have created some of them concurrently; createTopics then answers
  // false without error, which is fine: the topics exist either way.
  await admin.createTopics({ topics, waitForLeaders: false });
  await waitForLeaders(
    admin,
    topics.map((t) => t.topic),
  );
  logger?.info({ topics: topics.map((t) => t.topic) }, 'created missing topics');
  return topics.map((t) => t.topic);
}

const NOT_YET = new Set([
  'UNKNOWN_TOPIC_OR_PARTITION',
  'LEADER_NOT_AVAILABLE',
  'NOT_LEADER_FOR_PARTITION',
  'NOT_LEADER_OR_FOLLOWER',
]);

/**
 * Until every partition of the topics has a leader. kafkajs's own wait retries only on
 * LEADER_NOT_AVAILABLE, but right after creation a broker may still answer
 * UNKNOWN_TOPIC_OR_PARTITION (metadata not yet propagated), which it treats as fatal.
 */
async function waitForLeaders(admin: Admin, topics: string[], timeoutMs = 30_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (let delay = 50; ; delay = Math.min(delay * 2, 1000)) {
    try {
      const { topics: described } = await admin.fetchTopicMetadata({ topics });
      if (
        described.length === topics.length &&
        described.every((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0))
      ) {
        // Metadata can name a leader before that broker has applied the new partitions; a
        // first produce then fails and kafkajs's idempotent retry breaks its sequence
        // (OUT_OF_ORDER_SEQUENCE_NUMBER, cf. KAFKA-15591). Asking each leader for offsets
        // proves they host the partitions.
        for (const topic of topics) await admin.fetchTopicOffsets(topic);
        return;
      }
    } catch (err) {
      if (!NOT_YET.has((err as { type?: string }).type ?? '') || Date.now() > deadline) throw err;
    }
    if (Date.now() > deadline) throw new Error(`topics ${topics.join(', ')} have no leader after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, delay));
  }
}

function dedupe(specs: TopicSpec[]): TopicSpec[] {
  const byName = new Map<string, TopicSpec>();
  for (const spec of specs) if (!byName.has(spec.topic)) byName.set(spec.topic, spec);
  return [...byName.values()];
}

/** What the roles read of the topics they write, once at start. */
export interface WrittenTopics {
  /** The topics that exist (a missing one was warned about). */
  existing: string[];
  /** max.message.bytes per topic, when the cluster says (DescribeConfigs allowed). */
  maxMessageBytes: Map<string, number>;
  /** min.insync.replicas per topic, when the cluster says. */
  minInsyncReplicas: Map<string, number>;
}

/**
 * Checks the topics a role writes, in one metadata and one DescribeConfigs request: whether
 * they can keep the acks=all promise (every partition has a leader, a topic with several
 * replicas requires at least two in sync; e.g. replication factor 3 with min.insync.replicas 1
 * means a 200 rests on one disk), with one warning per topic that cannot, and what each takes
 * at most (max.message.bytes). A cluster that denies DescribeConfigs gets one warning and the
 * role goes on.
 */
export async function checkWrittenTopics(
  admin: Admin,
  wanted: readonly string[],
  logger: Logger,
): Promise<WrittenTopics> {
  const result: WrittenTopics = { existing: [], maxMessageBytes: new Map(), minInsyncReplicas: new Map() };
  let replicas: Map<string, { factor: number; leaderless: number }>;
  try {
    // Asking metadata for a missing topic can create it (auto.create.topics.enable): list first.
    const existing = new Set(await admin.listTopics());
    result.existing = wanted.filter((t) => existing.has(t));
    for (const topic of wanted.filter((t) => !existing.has(t)))
      logger.warn(
        { topic },
        `topic ${topic} does not exist: writes to it fail until it is created (kafka.createTopics)`,
      );
    if (result.existing.length === 0) return result;
    const { topics: described } = await admin.fetchTopicMetadata({ topics: result.existing });
    replicas = new Map(
      described.map((t) => [
        t.name,
        {
          factor: Math.min(...t.partitions.map((p) => p.replicas.length)),
          leaderless: t.partitions.filter((p) => p.leader < 0).length,
        },
      ]),
    );
  } catch (err) {
    logger.warn(
      { topics: wanted, err: errorMessage(err) },
      'could not read the metadata of the topics written: their durability is unchecked',
    );
    return result;
  }
  const minIsr = result.minInsyncReplicas;
  try {
    const described = await admin.describeConfigs({
      resources: result.existing.map((name) => ({
        type: kafkajs.ConfigResourceTypes.TOPIC,
        name,
        configNames: ['min.insync.replicas', 'max.message.bytes'],
      })),
      includeSynonyms: false,
    });
    for (const r of described.resources) {
      const setting = (name: string) => Number(r.configEntries.find((e) => e.configName === name)?.configValue);
      minIsr.set(r.resourceName, Number.isFinite(setting('min.insync.replicas')) ? setting('min.insync.replicas') : 1);
      const maxBytes = setting('max.message.bytes');
      if (Number.isFinite(maxBytes) && maxBytes > 0) result.maxMessageBytes.set(r.resourceName, maxBytes);
    }
  } catch (err) {
    logger.warn(
      { topics: result.existing, err: errorMessage(err) },
      "the cluster does not let this role read topic settings (DescribeConfigs): min.insync.replicas and max.message.bytes are unchecked, Kafka's defaults assumed",
    );
  }
  for (const topic of result.existing) {
    const r = replicas.get(topic);
    if (!r) continue;
    const isr = minIsr.get(topic);
    if (r.leaderless > 0)
      logger.warn(
        { topic, partitionsWithoutLeader: r.leaderless },
        'topic has partitions without a leader: writes to them fail until one is elected',
      );
    if (r.factor >= 2 && isr !== undefined && isr < 2) {
      logger.warn(
        { topic, replicationFactor: r.factor, minInsyncReplicas: isr },
        `topic ${topic} has ${r.factor} replicas but min.insync.replicas ${isr}: an acks=all write is acknowledged by a single replica, so a 200 rests on one disk (set min.insync.replicas=2)`,
      );
    }
  }
  return result;
}

/** What a role declares of its topics: those it creates (when allowed) and those it writes. */
export interface RoleTopicsSpec {
  /** kafka.createTopics: create the missing ones of `create`. */
  createTopics: boolean;
  create: TopicSpec[];
  /** Checked for the acks=all promise and read for their limits (checkWrittenTopics). */
  written: readonly string[];
}

/** One topic preparation for every role: create what is declared (when allowed), check what is written. */
export async function prepareRoleTopics(admin: Admin, spec: RoleTopicsSpec, logger: Logger): Promise<WrittenTopics> {
  if (spec.createTopics) await ensureTopics(admin, spec.create, logger);
  return checkWrittenTopics(admin, spec.written, logger);
}

/** Every setting of each topic as the cluster answers it (DescribeConfigs), per topic. */
export async function topicSettings(
  admin: Admin,
  topics: readonly string[],
): Promise<Map<string, Map<string, string>>> {
  const { resources } = await admin.describeConfigs({
    includeSynonyms: false,
    resources: topics.map((name) => ({ type: kafkajs.ConfigResourceTypes.TOPIC, name })),
  });
  return new Map(
    resources.map((r) => [r.resourceName, new Map(r.configEntries.map((e) => [e.configName, e.configValue]))]),
  );
}

/** The partition count of each existing topic among `topics` (missing ones are left out). */
export async function partitionCounts(admin: Admin, topics: readonly string[]): Promise<Map<string, number>> {
  const existing = new Set(await admin.listTopics());
  const present = topics.filter((t) => existing.has(t));
  if (present.length === 0) return new Map();
  return new Map(
    (await admin.fetchTopicMetadata({ topics: present })).topics.map((t) => [t.name, t.partitions.length]),
  );
}
