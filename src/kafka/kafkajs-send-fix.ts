import { createRequire } from 'node:module';
import './kafkajs-abort-fix.js';
import { replaceKafkajsModule } from './kafkajs-module.js'; // kafkajs's read_committed filter fixed too, before kafkajs loads

/**
 * Replaces kafkajs 2.2.4's `sendMessages`, the retry loop of every producer's send, which can
 * acknowledge a send whose records were never written: this one tracks acknowledged partitions,
 * not brokers (why, and what was seen: src/kafka/README.md, "kafkajs's producer drops records
 * when a leader moves"). kafkajs captures `sendMessages` when its producer module loads, so this
 * module is evaluated first: every module of src that loads kafkajs imports it before kafkajs.
 */

/* eslint-disable @typescript-eslint/no-explicit-any -- kafkajs's internal modules are untyped JavaScript. */
const require = createRequire(import.meta.url);

const { KafkaJSMetadataNotLoaded } = require('kafkajs/src/errors') as {
  KafkaJSMetadataNotLoaded: new (message: string) => Error;
};
const { staleMetadata } = require('kafkajs/src/protocol/error') as { staleMetadata(e: unknown): boolean };
const groupMessagesPerPartition = require('kafkajs/src/producer/groupMessagesPerPartition') as (options: {
  topic: string;
  partitionMetadata: unknown[];
  messages: unknown[];
  partitioner: unknown;
}) => Record<string, unknown[]>;
const createTopicData = require('kafkajs/src/producer/createTopicData') as (
  data: { topic: string; partitions: number[]; messagesPerPartition: Record<string, unknown[]> }[],
) => { topic: string; partitions: { partition: number; messages: unknown[] }[] }[];
const responseSerializer = require('kafkajs/src/producer/responseSerializer') as (response: unknown) => unknown[];

interface SendOptions {
  acks: number;
  timeout: number;
  compression: unknown;
  topicMessages: { topic: string; messages: unknown[] }[];
}

export function createSendMessages({ logger, cluster, partitioner, eosManager, retrier }: any) {
  return async ({ acks, timeout, compression, topicMessages }: SendOptions): Promise<unknown[]> => {
    // Grouped once: a retry sends the same records to the same partitions (a keyless record is not re-partitioned).
    let grouped: Map<string, Record<string, unknown[]>> | undefined;
    const acknowledged = new Map<string, Set<number>>();
    const responses: unknown[] = [];

    const attempt = async (): Promise<unknown[]> => {
      await cluster.refreshMetadataIfNecessary();
      if (!grouped) {
        const byTopic = new Map<string, Record<string, unknown[]>>();
        for (const { topic, messages } of topicMessages) {
          const partitionMetadata = cluster.findTopicPartitionMetadata(topic) as unknown[];
          if (partitionMetadata.length === 0) throw new KafkaJSMetadataNotLoaded('Producing to topic without metadata');
          byTopic.set(topic, groupMessagesPerPartition({ topic, partitionMetadata, messages, partitioner }));
        }
        grouped = byTopic;
      }
      const perLeader = new Map<string, { topic: string; partitions: number[]; messagesPerPartition: any }[]>();
      for (const [topic, messagesPerPartition] of grouped) {
        const done = acknowledged.get(topic);
        const pending = Object.keys(messagesPerPartition).filter((p) => !done?.has(Number(p)));
        if (pending.length === 0) continue;
        const partitionsPerLeader = cluster.findLeaderForPartitions(topic, pending) as Record<string, number[]>;
        const led = Object.values(partitionsPerLeader).reduce((n, list) => n + list.length, 0);
        if (led < pending.length)
          throw new KafkaJSMetadataNotLoaded(`Producing to partitions of ${topic} missing from the metadata`);
        for (const [nodeId, partitions] of Object.entries(partitionsPerLeader)) {
          let list = perLeader.get(nodeId);
          if (!list) perLeader.set(nodeId, (list = []));
          list.push({ topic, partitions, messagesPerPartition });
        }
      }
      const requests = [...perLeader].map(async ([nodeId, topicDataForBroker]) => {
        const broker = await cluster.findBroker({ nodeId });
        const topicData = createTopicData(topicDataForBroker);
        await eosManager.acquireBrokerLock(broker);
        try {
          if (eosManager.isTransactional()) await eosManager.addPartitionsToTransaction(topicData);
          for (const { topic, partitions } of topicData)
            for (const entry of partitions as any[]) {
              entry.firstSequence = eosManager.getSequence(topic, entry.partition);
              eosManager.updateSequence(topic, entry.partition, entry.messages.length);
            }
          let response: unknown;
          try {
            response = await broker.produce({
              transactionalId: eosManager.isTransactional() ? eosManager.getTransactionalId() : undefined,
              producerId: eosManager.getProducerId(),
              producerEpoch: eosManager.getProducerEpoch(),
              acks,
              timeout,
              compression,
              topicData,
            });
          } catch (e) {
            for (const { topic, partitions } of topicData)
              for (const entry of partitions) eosManager.updateSequence(topic, entry.partition, -entry.messages.length);
            throw e;
          }
          for (const { topic, partitions } of topicData) {
            let done = acknowledged.get(topic);
            if (!done) acknowledged.set(topic, (done = new Set()));
            for (const entry of partitions) done.add(entry.partition);
          }
          if (acks !== 0) responses.push(...responseSerializer(response));
        } finally {
          await eosManager.releaseBrokerLock(broker);
        }
      });
      // Every request of this attempt settles before the next attempt: none still in flight when it starts.
      const failed = (await Promise.allSettled(requests)).find((r) => r.status === 'rejected');
      if (failed) throw failed.reason;
      return responses;
    };

    const topics = topicMessages.map(({ topic }) => topic);
    return retrier(async (bail: (e: unknown) => void, retryCount: number, retryTime: number) => {
      await cluster.addMultipleTargetTopics(topics);
      try {
        return await attempt();
      } catch (e: any) {
        if (e.name === 'KafkaJSConnectionClosedError') cluster.removeBroker({ host: e.host, port: e.port });
        if (!cluster.isConnected()) {
          logger.debug(`Cluster has disconnected, reconnecting: ${e.message}`, { retryCount, retryTime });
          await cluster.connect();
          await cluster.refreshMetadata();
          throw e;
        }
        if (
          staleMetadata(e) ||
          e.name === 'KafkaJSMetadataNotLoaded' ||
          e.name === 'KafkaJSConnectionError' ||
          e.name === 'KafkaJSConnectionClosedError' ||
          (e.name === 'KafkaJSProtocolError' && e.retriable)
        ) {
          logger.error(`Failed to send messages: ${e.message}`, { retryCount, retryTime });
          await cluster.refreshMetadata();
          throw e;
        }
        logger.error(`${e.message}`, { retryCount, retryTime });
        if (e.retriable) throw e;
        bail(e);
      }
    });
  };
}

replaceKafkajsModule({
  path: 'kafkajs/src/producer/sendMessages.js',
  replacement: createSendMessages,
  fixed: Symbol.for('msgbridge.kafkajsSendFix'),
  capturedBy: 'kafkajs/src/producer/messageProducer.js',
  warning:
    "kafkajs was loaded before msgbridge could fix its producers' send, which can drop records when a partition leader moves: import msgbridge first",
  code: 'MSGBRIDGE_KAFKAJS_SEND_UNFIXED',
});
