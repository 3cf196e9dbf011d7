import type { Config } from '../config/schema.js';
import { errorMessage, MsgbridgeError } from '../platform/errors.js';
import type { KafkaPort } from '../kafka/client.js';
import { withAdmin, type KafkaAdmin } from '../kafka/admin.js';
import type { Logger } from '../platform/logger.js';
import type { TrackerTopics } from './tracker-logic.js';

/** The tracker's topics as the configuration names them. */
export function trackerTopics(config: Config): TrackerTopics {
  const t = config.kafka.topics;
  return {
    sendResults: t.sendResults,
    deliveryStatus: t.deliveryStatus,
    messages: t.messages,
    messageState: t.messageState,
    conversations: t.conversations,
    requestOutcomes: t.requestOutcomes,
    inboundMessages: t.inboundMessages,
  };
}

/**
 * Creates the inputs and the compacted outputs when missing (`kafka.createTopics`), checks the
 * outputs can keep acks=all; answers the inputs' partition count, which the outputs must share
 * (message-state is co-partitioned with them: task p writes partition p).
 */
export async function prepareTrackerTopics(
  kafka: KafkaPort,
  config: Config,
  topics: TrackerTopics,
  logger: Logger,
): Promise<number> {
  return withAdmin(kafka, async (admin) => {
    const inputs = [topics.sendResults, topics.deliveryStatus, topics.messages];
    const counts = await admin.partitionCounts(inputs);
    const partitions = inputs.map((t) => counts.get(t)).find((n) => n !== undefined) ?? config.kafka.partitions;
    const base = {
      partitions,
      replicationFactor: config.kafka.replicationFactor,
      minInsyncReplicas: config.kafka.minInsyncReplicas,
    };
    await admin.prepareRoleTopics(
      {
        createTopics: config.kafka.createTopics,
        create: [
          ...inputs.map((topic) => ({ topic, ...base })),
          ...[topics.messageState, topics.conversations, topics.requestOutcomes, topics.inboundMessages].map(
            (topic) => ({
              topic,
              ...base,
              configEntries: changelogTopicConfig(
                config,
                topic === topics.conversations ? 'conversations' : 'messageState',
              ),
            }),
          ),
        ],
        written: [topics.messageState, topics.conversations, topics.requestOutcomes, topics.inboundMessages],
      },
      logger,
    );
    // Task p writes partition p of message-state, request-outcomes and inbound-messages, and restores from it.
    const outputCounts = await admin
      .partitionCounts([topics.messageState, topics.requestOutcomes, topics.inboundMessages])
      .catch(() => new Map<string, number>());
    for (const topic of [topics.messageState, topics.requestOutcomes, topics.inboundMessages]) {
      const outputPartitions = outputCounts.get(topic);
      if (outputPartitions !== undefined && outputPartitions !== partitions) {
        throw new MsgbridgeError(
          'CONFIG_INVALID',
          `topic ${topic} has ${outputPartitions} partitions but the tracker's inputs have ${partitions}: they must be co-partitioned (recreate it with ${partitions})`,
        );
      }
    }
    await warnUnboundedChangelogs(admin, config, topics, logger);
    return partitions;
  });
}

/**
 * The changelogs' topic settings (`messageState` also stands for request-outcomes and inbound-messages, kept as long):
 * compacted (one record per key) and deleted after the retention (bounded history), with segments that roll so that
 * compaction and deletion run.
 */
export function changelogTopicConfig(
  config: Config,
  which: 'messageState' | 'conversations',
): { name: string; value: string }[] {
  const retentionMs =
    which === 'messageState' ? config.tracker.stateRetentionMs : config.tracker.conversationRetentionMs;
  // The active segment is never cleaned: roll it often enough that the log stays near one
  // record per key (at most a tenth of the retention, at most 6 h).
  const segmentMs = Math.min(6 * 3_600_000, Math.floor(retentionMs / 10));
  return [
    { name: 'cleanup.policy', value: 'compact,delete' },
    { name: 'retention.ms', value: String(retentionMs) },
    { name: 'segment.ms', value: String(segmentMs) },
  ];
}

/** Says loudly when an existing changelog keeps more than the configured retention (created before, or by hand). */
async function warnUnboundedChangelogs(
  admin: KafkaAdmin,
  config: Config,
  topics: TrackerTopics,
  logger: Logger,
): Promise<void> {
  try {
    for (const [topic, settings] of await admin.topicSettings([
      topics.messageState,
      topics.conversations,
      topics.requestOutcomes,
      topics.inboundMessages,
    ])) {
      const setting = (name: string) => settings.get(name);
      const wanted =
        topic === topics.conversations ? config.tracker.conversationRetentionMs : config.tracker.stateRetentionMs;
      const policy = setting('cleanup.policy') ?? '';
      const retention = Number(setting('retention.ms'));
      if (!policy.includes('delete') || retention < 0 || retention > wanted) {
        logger.warn(
          { topic, cleanupPolicy: policy, retentionMs: retention, wantedRetentionMs: wanted },
          `topic ${topic} keeps records longer than the tracker's retention: its history (and restore time) grows without bound; set cleanup.policy=compact,delete and retention.ms=${wanted}`,
        );
      }
    }
  } catch (error) {
    logger.warn({ error: errorMessage(error) }, 'could not read the settings of the changelog topics');
  }
}
