import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  CommitMetadataTooLargeError,
  RejoinNeededError,
  type BatchControl,
  type CommittedOffset,
  type ConsumedRecord,
  type GroupConsumer,
  type GroupConsumerHandlers,
  type OffsetToCommit,
} from '../../src/kafka/group-consumer.js';
import { silentLogger } from '../../src/platform/logger.js';
import { watchIntervals } from '../helpers/intervals.js';
import { KeyedRunner } from '../../src/sender/keyed-runner.js';
import { encodeCompleted } from '../../src/sender/offset-metadata.js';
import { fetchBytesPerPartition, PartitionConsumer } from '../../src/sender/partition-consumer.js';

/** A GroupConsumer the test drives: it calls the handlers itself and records what the member does. */
class FakeGroup implements GroupConsumer {
  handlers!: GroupConsumerHandlers;
  commits: OffsetToCommit[][] = [];
  committed: CommittedOffset[] = [];
  refuseMetadata = false;
  failNextCommits = 0;
  paused = false;
  stopped = false;
  async start(handlers: GroupConsumerHandlers) {
    this.handlers = handlers;
  }
  async commit(offsets: OffsetToCommit[]) {
    if (this.refuseMetadata && offsets.some((o) => o.metadata !== null))
      throw new CommitMetadataTooLargeError('too large');
    if (this.failNextCommits > 0 && this.failNextCommits--) throw new Error('coordinator not available');
    this.commits.push(offsets);
  }
  async fetchCommitted(partitions: number[]) {
    return this.committed.filter((c) => partitions.includes(c.partition));
  }
  pauseAll() {
    this.paused = true;
  }
  async stop() {
    this.stopped = true;
  }
  lastCommitted(partition: number): OffsetToCommit | undefined {
    return this.commits
      .flat()
      .filter((o) => o.partition === partition)
      .at(-1);
  }
}

function control(overrides: Partial<BatchControl> = {}): BatchControl & { resolved: string[]; beats: number } {
  const c = {
    resolved: [] as string[],
    beats: 0,
    resolveOffset: (offset: string) => void c.resolved.push(offset),
    heartbeat: async () => void (c.beats += 1),
    isActive: () => true,
    ...overrides,
  };
  return c;
}

const records = (partition: number, from: number, n: number): ConsumedRecord[] =>
  Array.from({ length: n }, (_, i) => ({
    topic: 't',
    partition,
    offset: String(from + i),
    timestamp: '0',
    key: Buffer.from(`k${(from + i) % 3}`),
    value: Buffer.from(`v${from + i}`),
    headers: {},
  }));

function setup(options: { work?: (job: string) => Promise<'done' | 'abandoned'>; maxBuffered?: number } = {}) {
  const group = new FakeGroup();
  const worked: string[] = [];
  const runner = new KeyedRunner<string>({
    concurrency: 4,
    maxBuffered: options.maxBuffered ?? 100,
    work: async (job) => {
      worked.push(job);
      return options.work ? options.work(job) : 'done';
    },
  });
  const member = new PartitionConsumer<string>({
    consumer: group,
    runner,
    prepare: (record) => ({ job: record.value!.toString(), key: record.key!.toString() }),
    commitIntervalMs: 10,
    logger: silentLogger,
  });
  return { group, runner, member, worked };
}

const until = async (condition: () => boolean, ms = 2000) => {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 5));
  }
};

