import { describe, expect, it } from 'vitest';
import { decodeCompleted, encodeCompleted } from '../../src/sender/offset-metadata.js';

describe('commit metadata', () => {
  it('round-trips the finished offsets above a commit point', () => {
    const encoded = encodeCompleted(100, [101, 103, 108, 250]);
    expect(encoded).toMatch(/^mb1:100:[A-Za-z0-9_-]+$/);
    expect(decodeCompleted(encoded, 100)).toEqual([101, 103, 108, 250]);
    expect(encodeCompleted(100, [])).toBeNull();
    expect(encodeCompleted(100, [99, 100])).toBeNull();
  });

  it('ignores metadata written for another offset or in another format', () => {
    const encoded = encodeCompleted(100, [101]);
    expect(decodeCompleted(encoded, 101)).toEqual([]);
    expect(decodeCompleted('', 100)).toEqual([]);
    expect(decodeCompleted(null, 100)).toEqual([]);
    expect(decodeCompleted('something else', 100)).toEqual([]);
    expect(decodeCompleted('mb1:100:!!', 100)).toEqual([]);
  });

  it('stays under the size limit by dropping the highest offsets (which then run again, never lost)', () => {
    const offsets = Array.from({ length: 50_000 }, (_, i) => 1 + i * 2);
    const encoded = encodeCompleted(0, offsets, 4000)!;
    expect(encoded.length).toBeLessThanOrEqual(4000);
    const decoded = decodeCompleted(encoded, 0);
    expect(decoded.length).toBeGreaterThan(10_000);
    expect(decoded).toEqual(offsets.slice(0, decoded.length));
  });
});
