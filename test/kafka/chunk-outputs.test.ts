import { describe, expect, it } from 'vitest';
import { chunkOutputs, type OutputRecord } from '../../src/kafka/transactional-engine.js';

describe('chunkOutputs (produce requests of bounded size inside one transaction)', () => {
  const record = (n: number, bytes: number): OutputRecord => ({
    topic: 't',
    partition: 0,
    key: `k${n}`,
    value: 'v'.repeat(bytes),
    headers: { 'event-id': 'e'.repeat(64) },
  });

  it('keeps order, never passes the bound with two or more records, and puts a larger record alone', () => {
    const outputs = [
      ...Array.from({ length: 3000 }, (_, i) => record(i, 600)),
      record(3000, 400_000),
      record(3001, 600),
    ];
    const chunks = chunkOutputs(outputs, 256 * 1024);
    expect(chunks.flat()).toEqual(outputs);
    for (const chunk of chunks) {
      const bytes = chunk.reduce(
        (n, o) => n + 64 + String(o.key).length + String(o.value).length + 8 + 'event-id'.length + 64,
        0,
      );
      if (chunk.length > 1) expect(bytes).toBeLessThanOrEqual(256 * 1024);
    }
    expect(chunks.find((c) => c.some((o) => o.key === 'k3000'))).toHaveLength(1);
    expect(chunks.length).toBeGreaterThanOrEqual(Math.ceil((3000 * 700) / (256 * 1024)));
  });

  it('makes no chunk of nothing', () => {
    expect(chunkOutputs([], 1000)).toEqual([]);
  });
});
