import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { messageId } from '../ingress/fixtures.js';
import { createTopics, produce } from '../helpers/kafka.js';
import { authHeaders, messageLifeRecords, statesPerKey, trackerEnv } from './harness.js';

/**
 * The local store under kill -9 at the three moments that matter (README "Local store"):
 * after the outputs were sent (the transaction is aborted: the store never sees it), after the
 * commit before the store write (the store is older than the changelog: caught up from its
 * checkpoint at the restart), and in the middle of the store's own write transaction (torn:
 * LMDB keeps the previous commit). Every restart reuses the store (a delta restore); at the
 * end every message's state, in message-state (read_committed) and in the store the queries
 * answer from, is exact: four records a message, none lost, none twice.
 */
const CHILD = fileURLToPath(new URL('./tracker-kill-child.ts', import.meta.url));

function runChild(env: Record<string, string>) {
  const child = spawn(process.execPath, ['--import', 'tsx', CHILD], {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', MSGBRIDGE_LOG_LEVEL: 'info', ...env },
  });
  let stdout = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stdout += d.toString()));
  const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
    child.on('exit', (code, signal) => resolve(signal ?? code)),
  );
  return { child, exited, output: () => stdout };
}

describe('tracker store under kill -9', () => {
  it('after send, after commit and mid store write: every state exact, in the topic and in the store', async () => {
    const id = randomUUID().slice(0, 8);
    const env: Record<string, string> = { ...trackerEnv(id), MSGBRIDGE__tracker__maxBatchRecords: '40' };
    const topics = {
      results: env.MSGBRIDGE__kafka__topics__sendResults!,
      status: env.MSGBRIDGE__kafka__topics__deliveryStatus!,
      messages: env.MSGBRIDGE__kafka__topics__messages!,
      state: env.MSGBRIDGE__kafka__topics__messageState!,
    };
    await createTopics([topics.results, topics.status, topics.messages], 3);
    const N = 900;
    const ids = Array.from({ length: N }, () => messageId());
    const inputTopic = { results: topics.results, status: topics.status };
    const events = ids.flatMap((m, i) =>
      messageLifeRecords(`req-${i}`, m).map((r) => ({ ...r, topic: inputTopic[r.topic] })),
    );
    for (let i = events.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [events[i], events[j]] = [events[j]!, events[i]!];
    }
    const rounds = ['sent', 'committed', 'store-write'] as const;
    const slice = Math.ceil(events.length / rounds.length);
    const outputs: string[] = [];
    for (const [r, killAt] of rounds.entries()) {
      const part = events.slice(r * slice, (r + 1) * slice);
      for (const topic of [topics.results, topics.status])
        await produce(
          topic,
          part.filter((e) => e.topic === topic),
        );
      const run = runChild({ ...env, KILL_AT: killAt, KILL_AFTER: String(3 + Math.floor(Math.random() * 5)) });
      const exit = await Promise.race([
        run.exited,
        new Promise((resolve) => setTimeout(() => resolve('timeout'), 60_000)),
      ]);
      outputs.push(run.output());
      if (exit === 'timeout') run.child.kill('SIGKILL');
      expect(exit, `the ${killAt} kill happened`).toBe('SIGKILL');
    }
    const last = runChild(env);
    const deadline = Date.now() + 60_000;
    while (!/ready (\S+)/.test(last.output()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    const url = /ready (\S+)/.exec(last.output())![1]!;

    const { perKey, seen } = await statesPerKey(topics.state, 4 * N);

    // What the store answers (the queries read nothing else) equals the topic's last state.
    const wrongInStore: string[] = [];
    for (const m of ids) {
      const res = await fetch(`${url}/messages/${m}`, { headers: authHeaders('read') });
      const body = (await res.json()) as { status?: string; events?: number };
      if (res.status !== 200 || body.status !== 'read' || body.events !== 4)
        wrongInStore.push(`${m}: ${res.status} ${JSON.stringify(body)}`);
    }
    last.child.kill('SIGTERM');
    expect(await last.exited).toBe(0);

    const all = [...outputs, last.output()].join('\n');
    const restarts = all
      .split('\n')
      .filter((l) => l.includes('task store caught up from its checkpoint') || l.includes('restored in bulk'));
    console.log(
      `[store-kill] ${N} messages, ${events.length} events, kills after send, after commit, mid store write; ${seen} state records (read_committed); task starts: ${restarts.filter((l) => l.includes('caught up')).length} delta, ${restarts.filter((l) => l.includes('bulk')).length} bulk`,
    );
    // Only the first start of each task finds no store: every restart after a kill reused it.
    expect(restarts.filter((l) => l.includes('restored in bulk'))).toHaveLength(3);
    expect(all).not.toMatch(/does not match the changelogs/);
    // The kill after commit left a store older than its changelog: a restart read the difference.
    expect(restarts.some((l) => l.includes('caught up') && /"changelogRecords":\{"messageState":[1-9]/.test(l))).toBe(
      true,
    );
    expect(perKey.size).toBe(N);
    expect([...perKey].filter(([, states]) => states.length !== 4).slice(0, 3)).toEqual([]);
    expect([...perKey].filter(([, s]) => s.at(-1)!.status !== 'read' || s.at(-1)!.events !== 4).slice(0, 3)).toEqual(
      [],
    );
    expect(seen).toBe(4 * N);
    expect(wrongInStore.slice(0, 3)).toEqual([]);
  }, 300_000);
});
