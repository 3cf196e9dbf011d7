import { javaCompatibleHash } from '../kafka/partitioner.js';

/**
 * The partition of a record key as the Java client's default partitioner places it (murmur2 of
 * the key's UTF-8 bytes, made positive, modulo the partition count), which is where the relay's
 * own producers put it. For a producer whose client places keys otherwise (@platformatic/kafka,
 * librdkafka's default): give it this as its partitioner, or the partition explicitly.
 */
export function partitionOf(key: string | Uint8Array, partitions: number): number {
  if (!Number.isInteger(partitions) || partitions < 1)
    throw new RangeError(`partitions: expected a whole number of at least 1, got ${partitions}`);
  return javaCompatibleHash(typeof key === 'string' ? Buffer.from(key, 'utf8') : key) % partitions;
}
