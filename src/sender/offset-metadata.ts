/**
 * The offsets finished above a commit point, carried in the commit's metadata string so that
 * the next owner of the partition (after a rebalance, a restart or a crash of this process)
 * skips them instead of sending them again. The same idea as Confluent's parallel consumer.
 *
 * Format: `mb1:<commit offset>:<bitmap>`, the bitmap base64url, bit i (least significant
 * first within each byte) set when offset `commit + 1 + i` is finished. Brokers cap metadata
 * at `offset.metadata.max.bytes` (4096 by default): the bitmap is truncated to stay under
 * `maxChars`, which only means the truncated offsets may run again — never that one is lost.
 */
const PREFIX = 'mb1:';

export function encodeCompleted(
  commitOffset: number,
  completedAbove: readonly number[],
  maxChars = 4000,
): string | null {
  const above = completedAbove.filter((o) => o > commitOffset);
  if (above.length === 0) return null;
  const header = `${PREFIX}${commitOffset}:`;
  const maxBytes = Math.floor(((maxChars - header.length) * 3) / 4);
  if (maxBytes <= 0) return null;
  const highest = Math.max(...above);
  const bytes = Buffer.alloc(Math.min(maxBytes, Math.ceil((highest - commitOffset) / 8)));
  for (const offset of above) {
    const bit = offset - commitOffset - 1;
    const index = bit >> 3;
    if (index >= bytes.length) continue;
    bytes[index] = (bytes[index] as number) | (1 << (bit & 7));
  }
  return `${header}${bytes.toString('base64url')}`;
}

/**
 * Offsets the metadata marks finished, when it was written for `committedOffset` (metadata of
 * another offset, or of another format, yields nothing).
 */
export function decodeCompleted(metadata: string | null | undefined, committedOffset: number): number[] {
  if (!metadata || !metadata.startsWith(PREFIX)) return [];
  const rest = metadata.slice(PREFIX.length);
  const colon = rest.indexOf(':');
  if (colon < 0) return [];
  const base = Number(rest.slice(0, colon));
  if (!Number.isSafeInteger(base) || base !== committedOffset) return [];
  const bitmap = rest.slice(colon + 1);
  if (!/^[A-Za-z0-9_-]*$/.test(bitmap)) return [];
  const bytes = Buffer.from(bitmap, 'base64url');
  const out: number[] = [];
  for (let index = 0; index < bytes.length; index++) {
    const byte = bytes[index] as number;
    if (byte === 0) continue;
    for (let b = 0; b < 8; b++) if (byte & (1 << b)) out.push(base + 1 + index * 8 + b);
  }
  return out;
}
