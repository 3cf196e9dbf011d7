import './kafkajs-send-fix.js'; // before kafkajs: its producers' send fixed
import { AssignerProtocol, type GroupMember, type GroupMemberAssignment, type PartitionAssigner } from 'kafkajs';
import { MsgbridgeError } from '../platform/errors.js';

/**
 * The group protocol name of the assigner below: every member of a transactional engine's group
 * offers only this one, so the broker never picks another (README "Exactly once").
 */
export const CO_PARTITIONED_PROTOCOL = 'msgbridge-co-partitioned';
const VERSION = 1;

/**
 * Whole tasks per member: task p is partition p of every input topic (the inputs are keyed by
 * the same id with the same partitioner, so partition p of each holds the same keys), and a
 * member that owns task p owns partition p of all of them. Balanced (task counts differ by at
 * most one) and sticky: a member keeps the tasks it announces in its join metadata up to its
 * share, so a rebalance moves only the tasks that must move (each move costs a restore).
 */
export function planTasks(
  taskCount: number,
  members: { memberId: string; previous: readonly number[] }[],
): Map<string, number[]> {
  const plan = new Map<string, number[]>();
  if (members.length === 0) return plan;
  const base = Math.floor(taskCount / members.length);
  const extra = taskCount % members.length;
  // The larger shares go to the members that held the most, so fewer tasks move.
  const order = [...members].sort(
    (a, b) => b.previous.length - a.previous.length || (a.memberId < b.memberId ? -1 : a.memberId > b.memberId ? 1 : 0),
  );
  const capacity = new Map(order.map((m, i) => [m.memberId, base + (i < extra ? 1 : 0)]));
  const taken = new Set<number>();
  for (const m of order) {
    const kept: number[] = [];
    for (const task of [...new Set(m.previous)].sort((a, b) => a - b)) {
      if (kept.length >= capacity.get(m.memberId)!) break;
      if (Number.isInteger(task) && task >= 0 && task < taskCount && !taken.has(task)) {
        kept.push(task);
        taken.add(task);
      }
    }
    plan.set(m.memberId, kept);
  }
  let next = 0;
  for (const m of order) {
    const tasks = plan.get(m.memberId)!;
    while (tasks.length < capacity.get(m.memberId)!) {
      while (taken.has(next)) next++;
      tasks.push(next);
      taken.add(next);
    }
    tasks.sort((a, b) => a - b);
  }
  return plan;
}

/**
 * The tasks a member announces it owns, and the address where it answers queries (other members
 * forward to it: README "Queries"), carried as the user data of its join metadata.
 */
export function encodeOwnedTasks(topics: string[], tasks: readonly number[], queryUrl?: string): Buffer {
  return AssignerProtocol.MemberMetadata.encode({
    version: VERSION,
    topics,
    userData: Buffer.from(JSON.stringify({ tasks: [...tasks], ...(queryUrl ? { url: queryUrl } : {}) })),
  });
}

/** The query address a member published in its join metadata, if any. */
export function decodeQueryUrl(metadata: Buffer): string | undefined {
  try {
    const { userData } = AssignerProtocol.MemberMetadata.decode(metadata) ?? {};
    const parsed = JSON.parse(userData?.toString() || '{}') as { url?: unknown };
    return typeof parsed.url === 'string' ? parsed.url : undefined;
  } catch {
    return undefined;
  }
}

export function decodeOwnedTasks(metadata: Buffer): number[] {
  try {
    const { userData } = AssignerProtocol.MemberMetadata.decode(metadata) ?? {};
    const parsed = JSON.parse(userData?.toString() || '{}') as { tasks?: unknown };
    return Array.isArray(parsed.tasks) ? parsed.tasks.filter((t): t is number => Number.isInteger(t)) : [];
  } catch {
    // A member with unreadable metadata simply keeps nothing.
    return [];
  }
}

/**
 * Fails when the input topics do not have the same partition count: partition p of each would
 * then not hold the same keys, and a task could not be processed on its own.
 */
export function checkCoPartitioned(counts: Map<string, number>): number {
  const distinct = new Set(counts.values());
  if (distinct.size !== 1) {
    const listed = [...counts].map(([topic, n]) => `${topic}: ${n}`).join(', ');
    throw new MsgbridgeError(
      'CONFIG_INVALID',
      `the input topics must have the same number of partitions to be processed as co-partitioned tasks (${listed})`,
    );
  }
  const [count] = distinct;
  if (!count)
    throw new MsgbridgeError(
      'CONFIG_INVALID',
      `the input topics have no partitions (${[...counts.keys()].join(', ')})`,
    );
  return count;
}

/**
 * The kafkajs assigner. `ownedTasks` is read at every join (what this member announces);
 * `partitionCount` comes from the leader's fresh metadata.
 */
export function coPartitionedAssigner(options: {
  ownedTasks: () => readonly number[];
  queryUrl?: string;
}): PartitionAssigner {
  return ({ cluster }) => ({
    name: CO_PARTITIONED_PROTOCOL,
    version: VERSION,
    async assign({ members, topics }: { members: GroupMember[]; topics: string[] }): Promise<GroupMemberAssignment[]> {
      const counts = new Map(topics.map((topic) => [topic, cluster.findTopicPartitionMetadata(topic).length]));
      const taskCount = checkCoPartitioned(counts);
      const plan = planTasks(
        taskCount,
        members.map((m) => ({ memberId: m.memberId, previous: decodeOwnedTasks(m.memberMetadata) })),
      );
      return members.map(({ memberId }) => {
        const tasks = plan.get(memberId) ?? [];
        const assignment = Object.fromEntries(topics.map((topic) => [topic, tasks]));
        return {
          memberId,
          memberAssignment: AssignerProtocol.MemberAssignment.encode({
            version: VERSION,
            assignment,
            userData: Buffer.alloc(0),
          }),
        };
      });
    },
    protocol({ topics }: { topics: string[] }) {
      return {
        name: CO_PARTITIONED_PROTOCOL,
        metadata: encodeOwnedTasks(topics, options.ownedTasks(), options.queryUrl),
      };
    },
  });
}