describe('PartitionConsumer (the sender member protocol, on a fake group)', () => {
  it('becomes ready on its first assignment, runs each record, and commits past the finished ones', async () => {
    const { group, member, worked } = setup();
    await member.start();
    expect(member.notReadyReason()).toMatch(/not yet a member/);
    group.handlers.onAssignment([0, 1], 'm1');
    await member.ready;
    expect(member.isMember()).toBe(true);
    const c = control();
    await group.handlers.onBatch(0, records(0, 10, 5), c);
    expect(c.resolved).toEqual(['10', '11', '12', '13', '14']);
    await until(() => group.lastCommitted(0)?.offset === 15);
    expect(worked).toEqual(['v10', 'v11', 'v12', 'v13', 'v14']);
    await member.drain(1000);
  });

  it('skips what the previous owner finished above the committed offset (commit metadata)', async () => {
    const { group, member, worked } = setup();
    group.committed = [{ partition: 2, offset: 100, metadata: encodeCompleted(100, [101, 103]) }];
    await member.start();
    group.handlers.onAssignment([2], 'm1');
    await group.handlers.onBatch(2, records(2, 100, 5), control());
    await until(() => group.lastCommitted(2)?.offset === 105);
    expect(worked).toEqual(['v100', 'v102', 'v104']);
    await member.drain(1000);
  });

  it('ends the batch when a heartbeat says the group rebalances, and takes nothing until the next assignment', async () => {
    const { group, member, worked } = setup();
    await member.start();
    group.handlers.onAssignment([0], 'm1');
    const rebalancing = control({ heartbeat: async () => Promise.reject(new RejoinNeededError('rebalancing')) });
    await expect(group.handlers.onBatch(0, records(0, 0, 3), rebalancing)).rejects.toBeInstanceOf(RejoinNeededError);
    // The rest of the same fetch returns at once, without heartbeating into the same error.
    const rest = control();
    await group.handlers.onBatch(0, records(0, 0, 3), rest);
    expect(rest.beats).toBe(0);
    expect(rest.resolved).toEqual([]);
    group.handlers.onAssignment([0], 'm1');
    await group.handlers.onBatch(0, records(0, 0, 3), control());
    await until(() => worked.length === 3);
    await member.drain(1000);
  });

  it('a new member id revokes everything it held; a lost partition is revoked and no longer committed', async () => {
    const { group, member, runner } = setup();
    await member.start();
    group.handlers.onAssignment([0, 1], 'm1');
    expect(runner.assigned().sort()).toEqual(['0', '1']);
    group.handlers.onAssignment([1], 'm1');
    expect(runner.assigned()).toEqual(['1']);
    const epoch = runner.epochOf('1');
    group.handlers.onAssignment([1], 'm2');
    expect(runner.epochOf('1')).not.toBe(epoch);
    await member.drain(1000);
  });

  it('commits without metadata once the broker refuses it', async () => {
    let release!: () => void;
    const blocked = new Promise<'done'>((r) => (release = () => r('done')));
    const { member: m2, group: g2 } = setup({ work: (job) => (job === 'v0' ? blocked : Promise.resolve('done')) });
    g2.refuseMetadata = true;
    await m2.start();
    g2.handlers.onAssignment([0], 'm1');
    await g2.handlers.onBatch(
      0,
      [...records(0, 0, 1), ...records(0, 1, 1).map((r) => ({ ...r, key: Buffer.from('other') }))],
      control(),
    );
    // Offset 1 finished above the unfinished 0: its commit needs metadata, which is refused, then dropped.
    await until(() => g2.commits.length > 0);
    expect(g2.commits[0]).toEqual([{ partition: 0, offset: 0, metadata: null }]);
    release();
    await until(() => g2.lastCommitted(0)?.offset === 2);
    await m2.drain(1000);
  });

  it('with the window full, waits for room while heartbeating', async () => {
    let release!: () => void;
    const blocked = new Promise<'done'>((r) => (release = () => r('done')));
    const { group, member } = setup({ maxBuffered: 2, work: () => blocked });
    await member.start();
    group.handlers.onAssignment([0], 'm1');
    const c = control();
    const batch = group.handlers.onBatch(0, records(0, 0, 4), c);
    // Two heartbeats while it waits (waited for as events: a loaded machine fires timers late).
    await until(() => c.beats >= 2, 10_000);
    expect(c.resolved).toEqual(['0', '1']);
    release();
    await batch;
    expect(c.resolved).toEqual(['0', '1', '2', '3']);
    await member.drain(1000);
  });

  it('drain: pauses, lets the work in progress finish, commits it, leaves the group', async () => {
    let release!: () => void;
    const blocked = new Promise<'done'>((r) => (release = () => r('done')));
    const { group, member } = setup({ work: () => blocked });
    await member.start();
    group.handlers.onAssignment([0], 'm1');
    await group.handlers.onBatch(0, records(0, 7, 1), control());
    const draining = member.drain(5000);
    expect(member.notReadyReason()).toBe('draining');
    expect(group.paused).toBe(true);
    setTimeout(release, 50);
    expect(await draining).toBe(true);
    expect(group.lastCommitted(0)?.offset).toBe(8);
    expect(group.stopped).toBe(true);
    expect(member.state).toBe('stopped');
  });

  describe('the periodic commit runs only while there is something to commit', () => {
    afterEach(() => vi.restoreAllMocks());

    /** The member's commit intervals: 10 ms in `setup`. */
    const watchCommitTimers = () => watchIntervals(10);

    it('an idle member stops its commit timer, and the next batch starts it and is committed', async () => {
      const timers = watchCommitTimers();
      const { group, member } = setup();
      await member.start();
      group.handlers.onAssignment([0], 'm1');
      expect(timers.live()).toBe(1);
      await group.handlers.onBatch(0, records(0, 10, 3), control());
      await until(() => group.lastCommitted(0)?.offset === 13);
      await until(() => timers.live() === 0);
      await group.handlers.onBatch(0, records(0, 13, 2), control());
      expect(timers.live()).toBe(1);
      expect(timers.started()).toBe(2);
      await until(() => group.lastCommitted(0)?.offset === 15);
      await member.drain(1000);
      expect(timers.live()).toBe(0);
    });

    it('a failed commit keeps the timer running until a commit succeeds, with no new batch', async () => {
      const timers = watchCommitTimers();
      const { group, member } = setup();
      await member.start();
      group.handlers.onAssignment([0], 'm1');
      group.failNextCommits = 3;
      await group.handlers.onBatch(0, records(0, 20, 2), control());
      await until(() => group.lastCommitted(0)?.offset === 22);
      expect(group.failNextCommits).toBe(0);
      await until(() => timers.live() === 0);
      await member.drain(1000);
    });
  });

  it('reports a consumer that stopped for good', async () => {
    const fatal: Error[] = [];
    const group = new FakeGroup();
    const member = new PartitionConsumer<string>({
      consumer: group,
      runner: new KeyedRunner<string>({ concurrency: 1, maxBuffered: 1, work: async () => 'done' }),
      prepare: (r) => ({ job: '', key: String(r.offset) }),
      commitIntervalMs: 1000,
      logger: silentLogger,
      onFatal: (e) => fatal.push(e),
    });
    await member.start();
    group.handlers.onAssignment([0], 'm1');
    group.handlers.onCrash?.(new Error('gone'), false);
    expect(member.state).toBe('failed');
    expect(member.notReadyReason()).toMatch(/stopped/);
    expect(fatal.map((e) => e.message)).toEqual(['gone']);
    await member.abort();
  });
});

describe('fetchBytesPerPartition (what a fetch decodes ahead of the window)', () => {
  it('asks each partition for an eighth of the window at 512 bytes a request, within 64 KiB and 1 MiB', () => {
    expect(fetchBytesPerPartition(2000)).toBe(128_000);
    expect(fetchBytesPerPartition(4000)).toBe(256_000);
    expect(fetchBytesPerPartition(10)).toBe(64 * 1024);
    expect(fetchBytesPerPartition(1_000_000)).toBe(1024 * 1024);
  });
});
