import { randomUUID } from 'node:crypto';
import { describe, expect, inject, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { createKafkajsClient } from '../../src/kafka/client.js';
import { createKafkajsProducer } from '../../src/kafka/kafkajs-producer.js';
import { ensureTopics } from '../../src/kafka/topics.js';
import { consumeRecords, createTopics, kafkaBrokers, uniqueTopic, withAdmin } from '../helpers/kafka.js';

describe('Kafka plumbing against the broker the suite started', () => {
  it('uses the broker provided by the global setup', () => {
    expect(['env', 'container', 'local']).toContain(inject('kafkaSource'));
    expect(kafkaBrokers()[0]).toMatch(/^[^:]+:\d+$/);
  });

  it('writes records with keys and headers that an independent consumer group reads back intact', async () => {
    const topic = uniqueTopic('roundtrip');
    await createTopics([topic], 3);
    const config = loadConfig({ env: { KAFKA_BROKERS: kafkaBrokers().join(',') } });
    const producer = createKafkajsProducer(createKafkajsClient(config.kafka));
    await producer.connect();
    const binary = Buffer.from([0, 1, 2, 250, 251, 255]);
    const sent = Array.from({ length: 20 }, (_, i) => ({
      key: `key-${i % 4}`,
      value: i === 7 ? binary : `{"n":${i},"id":"${randomUUID()}"}`,
      headers: { 'event-id': `e-${i}`, 'business-id': 'biz_1', 'content-type': 'application/json' },
    }));
    await producer.send([{ topic, records: sent }]);
    await producer.disconnect();

    const read = await consumeRecords(topic, sent.length, { settleMs: 300 });
    expect(read).toHaveLength(sent.length);
    const byEventId = new Map(read.map((r) => [r.headers['event-id'], r]));
    for (const record of sent) {
      const got = byEventId.get(record.headers['event-id'])!;
      expect(got.key).toBe(record.key);
      expect(Buffer.compare(got.value, Buffer.from(record.value))).toBe(0);
      expect(got.headers).toEqual(record.headers);
    }
    // One key, one partition, in order.
    const key0 = read.filter((r) => r.key === 'key-0');
    expect(new Set(key0.map((r) => r.partition)).size).toBe(1);
    expect(key0.map((r) => r.headers['event-id'])).toEqual(['e-0', 'e-4', 'e-8', 'e-12', 'e-16']);
  });

  it('creates missing topics with the configured partitions and leaves existing ones alone', async () => {
    const existing = uniqueTopic('existing');
    const fresh = [uniqueTopic('fresh'), uniqueTopic('fresh')];
    await createTopics([existing], 2);
    const kafka = createKafkajsClient(loadConfig({ env: { KAFKA_BROKERS: kafkaBrokers().join(',') } }).kafka);
    const admin = kafka.admin();
    await admin.connect();
    try {
      const created = await ensureTopics(
        admin,
        [existing, ...fresh].map((topic) => ({ topic, partitions: 5, replicationFactor: 3 })),
      );
      expect(created.sort()).toEqual([...fresh].sort());
      // Idempotent: a second call creates nothing.
      expect(
        await ensureTopics(
          admin,
          fresh.map((topic) => ({ topic, partitions: 5, replicationFactor: 1 })),
        ),
      ).toEqual([]);
    } finally {
      await admin.disconnect();
    }
    const metadata = await withAdmin((a) => a.fetchTopicMetadata({ topics: [existing, ...fresh] }));
    const partitions = Object.fromEntries(metadata.topics.map((t) => [t.name, t.partitions.length]));
    expect(partitions).toEqual({ [existing]: 2, [fresh[0]!]: 5, [fresh[1]!]: 5 });
  });
});
