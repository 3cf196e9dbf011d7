import type { Admin } from 'kafkajs';
import { kafkajsClient, type KafkaSource } from './client.js';

/** The group's lag per input topic, read at most every 5 s (scrapes can be frequent). */
export function lagReader(
  kafka: KafkaSource,
  groupId: string,
  inputs: string[],
): { read(): Promise<Map<string, number>>; close(): Promise<void> } {
  let admin: Admin | undefined;
  let last: { at: number; value: Map<string, number> } | undefined;
  return {
    async read() {
      if (last && Date.now() - last.at < 5000) return last.value;
      admin ??= kafkajsClient(kafka).admin();
      await admin.connect();
      const value = new Map<string, number>();
      for (const topic of inputs) {
        const [ends, committed] = await Promise.all([
          admin.fetchTopicOffsets(topic),
          admin.fetchOffsets({ groupId, topics: [topic] }),
        ]);
        const done = new Map((committed[0]?.partitions ?? []).map((p) => [p.partition, Number(p.offset)]));
        value.set(
          topic,
          ends.reduce((sum, p) => sum + Math.max(0, Number(p.offset) - Math.max(0, done.get(p.partition) ?? 0)), 0),
        );
      }
      last = { at: Date.now(), value };
      return value;
    },
    async close() {
      await admin?.disconnect().catch(() => undefined);
    },
  };
}
