import { describe, expect, it } from 'vitest';
import { KeyedRunner, type WorkContext, type WorkOutcome } from '../../src/sender/keyed-runner.js';

interface Job {
  key: string;
  id: string;
}

/** Work that waits until the test releases it, recording start order and overlap per key. */
function controllable() {
  const started: string[] = [];
  const pending = new Map<string, { resolve: (o: WorkOutcome) => void; context: WorkContext }>();
  let running = 0;
  let maxRunning = 0;
  const runningKeys = new Set<string>();
  let overlap = false;
  const work = (job: Job, context: WorkContext) =>
    new Promise<WorkOutcome>((resolve) => {
      started.push(job.id);
      running += 1;
      maxRunning = Math.max(maxRunning, running);
      if (runningKeys.has(job.key)) overlap = true;
      runningKeys.add(job.key);
      pending.set(job.id, {
        context,
        resolve: (o) => {
          running -= 1;
          runningKeys.delete(job.key);
          pending.delete(job.id);
          resolve(o);
        },
      });
    });
  return {
    work,
    started,
    pending,
    finish: (id: string, outcome: WorkOutcome = 'done') => {
      const p = pending.get(id);
      if (!p) throw new Error(`${id} is not running`);
      p.resolve(outcome);
    },
    get maxRunning() {
      return maxRunning;
    },
    get overlap() {
      return overlap;
    },
  };
}

const tick = () => new Promise((r) => setImmediate(r));

