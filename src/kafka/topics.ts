import kafkajs, { type Admin } from 'kafkajs';
import type { Logger } from '../observability/logger.js';

export interface TopicSpec {
  topic: string;
  partitions: number;
  replicationFactor: number;
  /** Topic-level settings for topics created here (for example max.message.bytes). */
  configEntries?: { name: string; value: string }[];
}

/**
 * Creates the topics that do not exist yet and leaves existing ones alone (their partition
 * counts and settings are the operator's). The replication factor is capped by the number
 * of brokers, so that the same configuration works on a one-broker development cluster.
 * Returns the names it created.
 */
export async function ensureTopics(admin: Admin, specs: TopicSpec[], logger?: Logger): Promise<string[]> {
  const existing = new Set(await admin.listTopics());
  const missing = dedupe(specs).filter((s) => !existing.has(s.topic));
  if (missing.length === 0) return [];
  const { brokers } = await admin.describeCluster();
  const topics = missing.map((s) => {
    const replicationFactor = Math.min(s.replicationFactor, Math.max(1, brokers.length));
    if (replicationFactor < s.replicationFactor) {
      logger?.warn({ topic: s.topic, wanted: s.replicationFactor, brokers: brokers.length }, 'replication factor capped by the number of brokers');
    }
    return { topic: s.topic, numPartitions: s.partitions, replicationFactor, ...(s.configEntries ? { configEntries: s.configEntries } : {}) };
  });
  // Another instance may have created some of them concurrently; createTopics then answers
  // false without error, which is fine: the topics exist either way.
  await admin.createTopics({ topics, waitForLeaders: false });
  await waitForLeaders(admin, topics.map((t) => t.topic));
  logger?.info({ topics: topics.map((t) => t.topic) }, 'created missing topics');
  return topics.map((t) => t.topic);
}

const NOT_YET = new Set(['UNKNOWN_TOPIC_OR_PARTITION', 'LEADER_NOT_AVAILABLE', 'NOT_LEADER_FOR_PARTITION', 'NOT_LEADER_OR_FOLLOWER']);

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
      if (described.length === topics.length && described.every((t) => t.partitions.length > 0 && t.partitions.every((p) => p.leader >= 0))) {
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

/**
 * A topic's max.message.bytes (the largest record batch it takes), or undefined when the
 * cluster does not say (DescribeConfigs denied by ACLs, an old broker): the caller assumes the
 * default then, and says so.
 */
export async function topicMaxMessageBytes(admin: Admin, topic: string, logger?: Logger): Promise<number | undefined> {
  try {
    const described = await admin.describeConfigs({
      resources: [{ type: kafkajs.ConfigResourceTypes.TOPIC, name: topic, configNames: ['max.message.bytes'] }],
      includeSynonyms: false,
    });
    const value = Number(described.resources[0]?.configEntries.find((e) => e.configName === 'max.message.bytes')?.configValue);
    return Number.isFinite(value) && value > 0 ? value : undefined;
  } catch (err) {
    logger?.warn({ topic, err: (err as Error).message }, "could not read the topic's max.message.bytes: assuming Kafka's default");
    return undefined;
  }
}
