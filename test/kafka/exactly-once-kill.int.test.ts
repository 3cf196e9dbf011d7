import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureTopics } from '../../src/kafka/topics.js';
import { consumeRecords, kafkaBrokers, produce, testKafka, uniqueTopic, withAdmin } from '../helpers/kafka.js';
import { countingProblems, type CountingEngineSettings } from './counting-engine-child.js';

const CHILD = fileURLToPath(new URL('./counting-engine-child.ts', import.meta.url));
const children: ChildProcess[] = [];

afterEach(() => {
  for (const child of children.splice(0))
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

interface Member {
  child: ChildProcess;
  /** Records this process committed (its `progress` lines). */
  progress(): number;
  ready: Promise<void>;
  exited: Promise<number | null>;
}

function startMember(settings: CountingEngineSettings): Member {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
    env: { ...process.env, COUNTING_ENGINE: JSON.stringify(settings) },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let progress = 0;
  let stderr = '';
  let markReady: () => void = () => {};
  const ready = new Promise<void>((resolve) => (markReady = resolve));
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    for (const line of chunk.split('\n')) {
      if (line === 'ready') markReady();
      const m = /^progress (\d+)$/.exec(line);
      if (m) progress = Number(m[1]);
    }
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (stderr = (stderr + chunk).slice(-4000)));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  void exited.then((code) => {
    if (code !== null && code !== 0) console.error(`[kill-test] member exited ${code}: ${stderr}`);
  });
  return { child, progress: () => progress, ready, exited };
}

async function waitUntil(
  condition: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: () => string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Input records the group has committed, over all inputs. */
async function committedInputs(settings: CountingEngineSettings): Promise<number> {
  return withAdmin(async (admin) => {
    let n = 0;
    for (const t of await admin.fetchOffsets({ groupId: settings.groupId, topics: settings.inputTopics }))
      for (const p of t.partitions) n += Math.max(0, Number(p.offset));
    return n;
  });
}

/** Every record of the topic, aborted ones included (read_uncommitted). */
async function countUncommitted(topic: string): Promise<number> {
  const consumer = testKafka('kill-test-uncommitted').consumer({
    groupId: `uncommitted-${randomUUID()}`,
    readUncommitted: true,
    maxWaitTimeInMs: 100,
  });
  let n = 0;
  await consumer.connect();
  try {
    await consumer.subscribe({ topics: [topic], fromBeginning: true });
    let last = Date.now();
    await consumer.run({
      eachBatch: async ({ batch }) => {
        n += batch.messages.length;
        last = Date.now();
      },
    });
    await waitUntil(
      () => Date.now() - last > 1500,
      20_000,
      () => 'the topic read to its end',
    );
    return n;
  } finally {
    await consumer.disconnect();
  }
}

describe('exactly once under kill -9', () => {
  it('a member killed at random moments and restarted neither loses nor repeats an update (read_committed output)', async () => {
    const id = uniqueTopic('kill');
    const partitions = 3;
    const settings: CountingEngineSettings = {
      brokers: kafkaBrokers(),
      groupId: `${id}-group`,
      transactionalIdPrefix: `${id}-tx`,
      inputTopics: [`${id}-results`, `${id}-statuses`],
      outputTopic: `${id}-state`,
      maxBatchRecords: 25,
      delayMs: 15,
      padBytes: 2048,
      sessionTimeoutMs: 6_000,
    };
    await withAdmin((admin) =>
      ensureTopics(admin, [
        ...settings.inputTopics.map((topic) => ({ topic, partitions, replicationFactor: 1 })),
        {
          topic: settings.outputTopic,
          partitions,
          replicationFactor: 1,
          configEntries: [{ name: 'cleanup.policy', value: 'compact' }],
        },
      ]),
    );
    const N = 4000;
    const inputs = Array.from({ length: N }, (_, i) => ({
      topic: settings.inputTopics[i % 2]!,
      key: `msg-${i % 60}`,
      value: `in-${i}`,
    }));
    for (const topic of settings.inputTopics)
      await produce(
        topic,
        inputs.filter((r) => r.topic === topic),
      );

    const started = Date.now();
    const killedAt: number[] = [];
    // Random moments (mid-batch, mid-transaction or between two), and two exact ones: outputs
    // written but the commit not yet asked, and committed but neither applied nor acknowledged.
    const rounds: (CountingEngineSettings['selfKill'] | 'random')[] = [
      'random',
      { phase: 'sent', after: 3 },
      { phase: 'committed', after: 3 },
      'random',
    ];
    for (const [round, kill] of rounds.entries()) {
      // A life never takes more than half of what remains (it holds its next batch there): a
      // loaded machine can let this test wait seconds, and a kill with nothing left proves nothing.
      const before = killedAt.at(-1) ?? 0;
      const hold = Math.floor((N - before) / 2);
      const member = startMember(
        kill === 'random' ? { ...settings, holdAfterRecords: hold } : { ...settings, selfKill: kill },
      );
      await member.ready;
      if (kill === 'random') {
        // Under way and past the previous life's commits (a loaded machine can be slow to commit the first).
        await waitUntil(
          async () => member.progress() > 0 && (await committedInputs(settings)) > before,
          30_000,
          () => `member ${round} under way`,
        );
        // A random point of this life's work, never past 30% of what remains, or the hold.
        const target = Math.min(hold, member.progress() + 1 + Math.floor(Math.random() * 0.3 * (N - before)));
        await waitUntil(
          () => member.progress() >= target,
          30_000,
          () => `member ${round} past ${target} records`,
        );
        await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 20)));
        member.child.kill('SIGKILL');
      }
      await Promise.race([
        member.exited,
        new Promise((_, reject) => setTimeout(() => reject(new Error(`member ${round} did not die`)), 20_000)),
      ]);
      expect(member.child.signalCode).toBe('SIGKILL');
      killedAt.push(await committedInputs(settings));
    }
    // Killed while work remained, and each life committed some; except the one killed at its
    // third 'sent': the tasks' transactions run concurrently, so all three may precede any commit.
    expect(killedAt[killedAt.length - 1]).toBeLessThan(N);
    const progressed = killedAt.map((n, i) =>
      rounds[i] !== 'random' && rounds[i]!.phase === 'sent' ? n >= (killedAt[i - 1] ?? 0) : n > (killedAt[i - 1] ?? 0),
    );
    expect(progressed, `committed inputs after each kill: ${killedAt.join(', ')}`).toEqual(rounds.map(() => true));

    const last = startMember(settings);
    await last.ready;
    await waitUntil(
      async () => (await committedInputs(settings)) >= N,
      40_000,
      () => `every input committed (${last.progress()})`,
    );
    last.child.kill('SIGTERM');
    expect(await last.exited).toBe(0);

    const outputs = await consumeRecords(settings.outputTopic, N, { timeoutMs: 20_000, settleMs: 1500 });
    expect(countingProblems(outputs, inputs)).toEqual([]);
    // The transaction killed after its outputs were written was aborted by the next owner's fence:
    // its records are in the log, and read_committed hides them.
    const written = await countUncommitted(settings.outputTopic);
    expect(written).toBeGreaterThan(outputs.length);
    console.log(
      `[kill-test] ${N} inputs, killed after ${killedAt.join(', ')} committed; ${outputs.length} committed outputs, ${written - outputs.length} aborted outputs hidden from read_committed; ${Date.now() - started} ms`,
    );
  }, 150_000);
});
