import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { createKafka } from '../../src/kafka/client.js';
import { createKafkajsProducer } from '../../src/kafka/kafkajs-producer.js';
import { createPlatformaticProducer, platformaticProducerOptions } from '../../src/kafka/platformatic-producer.js';
import type { RecordProducer, RecordToWrite } from '../../src/kafka/port.js';
import { consumeRecords, countRecords, createTopics, kafkaBrokers, uniqueTopic } from '../helpers/kafka.js';

const config = () => loadConfig({ env: { KAFKA_BROKERS: kafkaBrokers().join(',') } });

async function using<T>(producer: RecordProducer, fn: (p: RecordProducer) => Promise<T>): Promise<T> {
  await producer.connect();
  try {
    return await fn(producer);
  } finally {
    await producer.disconnect();
  }
}

describe('the @platformatic/kafka producer behind the RecordProducer port', () => {
  it('writes keys, values byte for byte and headers, several topics in one send, one key in order', async () => {
    const [a, b] = [uniqueTopic('plt-a'), uniqueTopic('plt-b')];
    await createTopics([a, b], 3);
    const binary = Buffer.from([0, 1, 2, 250, 251, 255]);
    const records: RecordToWrite[] = Array.from({ length: 20 }, (_, i) => ({
      key: `key-${i % 4}`,
      value: i === 7 ? binary : `{"n":${i},"id":"${randomUUID()}","text":"ünïcødé ✓"}`,
      headers: { 'event-id': `e-${i}`, 'business-id': 'biz_1', 'error-reason': 'schema: ✓ unicode' },
    }));
    await using(createPlatformaticProducer(config().kafka, { brokers: kafkaBrokers() }), (p) =>
      p.send([
        { topic: a, records },
        { topic: b, records: [{ key: null, value: 'no key', headers: {} }] },
      ]),
    );
    const read = await consumeRecords(a, records.length, { settleMs: 300 });
    expect(read).toHaveLength(records.length);
    const byEventId = new Map(read.map((r) => [r.headers['event-id'], r]));
    for (const record of records) {
      const got = byEventId.get(record.headers['event-id'] as string)!;
      expect(got.key).toBe(record.key);
      expect(got.value.equals(Buffer.from(record.value))).toBe(true);
      expect(got.headers).toEqual(record.headers);
    }
    const key0 = read.filter((r) => r.key === 'key-0');
    expect(new Set(key0.map((r) => r.partition)).size).toBe(1);
    expect(key0.map((r) => r.headers['event-id'])).toEqual(['e-0', 'e-4', 'e-8', 'e-12', 'e-16']);
    const [unkeyed] = await consumeRecords(b, 1);
    expect(unkeyed!.key).toBeNull();
    expect(unkeyed!.value.toString()).toBe('no key');
  });

  it('puts every key on the partition kafkajs puts it on', async () => {
    const [viaKafkajs, viaPlatformatic] = [uniqueTopic('p-kjs'), uniqueTopic('p-plt')];
    await createTopics([viaKafkajs, viaPlatformatic], 6);
    const records = Array.from({ length: 60 }, (_, i) => ({
      key: i % 2 ? `+1555${String(i).padStart(7, '0')}` : randomUUID(),
      value: String(i),
      headers: {},
    }));
    await using(createKafkajsProducer(createKafka(config().kafka)), (p) => p.send([{ topic: viaKafkajs, records }]));
    await using(createPlatformaticProducer(config().kafka, { brokers: kafkaBrokers() }), (p) =>
      p.send([{ topic: viaPlatformatic, records }]),
    );
    const partitionOf = async (topic: string) =>
      new Map((await consumeRecords(topic, records.length)).map((r) => [r.key, r.partition]));
    const [expected, actual] = await Promise.all([partitionOf(viaKafkajs), partitionOf(viaPlatformatic)]);
    expect(new Set(expected.values()).size).toBeGreaterThan(1);
    expect(actual).toEqual(expected);
  });

  it('writes every record of overlapping sends (they are serialised: sequence numbers would collide)', async () => {
    const topic = uniqueTopic('plt-overlap');
    await createTopics([topic], 1);
    const batch = (n: number) => [
      { topic, records: Array.from({ length: 10 }, (_, i) => ({ key: 'same-key', value: `${n}-${i}`, headers: {} })) },
    ];
    const values = await using(createPlatformaticProducer(config().kafka, { brokers: kafkaBrokers() }), async (p) => {
      // Same size, same partition: without serialisation the broker would take the later ones
      // for duplicates of the first and acknowledge them without writing them.
      await Promise.all([p.send(batch(1)), p.send(batch(2)), p.send(batch(3))]);
      return (await consumeRecords(topic, 30, { settleMs: 200 })).map((r) => r.value.toString());
    });
    expect(values).toEqual([1, 2, 3].flatMap((n) => Array.from({ length: 10 }, (_, i) => `${n}-${i}`)));
    expect(await countRecords(topic)).toBe(30);
  });

  it('refuses every send after a failed one: a failed producer must be replaced', async () => {
    const topic = uniqueTopic('plt-after-failure');
    await createTopics([topic], 1);
    await using(createPlatformaticProducer(config().kafka, { brokers: kafkaBrokers(), retries: 2 }), async (p) => {
      await expect(
        p.send([{ topic: uniqueTopic('missing'), records: [{ key: 'k', value: 'v', headers: {} }] }]),
      ).rejects.toThrow();
      await expect(p.send([{ topic, records: [{ key: 'k', value: 'v', headers: {} }] }])).rejects.toThrow(
        /must be replaced/,
      );
    });
    expect(await countRecords(topic)).toBe(0);
  });

  it.each(['platformatic', 'kafkajs'] as const)(
    'probe (%s client): passes when every partition has a leader, names a missing topic',
    async (client) => {
      const topics = [uniqueTopic('probe-a'), uniqueTopic('probe-b')];
      await createTopics(topics, 3);
      const producer =
        client === 'platformatic'
          ? createPlatformaticProducer(config().kafka, { brokers: kafkaBrokers() })
          : createKafkajsProducer(createKafka(config().kafka));
      await using(producer, async (p) => {
        await expect(p.probe!(topics)).resolves.toBeUndefined();
        const missing = uniqueTopic('probe-missing');
        await expect(p.probe!([topics[0]!, missing])).rejects.toThrow(
          new RegExp(`${missing}|does not host this topic`),
        );
      });
    },
  );

  it('rejects connect when no broker answers, within its retry budget', async () => {
    const c = loadConfig({ env: {}, overrides: { kafka: { connectionTimeoutMs: 500, requestTimeoutMs: 1000 } } });
    const producer = createPlatformaticProducer(c.kafka, { brokers: ['127.0.0.1:1'], retries: 2 });
    const started = Date.now();
    await expect(producer.connect()).rejects.toThrow();
    expect(Date.now() - started).toBeLessThan(10_000);
    await producer.disconnect();
  });

  it('maps TLS and SASL from the configuration, and never retries forever', () => {
    const base = config().kafka;
    const plain = platformaticProducerOptions(base, { brokers: ['b:9092'] });
    expect(plain).toMatchObject({
      clientId: 'msgbridge',
      bootstrapBrokers: ['b:9092'],
      idempotent: true,
      acks: -1,
      connectTimeout: base.connectionTimeoutMs,
      requestTimeout: base.requestTimeoutMs,
      retries: 5,
    });
    expect(plain.tls).toBeUndefined();
    expect(plain.sasl).toBeUndefined();
    expect(platformaticProducerOptions(base, { brokers: ['b:9092'], retries: 0 }).retries).toBe(2);
    const secured = platformaticProducerOptions(
      {
        ...base,
        ssl: { rejectUnauthorized: false, ca: 'CA' },
        sasl: { mechanism: 'scram-sha-512', username: 'u', password: 'p' },
      },
      { brokers: ['b:9093'] },
    );
    expect(secured.tls).toEqual({ rejectUnauthorized: false, ca: 'CA' });
    expect(secured.tlsServerName).toBe(true);
    expect(secured.sasl).toEqual({ mechanism: 'SCRAM-SHA-512', username: 'u', password: 'p' });
    expect(platformaticProducerOptions({ ...base, ssl: true }, { brokers: ['b:9093'] }).tls).toEqual({});
  });
});
