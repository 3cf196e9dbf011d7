import { readFileSync } from 'node:fs';
import { createRequire, Module } from 'node:module';
import { describe, expect, it } from 'vitest';

interface Partition {
  partition: number;
  messages: { value: string }[];
}
import { createSendMessages } from '../../src/kafka/kafkajs-send-fix.js';

const require = createRequire(import.meta.url);
const createRetry = require('kafkajs/src/retry') as (options: object) => unknown;

/** kafkajs's own sendMessages, compiled from its file (the cache holds the fixed one). */
function originalSendMessages(): typeof createSendMessages {
  const file = require.resolve('kafkajs/src/producer/sendMessages.js');
  const m = new Module(file) as Module & { _compile(source: string, file: string): void };
  m.filename = file;
  m.paths = (Module as unknown as { _nodeModulePaths(dir: string): string[] })._nodeModulePaths(file);
  m._compile(readFileSync(file, 'utf8'), file);
  return m.exports as typeof createSendMessages;
}

/**
 * A cluster of two brokers for kafkajs's send loop: partition 0 led by broker 1, partition 1 by broker 2. Broker 2
 * refuses its first produce (it died) and the metadata refreshed after it says broker 1 leads partition 1 now.
 */
function brokerDiesAndItsPartitionMoves() {
  const written: { broker: number; partition: number; values: string[] }[] = [];
  let leaders: Record<number, number> = { 0: 1, 1: 2 };
  const broker = (id: number) => ({
    nodeId: id,
    produce: async ({ topicData }: { topicData: { topic: string; partitions: Partition[] }[] }) => {
      if (id === 2) {
        const error = Object.assign(new Error('Connection error: connect ECONNREFUSED'), {
          name: 'KafkaJSConnectionError',
          retriable: true,
        });
        throw error;
      }
      for (const t of topicData)
        for (const p of t.partitions)
          written.push({ broker: id, partition: p.partition, values: p.messages.map((m) => m.value) });
      return {
        topics: topicData.map((t) => ({
          topicName: t.topic,
          partitions: t.partitions.map((p) => ({ partition: p.partition, errorCode: 0, baseOffset: '0' })),
        })),
      };
    },
  });
  const brokers = new Map([
    [1, broker(1)],
    [2, broker(2)],
  ]);
  const metadata = () => [0, 1].map((p) => ({ partitionId: p, leader: leaders[p] }));
  const cluster = {
    refreshMetadataIfNecessary: async () => undefined,
    refreshMetadata: async () => {
      leaders = { 0: 1, 1: 1 };
    },
    addMultipleTargetTopics: async () => undefined,
    isConnected: () => true,
    connect: async () => undefined,
    removeBroker: () => undefined,
    findTopicPartitionMetadata: () => metadata(),
    findLeaderForPartitions: (_topic: string, partitions: string[]) => {
      const result: Record<number, number[]> = {};
      for (const p of partitions) (result[leaders[Number(p)]!] ??= []).push(Number(p));
      return result;
    },
    findBroker: async ({ nodeId }: { nodeId: string | number }) => brokers.get(Number(nodeId))!,
  };
  const eosManager = {
    acquireBrokerLock: async () => undefined,
    releaseBrokerLock: async () => undefined,
    isTransactional: () => false,
    getSequence: () => 0,
    updateSequence: () => undefined,
    getProducerId: () => -1,
    getProducerEpoch: () => 0,
    getTransactionalId: () => undefined,
  };
  const quiet = { debug: () => undefined, error: () => undefined };
  const options = {
    logger: quiet,
    cluster,
    eosManager,
    partitioner: ({ message }: { message: { partition: number } }) => message.partition,
    retrier: createRetry({ retries: 3, initialRetryTime: 1, maxRetryTime: 5 }),
  };
  const send = {
    acks: -1,
    timeout: 1000,
    compression: 0,
    topicMessages: [
      {
        topic: 't',
        messages: [
          { partition: 0, value: 'a' },
          { partition: 1, value: 'b' },
        ],
      },
    ],
  };
  return { written, options, send };
}

describe("kafkajs's send, fixed", () => {
  it('kafkajs 2.2.4 acknowledges a send whose moved partition it never wrote (the bug this fixes)', async () => {
    const { written, options, send } = brokerDiesAndItsPartitionMoves();
    const responses = await originalSendMessages()(options)(send);
    expect(responses).toHaveLength(1);
    expect(written.flatMap((w) => w.values)).toEqual(['a']); // 'b' is lost, and the send resolved
  });

  it("sends a failed partition again to its new leader, though that broker already answered for the send's others", async () => {
    const { written, options, send } = brokerDiesAndItsPartitionMoves();
    const responses = await createSendMessages(options)(send);
    expect(written).toEqual([
      { broker: 1, partition: 0, values: ['a'] },
      { broker: 1, partition: 1, values: ['b'] },
    ]);
    expect(responses).toHaveLength(2);
  });

  it('a partition missing from the metadata fails the send instead of being left out', async () => {
    const { options, send } = brokerDiesAndItsPartitionMoves();
    const cluster = { ...options.cluster, findLeaderForPartitions: () => ({ 1: [0] }) };
    await expect(createSendMessages({ ...options, cluster })(send)).rejects.toThrow(/missing from the metadata/);
  });

  it('is what kafkajs producers use once the fix is loaded', () => {
    const installed = require('kafkajs/src/producer/sendMessages.js') as unknown;
    expect((installed as Record<symbol, unknown>)[Symbol.for('msgbridge.kafkajsSendFix')]).toBe(true);
  });
});