describe('KeyedRunner', () => {
  it('runs one key in order and different keys concurrently up to the bound', async () => {
    const c = controllable();
    const runner = new KeyedRunner<Job>({ concurrency: 2, maxBuffered: 100, work: c.work });
    runner.assign('p0');
    runner.submit('p0', 0, 'a', { key: 'a', id: 'a1' });
    runner.submit('p0', 1, 'a', { key: 'a', id: 'a2' });
    runner.submit('p0', 2, 'b', { key: 'b', id: 'b1' });
    runner.submit('p0', 3, 'c', { key: 'c', id: 'c1' });
    await tick();
    expect(c.started).toEqual(['a1', 'b1']);
    c.finish('b1');
    await tick();
    // c1 takes the free slot; a2 still waits for a1.
    expect(c.started).toEqual(['a1', 'b1', 'c1']);
    c.finish('a1');
    await tick();
    expect(c.started).toEqual(['a1', 'b1', 'c1', 'a2']);
    c.finish('c1');
    c.finish('a2');
    await runner.whenIdle();
    expect(c.maxRunning).toBe(2);
    expect(c.overlap).toBe(false);
  });

  it('an item that releases its key lets the next of the key start, and holds the commit point until it ends', async () => {
    const c = controllable();
    const runner = new KeyedRunner<Job>({ concurrency: 10, maxBuffered: 100, work: c.work });
    const epoch = runner.assign('p0');
    runner.submit('p0', 0, 'a', { key: 'a', id: 'a1' });
    runner.submit('p0', 1, 'a', { key: 'a', id: 'a2' });
    runner.submit('p0', 2, 'a', { key: 'a', id: 'a3' });
    await tick();
    expect(c.started).toEqual(['a1']);
    c.pending.get('a1')!.context.releaseKey();
    c.pending.get('a1')!.context.releaseKey();
    await tick();
    expect(c.started).toEqual(['a1', 'a2']);
    c.finish('a2');
    await tick();
    expect(c.started).toEqual(['a1', 'a2', 'a3']);
    // a1 is still unfinished: nothing can be committed past it, a2 is reported above it.
    expect(runner.commitPoints()).toEqual([
      expect.objectContaining({ partition: 'p0', epoch, offset: 0, completedAbove: [1] }),
    ]);
    expect(runner.stats()).toMatchObject({ buffered: 2, running: 2 });
    c.finish('a1');
    c.finish('a3');
    await runner.whenIdle();
    expect(runner.commitPoints()).toEqual([expect.objectContaining({ offset: 3, completedAbove: [] })]);
    expect(runner.stats()).toMatchObject({ buffered: 0, running: 0 });
  });

  it('an item abandoned after it released its key runs again on its own while owned; the key goes on', async () => {
    const c = controllable();
    const runner = new KeyedRunner<Job>({ concurrency: 10, maxBuffered: 100, work: c.work, retryAbandonedAfterMs: 10 });
    runner.assign('p0');
    runner.submit('p0', 0, 'a', { key: 'a', id: 'a1' });
    runner.submit('p0', 1, 'a', { key: 'a', id: 'a2' });
    await tick();
    c.pending.get('a1')!.context.releaseKey();
    await tick();
    c.finish('a1', 'abandoned');
    c.finish('a2');
    await tick();
    expect(runner.commitPoints()).toEqual([expect.objectContaining({ offset: 0, completedAbove: [1] })]);
    while (!c.pending.has('a1')) await new Promise((r) => setTimeout(r, 5));
    expect(c.started).toEqual(['a1', 'a2', 'a1']);
    c.finish('a1');
    await runner.whenIdle();
    expect(runner.commitPoints()).toEqual([expect.objectContaining({ offset: 2, completedAbove: [] })]);
    expect(runner.stats()).toMatchObject({ buffered: 0, running: 0 });
  });

  it('commits only up to the lowest unfinished offset and reports finished offsets above it', async () => {
    const c = controllable();
    const runner = new KeyedRunner<Job>({ concurrency: 10, maxBuffered: 100, work: c.work });
    const epoch = runner.assign('p0');
    for (let i = 0; i < 5; i++) runner.submit('p0', 10 + i, `k${i}`, { key: `k${i}`, id: `j${i}` });
    await tick();
    expect(runner.commitPoints()).toEqual([]);
    c.finish('j1');
    c.finish('j3');
    await tick();
    expect(runner.commitPoints()).toEqual([
      { partition: 'p0', epoch, offset: 10, completedAbove: [11, 13], version: 2 },
    ]);
    c.finish('j0');
    await tick();
    const [point] = runner.commitPoints();
    expect(point).toMatchObject({ offset: 12, completedAbove: [13] });
    runner.markCommitted(point!);
    expect(runner.commitPoints()).toEqual([]);
    c.finish('j2');
    c.finish('j4');
    await tick();
    const [last] = runner.commitPoints();
    expect(last).toMatchObject({ offset: 15, completedAbove: [] });
    // Until Kafka confirms the commit, the finished items stay in the window.
    expect(runner.stats()).toMatchObject({ buffered: 0, uncommitted: 3, commitLag: 3 });
    runner.markCommitted(last!);
    expect(runner.stats()).toMatchObject({ buffered: 0, uncommitted: 0, commitLag: 0 });
  });

  it('ignores redelivered offsets and skips offsets a previous owner finished', async () => {
    const c = controllable();
    const runner = new KeyedRunner<Job>({ concurrency: 10, maxBuffered: 100, work: c.work });
    const epoch = runner.assign('p0');
    runner.setCompleted('p0', epoch, [6, 8]);
    expect(runner.submit('p0', 5, 'a', { key: 'a', id: 'x5' })).toBe('queued');
    expect(runner.submit('p0', 6, 'a', { key: 'a', id: 'x6' })).toBe('skipped');
    expect(runner.submit('p0', 7, 'b', { key: 'b', id: 'x7' })).toBe('queued');
    expect(runner.submit('p0', 8, 'b', { key: 'b', id: 'x8' })).toBe('skipped');
    expect(runner.submit('p0', 6, 'a', { key: 'a', id: 'again' })).toBe('duplicate');
    expect(runner.submit('p1', 0, 'a', { key: 'a', id: 'other' })).toBe('not-assigned');
    await tick();
    expect(c.started).toEqual(['x5', 'x7']);
    c.finish('x5');
    c.finish('x7');
    await runner.whenIdle();
    expect(runner.commitPoints()).toMatchObject([{ offset: 9, completedAbove: [] }]);
  });

  it('bounds unfinished items and uncommitted items, and wakes capacity waiters', async () => {
    const c = controllable();
    const runner = new KeyedRunner<Job>({ concurrency: 2, maxBuffered: 2, maxUncommitted: 3, work: c.work });
    runner.assign('p0');
    runner.submit('p0', 0, 'slow', { key: 'slow', id: 's' });
    runner.submit('p0', 1, 'a', { key: 'a', id: 'a' });
    expect(runner.hasCapacity()).toBe(false);
    let woke = false;
    void runner.whenCapacity().then(() => (woke = true));
    await tick();
    expect(woke).toBe(false);
    c.finish('a');
    await tick();
    expect(woke).toBe(true);
    expect(runner.stats()).toMatchObject({ buffered: 1, uncommitted: 2 });
    runner.submit('p0', 2, 'b', { key: 'b', id: 'b' });
    await tick();
    c.finish('b');
    await tick();
    // One unfinished item, but three uncommitted: the window is full.
    expect(runner.stats()).toMatchObject({ buffered: 1, uncommitted: 3 });
    expect(runner.hasCapacity()).toBe(false);
    c.finish('s');
    await tick();
    // All finished, but not committed yet: the window stays full until the commit is confirmed.
    expect(runner.stats()).toMatchObject({ buffered: 0, uncommitted: 3 });
    expect(runner.hasCapacity()).toBe(false);
    let roomAgain = false;
    void runner.whenCapacity().then(() => (roomAgain = true));
    const [point] = runner.commitPoints();
    expect(point).toMatchObject({ offset: 3 });
    runner.markCommitted(point!);
    await tick();
    expect(roomAgain).toBe(true);
    expect(runner.stats()).toMatchObject({ buffered: 0, uncommitted: 0 });
  });

  it('shares the window fairly: a partition at its share waits while another under its share waits for room', async () => {
    const c = controllable();
    const runner = new KeyedRunner<Job>({ concurrency: 8, maxBuffered: 4, maxUncommitted: 4, work: c.work });
    runner.assign('p0');
    runner.assign('p1');
    // One partition's batch fills the whole window (no one else was waiting).
    for (let i = 0; i < 4; i++) runner.submit('p0', i, `k${i}`, { key: `k${i}`, id: `p0-${i}` });
    await tick();
    expect(runner.hasCapacity('p0')).toBe(false);
    const woke: string[] = [];
    void runner.whenCapacity('p0').then(() => woke.push('p0'));
    void runner.whenCapacity('p1').then(() => woke.push('p1'));
    c.finish('p0-0');
    await tick();
    runner.markCommitted(runner.commitPoints()[0]!);
    await tick();
    // One slot free: p1 (0 of its share of 2) gets it, p0 (3, over its share) does not.
    expect(woke).toEqual(['p1']);
    runner.submit('p1', 0, 'q0', { key: 'q0', id: 'p1-0' });
    expect(runner.hasCapacity('p0')).toBe(false);
    c.finish('p0-1');
    await tick();
    runner.markCommitted(runner.commitPoints().find((p) => p.partition === 'p0')!);
    await tick();
    // No partition under its share waits any more: p0 takes the free slot.
    expect(woke).toEqual(['p1', 'p0']);
    for (const id of ['p0-2', 'p0-3', 'p1-0']) c.finish(id);
    await runner.whenIdle();
  });

  it('asks for a commit while an intake waits and enough finished items sit at the bottom of the window', async () => {
    const c = controllable();
    let asked = 0;
    const runner = new KeyedRunner<Job>({
      concurrency: 10,
      maxBuffered: 10,
      maxUncommitted: 10,
      commitWorthwhileAt: 2,
      work: c.work,
      onCommitWorthwhile: () => (asked += 1),
    });
    runner.assign('p0');
    for (let i = 0; i < 10; i++) runner.submit('p0', i, `k${i}`, { key: `k${i}`, id: `i${i}` });
    await tick();
    // Finished above an unfinished item: a commit would release nothing.
    c.finish('i5');
    c.finish('i1');
    await tick();
    expect(runner.releasable()).toBe(0);
    void runner.whenCapacity('p0');
    expect(asked).toBe(0);
    c.finish('i0');
    await tick();
    // i0 and i1 (i5 waits behind i2): two releasable, the threshold.
    expect(runner.releasable()).toBe(2);
    expect(asked).toBe(1);
    runner.markCommitted(runner.commitPoints()[0]!);
    await tick();
    expect(runner.releasable()).toBe(0);
    expect(runner.stats()).toMatchObject({ uncommitted: 8 });
    // Nobody waits for room now: no request for a commit, however many finish.
    for (const id of ['i2', 'i3', 'i4']) c.finish(id);
    await tick();
    expect(runner.releasable()).toBe(4);
    expect(asked).toBe(1);
    for (const id of ['i6', 'i7', 'i8', 'i9']) c.finish(id);
    await runner.whenIdle();
  });

  it('on revoke drops queued items, stops running ones and never reports the partition again', async () => {
    const c = controllable();
    const runner = new KeyedRunner<Job>({ concurrency: 1, maxBuffered: 100, work: c.work });
    runner.assign('p0');
    runner.assign('p1');
    runner.submit('p0', 0, 'a', { key: 'a', id: 'p0-a0' });
    runner.submit('p0', 1, 'a', { key: 'a', id: 'p0-a1' });
    runner.submit('p1', 0, 'b', { key: 'b', id: 'p1-b0' });
    await tick();
    expect(c.started).toEqual(['p0-a0']);
    const context = c.pending.get('p0-a0')!.context;
    runner.revoke('p0');
    expect(context.stop.aborted).toBe(true);
    expect(runner.assigned()).toEqual(['p1']);
    c.finish('p0-a0');
    await tick();
    // p0-a1 was dropped; p1 proceeds.
    expect(c.started).toEqual(['p0-a0', 'p1-b0']);
    c.finish('p1-b0');
    await runner.whenIdle();
    expect(runner.commitPoints().map((p) => p.partition)).toEqual(['p1']);
    expect(runner.stats()).toMatchObject({ buffered: 0, partitions: 1 });
  });

  it('keeps a key in order across a revoke and re-assignment of its partition', async () => {
    const c = controllable();
    const runner = new KeyedRunner<Job>({ concurrency: 4, maxBuffered: 100, work: c.work });
    const first = runner.assign('p0');
    runner.submit('p0', 0, 'a', { key: 'a', id: 'old' });
    await tick();
    runner.revoke('p0');
    const second = runner.assign('p0');
    expect(second).not.toBe(first);
    runner.submit('p0', 0, 'a', { key: 'a', id: 'new' });
    await tick();
    // The new ownership's item waits until the old one (same key) has settled.
    expect(c.started).toEqual(['old']);
    c.finish('old', 'abandoned');
    await tick();
    expect(c.started).toEqual(['old', 'new']);
    c.finish('new');
    await runner.whenIdle();
    expect(runner.commitPoints()).toMatchObject([{ epoch: second, offset: 1 }]);
    // A late markCommitted for the old epoch is ignored.
    runner.markCommitted({ partition: 'p0', epoch: first, offset: 1000, version: 99 });
    expect(runner.commitPoints()).toMatchObject([{ offset: 1 }]);
  });

  it('after halt starts nothing new; abandoned items keep the commit point', async () => {
    const c = controllable();
    const runner = new KeyedRunner<Job>({ concurrency: 1, maxBuffered: 100, work: c.work });
    runner.assign('p0');
    runner.submit('p0', 0, 'a', { key: 'a', id: 'a' });
    runner.submit('p0', 1, 'b', { key: 'b', id: 'b' });
    runner.submit('p0', 2, 'c', { key: 'c', id: 'c' });
    await tick();
    runner.halt();
    expect(c.pending.get('a')!.context.stop.aborted).toBe(true);
    c.finish('a');
    await runner.whenIdle();
    expect(c.started).toEqual(['a']);
    expect(runner.commitPoints()).toMatchObject([{ offset: 1 }]);
  });

  it('retries an item whose work failed while its partition is owned, without breaking key order', async () => {
    let calls = 0;
    const order: string[] = [];
    const errors: unknown[] = [];
    const runner = new KeyedRunner<Job>({
      concurrency: 4,
      maxBuffered: 100,
      retryAbandonedAfterMs: 5,
      onWorkError: (e) => errors.push(e),
      work: async (job) => {
        order.push(job.id);
        if (job.id === 'a1' && calls++ === 0) throw new Error('boom');
        return 'done';
      },
    });
    runner.assign('p0');
    runner.submit('p0', 0, 'a', { key: 'a', id: 'a1' });
    runner.submit('p0', 1, 'a', { key: 'a', id: 'a2' });
    await runner.whenIdle();
    expect(order).toEqual(['a1', 'a1', 'a2']);
    expect(errors).toHaveLength(1);
    expect(runner.commitPoints()).toMatchObject([{ offset: 2 }]);
  });

  it('keeps order per key with many keys and random completion times', async () => {
    const seen = new Map<string, number[]>();
    let running = 0;
    let maxRunning = 0;
    const runner = new KeyedRunner<{ key: string; n: number }>({
      concurrency: 8,
      maxBuffered: 10_000,
      work: async (job) => {
        running += 1;
        maxRunning = Math.max(maxRunning, running);
        await new Promise((r) => setTimeout(r, Math.random() * 3));
        const list = seen.get(job.key) ?? [];
        list.push(job.n);
        seen.set(job.key, list);
        running -= 1;
        return 'done';
      },
    });
    runner.assign('p0');
    runner.assign('p1');
    const perKey = new Map<string, number>();
    for (let i = 0; i < 600; i++) {
      const key = `k${i % 37}`;
      const n = perKey.get(key) ?? 0;
      perKey.set(key, n + 1);
      runner.submit(i % 2 === 0 ? 'p0' : 'p1', i, key, { key: `${i % 2}:${key}`, n: i });
    }
    await runner.whenIdle();
    expect(maxRunning).toBeLessThanOrEqual(8);
    let total = 0;
    for (const list of seen.values()) {
      total += list.length;
      expect(list).toEqual([...list].sort((a, b) => a - b));
    }
    expect(total).toBe(600);
    expect(
      runner
        .commitPoints()
        .map((p) => p.offset)
        .sort(),
    ).toEqual([599, 600]);
  });
});
