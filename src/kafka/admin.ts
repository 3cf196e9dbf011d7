import './kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed
import { Kafka, logLevel, type Admin } from 'kafkajs';
import type { Logger } from '../platform/logger.js';
import { withKafkajsAdmin, type KafkaSource } from './client.js';
import {
  partitionCounts,
  prepareRoleTopics,
  topicSettings,
  type RoleTopicsSpec,
  type WrittenTopics,
} from './topics.js';

/**
 * What the roles and the commands ask of a cluster's administration, in the relay's own types
 * (the admin client of the library stays in src/kafka). One connected admin client serves the
 * calls of one `withAdmin`.
 */
export interface KafkaAdmin {
  /** Every topic's name. */
  listTopics(): Promise<string[]>;
  /** The cluster's id (a store's identity, README "Restore a local store"). */
  clusterId(): Promise<string>;
  /** Each partition's end now: the offset the next record written to it will have. */
  topicEnds(topic: string): Promise<{ partition: number; offset: string }[]>;
  /** The partition count of each existing topic among `topics` (missing ones are left out). */
  partitionCounts(topics: readonly string[]): Promise<Map<string, number>>;
  /** Every setting of each topic as the cluster answers it (DescribeConfigs), per topic. */
  topicSettings(topics: readonly string[]): Promise<Map<string, Map<string, string>>>;
  /** Creates what a role declares (when allowed) and checks what it writes (topics.ts). */
  prepareRoleTopics(spec: RoleTopicsSpec, logger: Logger): Promise<WrittenTopics>;
}

/** The port over a connected kafkajs admin client. */
export function adminPort(admin: Admin): KafkaAdmin {
  return {
    listTopics: () => admin.listTopics(),
    clusterId: async () => (await admin.describeCluster()).clusterId,
    topicEnds: async (topic) =>
      (await admin.fetchTopicOffsets(topic)).map(({ partition, offset }) => ({ partition, offset })),
    partitionCounts: (topics) => partitionCounts(admin, topics),
    topicSettings: (topics) => topicSettings(admin, topics),
    prepareRoleTopics: (spec, logger) => prepareRoleTopics(admin, spec, logger),
  };
}

/**
 * Runs `use` on a connected admin and disconnects it whatever happens. A failed disconnect is
 * not the caller's failure: its answer (or its error) stands.
 */
export function withAdmin<T>(kafka: KafkaSource, use: (admin: KafkaAdmin) => Promise<T>): Promise<T> {
  return withKafkajsAdmin(kafka, (admin) => use(adminPort(admin)));
}

/**
 * A plaintext admin client asked again and again during a start-up wait (the local cluster's
 * nodes registering): no retries of its own, nothing logged; the caller polls and gives up.
 */
export function pollingAdmin(
  brokers: string[],
  clientId: string,
): { brokerCount(): Promise<number>; close(): Promise<void> } {
  const admin = new Kafka({ clientId, brokers, logLevel: logLevel.NOTHING, retry: { retries: 0 } }).admin();
  return {
    async brokerCount() {
      await admin.connect();
      return (await admin.describeCluster()).brokers.length;
    },
    close: () => admin.disconnect(),
  };
}
