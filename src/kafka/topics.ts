import type { Admin } from 'kafkajs';
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
  await admin.createTopics({ topics, waitForLeaders: true });
  // Another instance may have created some of them concurrently; createTopics then answers
  // false without error, which is fine: the topics exist either way.
  logger?.info({ topics: topics.map((t) => t.topic) }, 'created missing topics');
  return topics.map((t) => t.topic);
}

function dedupe(specs: TopicSpec[]): TopicSpec[] {
  const byName = new Map<string, TopicSpec>();
  for (const spec of specs) if (!byName.has(spec.topic)) byName.set(spec.topic, spec);
  return [...byName.values()];
}
