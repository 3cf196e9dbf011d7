import { Writable } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/platform/logger.js';
import type { SendRecord } from '../../src/simulator/index.js';
import { countRecords } from '../helpers/kafka.js';
import {
  collect,
  committedOffsets,
  endOffsets,
  fixture,
  produceRequests,
  recipientOf,
  sentRequestId,
  spawnSender,
  textRequest,
  waitUntil,
  type ChildSender,
  type Collector,
  type Fixture,
  type RequestSpec,
} from './harness.js';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup().catch(() => undefined);
});

/** `keys` recipients with `perKey` requests each, interleaved; requestId `<key>#<n>` is also the callbackData. */
function workload(keys: number, perKey: number): { requests: RequestSpec[]; ids: string[] } {
  const requests: RequestSpec[] = [];
  for (let n = 0; n < perKey; n++) {
    for (let k = 0; k < keys; k++) {
      const recipient = `+1555${String(1_000_000 + k).padStart(7, '0')}`;
      const requestId = `${recipient}#${n}`;
      requests.push({
        key: recipient,
        value: textRequest(requestId, recipient, `message ${n}`, { callbackData: requestId }),
      });
    }
  }
  return { requests, ids: requests.map((r) => (r.value as { requestId: string }).requestId) };
}

/** Per recipient, the sequence numbers in the order the provider first saw each request. */
function firstSendOrder(sends: SendRecord[]): Map<string, number[]> {
  const seen = new Set<string>();
  const order = new Map<string, number[]>();
  for (const send of [...sends].sort((a, b) => a.seq - b.seq)) {
    const id = sentRequestId(send);
    if (id === undefined || seen.has(id)) continue;
    seen.add(id);
    const recipient = recipientOf(send)!;
    const list = order.get(recipient) ?? [];
    list.push(Number(id.split('#')[1]));
    order.set(recipient, list);
  }
  return order;
}

function expectInOrder(order: Map<string, number[]>, perKey: number): void {
  for (const [recipient, list] of order) {
    expect(list, recipient).toEqual(Array.from({ length: perKey }, (_, i) => i));
  }
}

function duplicates(sends: SendRecord[]): number {
  const ids = sends.map(sentRequestId);
  return ids.length - new Set(ids).size;
}

/** Request ids the provider created more than one message for. */
function sentTwice(sends: SendRecord[]): string[] {
  const counts = new Map<string, number>();
  for (const s of sends)
    if (s.messageId !== null) counts.set(sentRequestId(s)!, (counts.get(sentRequestId(s)!) ?? 0) + 1);
  return [...counts].filter(([, n]) => n > 1).map(([id]) => id);
}

/** The last result of each request (a repeat publishes the same result again). */
function lastResults(results: Collector): Map<string, Record<string, unknown>> {
  const last = new Map<string, Record<string, unknown>>();
  for (const v of results.values()) last.set(v.requestId as string, v);
  return last;
}

function resultIds(results: Collector): Set<string> {
  return new Set(results.values().map((v) => v.requestId as string));
}

