/** Human-readable rendering of Kafka records for the operator commands. */
export function decodeValue(value: Buffer | null): unknown {
  if (value === null) return null;
  const text = value.toString('utf8');
  if (!Buffer.from(text, 'utf8').equals(value))
    return `<${value.length} bytes, hex ${value.subarray(0, 64).toString('hex')}${value.length > 64 ? '…' : ''}>`;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}
