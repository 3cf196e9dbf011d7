import { randomBytes, randomUUID } from 'node:crypto';
import { Partitioners } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { javaCompatibleHash, murmur2 } from '../../src/kafka/partitioner.js';

describe('Java-compatible key partitioning', () => {
  it('matches known murmur2 values of the Java client', () => {
    // The Java client's own vectors (UtilsTest.testMurmur2).
    const cases: [string, number][] = [
      ['21', -973932308],
      ['foobar', -790332482],
      ['a-little-bit-long-string', -985981536],
      ['a-little-bit-longer-string', -1486304829],
      ['lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8', -58897971],
      ['abc', 479470107],
    ];
    for (const [key, hash] of cases) expect(murmur2(Buffer.from(key))).toBe(hash);
  });

  it('puts every key on the partition kafkajs (DefaultPartitioner) puts it on', () => {
    const kafkajs = Partitioners.DefaultPartitioner();
    const keys = [
      '',
      'a',
      '+15550002222',
      'biz_1',
      '01JABCDEFGHJKMNPQRSTVWXYZ0',
      'ünïcødé ✓ 😀',
      ...Array.from({ length: 300 }, (_, i) => randomUUID().slice(0, i % 37)),
      ...Array.from({ length: 200 }, (_, i) => randomBytes(i % 29).toString('latin1')),
    ];
    for (const partitions of [1, 2, 3, 6, 12, 50, 101]) {
      const partitionMetadata = Array.from({ length: partitions }, (_, partitionId) => ({
        partitionId,
        leader: 0,
        partitionErrorCode: 0,
        replicas: [0],
        isr: [0],
      }));
      for (const key of keys) {
        const expected = kafkajs({ topic: 't', partitionMetadata, message: { key, value: null } });
        expect({ key, partitions, partition: javaCompatibleHash(Buffer.from(key)) % partitions }).toEqual({
          key,
          partitions,
          partition: expected,
        });
      }
    }
  });
});
