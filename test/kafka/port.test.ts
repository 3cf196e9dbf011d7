import { describe, expect, it } from 'vitest';
import { assertWritable } from '../../src/kafka/port.js';

describe('assertWritable (what an idle probe checks in a metadata answer)', () => {
  const led = (topic: string, count: number) =>
    Array.from({ length: count }, (_, partition) => ({ topic, partition, leader: 1 }));

  it('passes when every partition of every topic has a leader', () => {
    expect(() =>
      assertWritable(['messages', 'delivery_status'], [...led('messages', 3), ...led('delivery_status', 2)]),
    ).not.toThrow();
  });

  it('names the partitions without a leader, in order, and a missing topic', () => {
    const partitions = [...led('messages', 4), ...led('delivery_status', 1)];
    partitions[3]!.leader = -1;
    partitions[1]!.leader = -1;
    expect(() => assertWritable(['messages', 'delivery_status', 'webhooks-dlq'], partitions)).toThrow(
      'Kafka answers but cannot take writes: topic messages has no leader for partitions 1, 3; topic webhooks-dlq is missing',
    );
    expect(() => assertWritable(['delivery_status'], [{ topic: 'delivery_status', partition: 0, leader: -1 }])).toThrow(
      /delivery_status has no leader for partition 0$/,
    );
  });
});
