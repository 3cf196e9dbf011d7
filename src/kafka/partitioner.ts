/**
 * The Java client's default key partitioner: `toPositive(murmur2(keyBytes)) % partitions`.
 *
 * kafkajs 2.x uses it by default (its DefaultPartitioner); @platformatic/kafka's default does
 * not (it takes `murmur2(key) >>> 0`, which puts about half of all keys on another partition).
 * Every producer of the relay must place a key where the others do: the topic contract (docs/topics.md) relies on
 * `delivery_status` (ingress) and `send-results` (sender) being co-partitioned by message id,
 * and per-key order must survive switching the ingress between clients. 32-bit integer
 * arithmetic (Math.imul) instead of BigInt or Long: this runs once per record.
 */
export function murmur2(data: Uint8Array): number {
  const m = 0x5bd1e995;
  const length = data.length;
  let h = (0x9747b28c ^ length) | 0;
  const length4 = length >>> 2;
  for (let i = 0; i < length4; i++) {
    const i4 = i << 2;
    let k = data[i4]! | (data[i4 + 1]! << 8) | (data[i4 + 2]! << 16) | (data[i4 + 3]! << 24);
    k = Math.imul(k, m);
    k ^= k >>> 24;
    k = Math.imul(k, m);
    h = Math.imul(h, m) ^ k;
  }
  const tail = length & ~3;
  const rest = length & 3;
  if (rest > 0) {
    if (rest === 3) h ^= data[tail + 2]! << 16;
    if (rest >= 2) h ^= data[tail + 1]! << 8;
    h ^= data[tail]!;
    h = Math.imul(h, m);
  }
  h ^= h >>> 13;
  h = Math.imul(h, m);
  h ^= h >>> 15;
  return h | 0;
}

/** A non-negative hash; the partition is this modulo the partition count. */
export function javaCompatibleHash(key: Uint8Array): number {
  return murmur2(key) & 0x7fffffff;
}