async function expectAllCommitted(f: Fixture): Promise<void> {
  const ends = await endOffsets(f.topics.sendRequests);
  const deadline = Date.now() + 15_000;
  for (;;) {
    const committed = await committedOffsets(f.groupId, f.topics.sendRequests);
    if ([...ends].every(([p, end]) => end === 0 || committed.get(p)?.offset === end)) return;
    if (Date.now() > deadline)
      throw new Error(`not committed to the end: ${JSON.stringify({ ends: [...ends], committed: [...committed] })}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function setUp(options: Parameters<typeof fixture>[0]): Promise<{ f: Fixture; results: Collector }> {
  const f = await fixture(options);
  cleanups.push(() => f.close());
  const results = await collect(f.topics.sendResults);
  cleanups.push(() => results.stop());
  return { f, results };
}

// Sender processes killed and started again, each test waiting up to minutes for its results:
// the default 60 s per test was too short on a loaded machine.
describe('sender order, concurrency and hand-overs', { timeout: 300_000 }, () => {
  it('keeps every recipient in order while sending to many recipients concurrently', async () => {
    const KEYS = 200;
    const PER_KEY = 10;
    const { f, results } = await setUp({
      partitions: 6,
      sender: { concurrency: 32, maxBufferedRequests: 400, ratePerSecond: 5000 },
      simulator: { faults: { sendLatencyMs: { min: 0, max: 15 } } },
    });
    const { requests, ids } = workload(KEYS, PER_KEY);
    await produceRequests(f.topics.sendRequests, requests);
    const sender = await f.start();
    let maxRunning = 0;
    const probe = setInterval(() => (maxRunning = Math.max(maxRunning, sender.stats().providerCalls)), 5);
    cleanups.push(async () => clearInterval(probe));
    await results.waitFor((r) => r.length >= ids.length, 120_000, 'a result per request');
    clearInterval(probe);

    const sends = f.simulator.sends();
    expect(sends).toHaveLength(ids.length);
    expect(sends.every((s) => s.status === 200)).toBe(true);
    expect(duplicates(sends)).toBe(0);
    expect(resultIds(results)).toEqual(new Set(ids));
    expect(results.records).toHaveLength(ids.length);
    // The provider saw each recipient's requests in the order they were produced...
    expectInOrder(firstSendOrder(sends), PER_KEY);
    // ...while requests to different recipients were in flight together, within the bound.
    expect(maxRunning).toBeGreaterThan(1);
    expect(maxRunning).toBeLessThanOrEqual(32);
    // Each result names the message the provider created for that request.
    const created = new Map(sends.map((s) => [sentRequestId(s), s.messageId]));
    for (const v of results.values()) expect(v.messageId).toBe(created.get(v.requestId as string));
    await expectAllCommitted(f);
  });

  it('hands partitions over between two instances of the group without losing a request', async () => {
    const KEYS = 90;
    const PER_KEY = 16;
    const MAX_BUFFERED = 100;
    const { f, results } = await setUp({
      partitions: 6,
      sender: { concurrency: 8, maxBufferedRequests: MAX_BUFFERED, ratePerSecond: 5000 },
      simulator: { faults: { sendLatencyMs: { min: 40, max: 80 } } },
    });
    const { requests, ids } = workload(KEYS, PER_KEY);
    await produceRequests(f.topics.sendRequests, requests);
    expect(await countRecords(f.topics.sendRequests)).toBe(ids.length);
    // What both members log at warn level and above, as JSON lines.
    const loud: string[] = [];
    const logger = createLogger({
      level: 'warn',
      name: 'sender',
      destination: new Writable({
        write(chunk: Buffer, _encoding, done) {
          loud.push(...chunk.toString().split('\n').filter(Boolean));
          done();
        },
      }),
    });
    const a = await f.start({ logger });
    await waitUntil(
      () => f.simulator.sends().length >= 100,
      60_000,
      () => 'A to make progress',
    );
    // B joins: the group rebalances and A gives up some partitions while requests are in flight.
    const b = await f.start({ logger });
    await b.ready;
    await waitUntil(
      () => b.stats().completedRequestIds >= 50,
      60_000,
      () =>
        `B to make progress (A: ${JSON.stringify(a.stats())}; B: ${JSON.stringify(b.stats())}); their warnings:\n${loud.slice(-30).join('\n')}`,
    );
    expect(a.stats().partitions).toBeGreaterThan(0);
    expect(resultIds(results).size).toBeLessThan(ids.length - 200);
    // A leaves with a drain: B takes everything over.
    expect(await a.drain()).toBe(true);
    await waitUntil(
      () => resultIds(results).size >= ids.length,
      120_000,
      () => `all results (${resultIds(results).size}/${ids.length})`,
    );

    const sends = f.simulator.sends();
    const dups = duplicates(sends);
    console.log(
      `[handover] ${sends.length} provider calls for ${ids.length} requests: ${dups} duplicate(s); ${results.records.length} result records`,
    );
    expect(resultIds(results)).toEqual(new Set(ids));
    // Two rebalances: B joining, then A leaving. Before rejoining, a member lets its calls in
    // flight end and records them in the request ledger; the next owner finds them done.
    expect(dups).toBe(0);
    expect([...lastResults(results).values()].filter((r) => r.maybeSent)).toEqual([]);
    // Rebalancing is routine: nothing about it at error level (kafkajs logs the heartbeat's and
    // the stale commit's answers as errors; the member says what happens at info).
    expect(loud.filter((l) => /"level":(50|60)/.test(l))).toEqual([]);
    expectInOrder(firstSendOrder(sends), PER_KEY);
    const metricsA = await a.metrics.metrics();
    const metricsB = await b.metrics.metrics();
    expect(metricsA).toMatch(
      /msgbridge_sender_requests_total\{outcome="accepted",business="biz_1",role="sender"\} [1-9]/,
    );
    expect(metricsB).toMatch(
      /msgbridge_sender_requests_total\{outcome="accepted",business="biz_1",role="sender"\} [1-9]/,
    );
    await expectAllCommitted(f);
  });

  it('after SIGKILL mid-stream, a restarted sender completes every request; only calls in flight at the kill run twice, each with maybeSent; produced again, nothing is sent', async () => {
    const KEYS = 60;
    const PER_KEY = 20;
    const MAX_BUFFERED = 100;
    const { f, results } = await setUp({
      partitions: 3,
      sender: { concurrency: 16, maxBufferedRequests: MAX_BUFFERED, ratePerSecond: 5000 },
      simulator: { faults: { sendLatencyMs: { min: 5, max: 20 } } },
    });
    const { requests, ids } = workload(KEYS, PER_KEY);
    await produceRequests(f.topics.sendRequests, requests);
    const first = spawnSender(f.env());
    cleanups.push(async () => first.child.kill('SIGKILL'));
    await first.waitForOutput(/"sender":\{/);
    await waitUntil(
      () => f.simulator.sends().length >= 300,
      60_000,
      () => 'the first sender to make progress',
    );
    first.child.kill('SIGKILL');
    expect(await first.exited).toBeNull();
    const atKill = f.simulator.sends().length;

    const second: ChildSender = spawnSender(f.env());
    cleanups.push(async () => second.child.kill('SIGKILL'));
    await second.waitForOutput(/"sender":\{/);
    await waitUntil(
      () => resultIds(results).size >= ids.length,
      120_000,
      () => `all results (${resultIds(results).size}/${ids.length})`,
    );
    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);

    const sends = f.simulator.sends();
    const dups = duplicates(sends);
    const twice = sentTwice(sends);
    console.log(
      `[kill] killed after ${atKill} provider calls; ${sends.length} calls for ${ids.length} requests: ${dups} duplicate(s)`,
    );
    expect(resultIds(results)).toEqual(new Set(ids));
    // Only calls in flight at the kill run again, and say so: at most `concurrency` (16) in an
    // HTTP call, plus those whose answer came and whose outcome was on its way to Kafka.
    expect(twice.length).toBeLessThanOrEqual(2 * 16);
    const last = lastResults(results);
    for (const id of twice) expect(last.get(id), id).toMatchObject({ outcome: 'accepted', maybeSent: true });
    expectInOrder(firstSendOrder(sends), PER_KEY);
    await expectAllCommitted(f);

    // A producer retrying every request after the restart: answered from the ledger, nothing sent.
    const before = f.simulator.sends().length;
    const resultsBefore = results.records.length;
    const third = spawnSender(f.env());
    cleanups.push(async () => third.child.kill('SIGKILL'));
    await third.waitForOutput(/"sender":\{/);
    await produceRequests(f.topics.sendRequests, requests);
    await waitUntil(
      () => results.records.length >= resultsBefore + ids.length,
      120_000,
      () => `a result for every request produced again (${results.records.length})`,
    );
    third.child.kill('SIGTERM');
    expect(await third.exited).toBe(0);
    expect(f.simulator.sends().length).toBe(before);
  });

  it('SIGKILL of one of two members: the survivor works its partitions again within the session plus a call deadline; every request one result (repeats share their event-id)', async () => {
    const KEYS = 72;
    const PER_KEY = 60;
    const PARTITIONS = 6;
    // Each member paced at 300/s: the survivor still has work on every partition when it takes over.
    const { f, results } = await setUp({
      partitions: PARTITIONS,
      // A call's deadline of 2 s: the survivor waits that long (plus 5 s) for a dead member's calls in flight.
      sender: { concurrency: 16, maxBufferedRequests: 100, ratePerSecond: 300, callTimeoutMs: 2000 },
      simulator: { faults: { sendLatencyMs: { min: 5, max: 20 } } },
    });
    const { requests, ids } = workload(KEYS, PER_KEY);
    const keyIndex = (key: string) => Number(key.slice(-7)) - 1_000_000;
    const partitionOf = new Map<string, number>();
    for (const r of requests) {
      r.partition = keyIndex(r.key as string) % PARTITIONS;
      partitionOf.set((r.value as { requestId: string }).requestId, r.partition);
    }
    await produceRequests(f.topics.sendRequests, requests);
    const env = { ...f.env(), MSGBRIDGE_LOG_LEVEL: 'info' };
    const a = spawnSender(env);
    cleanups.push(async () => a.child.kill('SIGKILL'));
    const b = spawnSender(env);
    cleanups.push(async () => b.child.kill('SIGKILL'));
    // Both members hold partitions before one dies.
    const owned = (child: ChildSender): number[] => {
      const lines = child
        .output()
        .split('\n')
        .filter((l) => l.includes('"msg":"assignment"'));
      return lines.length === 0 ? [] : (JSON.parse(lines.at(-1)!) as { partitions: number[] }).partitions;
    };
    await waitUntil(
      () => owned(a).length > 0 && owned(b).length > 0 && owned(a).length + owned(b).length === PARTITIONS,
      60_000,
      () => `a split assignment: ${owned(a)} / ${owned(b)}`,
    );
    await waitUntil(
      () => resultIds(results).size >= 600,
      60_000,
      () => 'progress',
    );
    const dead = owned(a);
    const killedAt = Date.now();
    a.child.kill('SIGKILL');
    expect(await a.exited).toBeNull();

    await waitUntil(
      () => resultIds(results).size >= ids.length,
      120_000,
      () => `all results (${resultIds(results).size}/${ids.length})`,
    );
    b.child.kill('SIGTERM');
    expect(await b.exited).toBe(0);

    // Per partition of the dead member: the first result for one of its requests written after
    // the kill (a second later: what the dead member wrote before dying has been read by then).
    const resumedAfter = dead.map((p) => {
      const first = results.records.find(
        (r) => r.at > killedAt + 1000 && partitionOf.get(JSON.parse(r.value.toString()).requestId as string) === p,
      );
      return first ? first.at - killedAt : Infinity;
    });
    const takeover = b
      .output()
      .split('\n')
      .filter((l) => l.includes('"msg":"assignment"'))
      .map((l) => JSON.parse(l) as { time: string; partitions: number[] })
      .find((l) => Date.parse(l.time) > killedAt && dead.every((p) => l.partitions.includes(p)));
    console.log(
      `[failover] partitions ${dead.join(',')} of the killed member: assigned to the survivor after ${takeover ? Date.parse(takeover.time) - killedAt : '?'} ms, first results after ${resumedAfter.map((ms) => `${ms} ms`).join(', ')}`,
    );
    expect(takeover).toBeDefined();
    // The 6 s session, or a call in flight at the kill: its deadline (2 s) and 5 s to record it.
    for (const ms of resumedAfter) expect(ms).toBeLessThan(15_000);
    expect(resultIds(results)).toEqual(new Set(ids));
    // What ran twice (in flight at the kill) got a second result with the same event-id.
    const eventIds = new Map<string, Set<string>>();
    for (const r of results.records) {
      const id = JSON.parse(r.value.toString()).requestId as string;
      eventIds.set(id, (eventIds.get(id) ?? new Set()).add(r.headers['event-id']!));
    }
    expect([...eventIds.values()].every((set) => set.size === 1)).toBe(true);
    expect(results.records.length - ids.length).toBeLessThanOrEqual(100);
    // Sent twice: only what the killed member had in flight (its calls, and outcomes on their way), each saying
    // maybeSent.
    const twice = sentTwice(f.simulator.sends());
    expect(twice.length).toBeLessThanOrEqual(2 * 16);
    const last = lastResults(results);
    for (const id of twice) expect(last.get(id), id).toMatchObject({ maybeSent: true });
    await expectAllCommitted(f);
  });

  it('a SIGTERM drain finishes what is in flight and commits it: the next sender sends nothing twice', async () => {
    const KEYS = 40;
    const PER_KEY = 15;
    const { f, results } = await setUp({
      partitions: 3,
      sender: { concurrency: 16, maxBufferedRequests: 100, ratePerSecond: 5000 },
      simulator: { faults: { sendLatencyMs: { min: 20, max: 60 } } },
    });
    const { requests, ids } = workload(KEYS, PER_KEY);
    await produceRequests(f.topics.sendRequests, requests);
    const first = spawnSender(f.env());
    cleanups.push(async () => first.child.kill('SIGKILL'));
    await first.waitForOutput(/"sender":\{/);
    await waitUntil(
      () => f.simulator.sends().length >= 150,
      60_000,
      () => 'the first sender to make progress',
    );
    first.child.kill('SIGTERM');
    expect(await first.exited).toBe(0);
    const atStop = f.simulator.sends().length;
    expect(atStop).toBeLessThan(ids.length);
    // Every call the first sender made has its result.
    await waitUntil(
      () => resultIds(results).size >= atStop,
      10_000,
      () => 'results of the drained sender',
    );

    const second = spawnSender(f.env());
    cleanups.push(async () => second.child.kill('SIGKILL'));
    await second.waitForOutput(/"sender":\{/);
    await waitUntil(
      () => resultIds(results).size >= ids.length,
      120_000,
      () => `all results (${resultIds(results).size}/${ids.length})`,
    );
    second.child.kill('SIGTERM');
    expect(await second.exited).toBe(0);

    const sends = f.simulator.sends();
    expect(duplicates(sends)).toBe(0);
    expect(results.records).toHaveLength(ids.length);
    expectInOrder(firstSendOrder(sends), PER_KEY);
    await expectAllCommitted(f);
  });
});
