import './kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed
import { AssignerProtocol, type Admin } from 'kafkajs';
import { kafkajsClient, type KafkaSource } from './client.js';
import { decodeQueryUrl } from './co-partition-assigner.js';

/**
 * Which member answers for which task, read from the group itself: every member publishes its
 * query address in its join metadata, and the group's description carries each member's
 * assignment (the way Kafka Streams' interactive queries find the host of a key). Cached
 * briefly; refreshed after a rebalance or when a forward failed.
 */
export interface GroupDirectory {
  /** Task → the query address of the member that owns it (missing while the group rebalances). */
  owners(): Promise<Map<number, string>>;
  /** Every member's query address (members that published none are left out). */
  members(): Promise<string[]>;
  invalidate(): void;
}

export function groupDirectory(admin: Admin, groupId: string, inputTopic: string, maxAgeMs = 5_000): GroupDirectory {
  let cached: { at: number; owners: Map<number, string>; members: string[] } | undefined;
  let reading: Promise<NonNullable<typeof cached>> | undefined;
  const read = async () => {
    const { groups } = await admin.describeGroups([groupId]);
    const owners = new Map<number, string>();
    const members = new Set<string>();
    for (const member of groups[0]?.members ?? []) {
      const url = decodeQueryUrl(member.memberMetadata);
      if (!url) continue;
      members.add(url);
      try {
        const tasks = AssignerProtocol.MemberAssignment.decode(member.memberAssignment)?.assignment[inputTopic] ?? [];
        for (const task of tasks) owners.set(task, url);
      } catch {
        // A member mid-rebalance carries no assignment yet.
      }
    }
    return { at: Date.now(), owners, members: [...members] };
  };
  const fresh = async () => {
    if (cached && Date.now() - cached.at < maxAgeMs) return cached;
    reading ??= read().finally(() => (reading = undefined));
    cached = await reading;
    return cached;
  };
  return {
    owners: async () => (await fresh()).owners,
    members: async () => (await fresh()).members,
    invalidate: () => (cached = undefined),
  };
}

/** A directory with an admin client of its own: `connect` before the first read, `close` at the end. */
export interface OwnedGroupDirectory extends GroupDirectory {
  connect(): Promise<void>;
  close(): Promise<void>;
}

/** The directory of `groupId` read through a new admin client of `kafka` (the tracker's query forwarding). */
export function openGroupDirectory(
  kafka: KafkaSource,
  groupId: string,
  inputTopic: string,
  maxAgeMs?: number,
): OwnedGroupDirectory {
  const admin = kafkajsClient(kafka).admin();
  return {
    ...groupDirectory(admin, groupId, inputTopic, maxAgeMs),
    connect: () => admin.connect(),
    close: () => admin.disconnect(),
  };
}
