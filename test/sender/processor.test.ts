import { describe, expect, it } from 'vitest';
import type { RecordToWrite } from '../../src/kafka/port.js';
import { silentLogger } from '../../src/observability/logger.js';
import type { WorkContext } from '../../src/sender/keyed-runner.js';
import { noopSenderMetrics } from '../../src/sender/metrics.js';
import { createProcessor, type ProcessorOptions } from '../../src/sender/processor.js';
import { prepareJob, type Job } from '../../src/sender/requests.js';
import type { AttemptOutcome } from '../../src/sender/retry-policy.js';

function job(requestId: string, text = 'hi'): Job {
  const value = { requestId, type: 'text', recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text } };
  return prepareJob({ topic: 't', partition: 0, offset: '0', key: null, value: Buffer.from(JSON.stringify(value)), headers: {} }, new Map([['biz', 'key']]), 1);
}

function context(): WorkContext & { stopNow: () => void; abortNow: () => void } {
  const stop = new AbortController();
  const abort = new AbortController();
  return { partition: '0', offset: 0, stop: stop.signal, abort: abort.signal, stopNow: () => stop.abort(), abortNow: () => abort.abort() };
}

/** A provider whose answers the test scripts; each call waits for `release()` when `gated`. */
function harness(answers: AttemptOutcome[], overrides: Partial<ProcessorOptions> = {}) {
  const calls: unknown[] = [];
  const published: { topic: string; record: RecordToWrite }[] = [];
  let gate: (() => void) | undefined;
  let gated = false;
  const processor = createProcessor({
    client: {
      send: async (_op, _biz, apiKey, body) => {
        expect(apiKey).toBe('key');
        calls.push(body);
        if (gated) await new Promise<void>((r) => (gate = r));
        return answers.shift() ?? { kind: 'accepted', status: 200, messageId: `m${calls.length}` };
      },
    },
    publish: async (topic, record) => {
      published.push({ topic, record });
    },
    limiter: { acquire: async () => undefined },
    apiKeys: new Map([['biz', 'key']]),
    topics: { results: 'results', dlq: 'dlq' },
    policy: { maxAttempts: 3, backoffInitialMs: 5, backoffMaxMs: 10 },
    completedMax: 2,
    metrics: noopSenderMetrics,
    logger: silentLogger,
    random: () => 0.5,
    ...overrides,
  });
  return {
    processor,
    calls,
    published,
    gate: () => (gated = true),
    release: () => gate?.(),
    results: () => published.filter((p) => p.topic === 'results').map((p) => JSON.parse(p.record.value.toString()) as Record<string, unknown>),
  };
}

const tick = () => new Promise((r) => setTimeout(r, 1));

describe('processor', () => {
  it('retries transient failures and publishes the accepted result', async () => {
    const h = harness([{ kind: 'timeout', message: 't' }, { kind: 'http-error', status: 503 }]);
    expect(await h.processor.work(job('r1'), context())).toBe('done');
    expect(h.calls).toHaveLength(3);
    expect(h.results()).toEqual([expect.objectContaining({ requestId: 'r1', outcome: 'accepted', attempts: 3, messageId: 'm3' })]);
  });

  it('publishes a DLQ job to the DLQ topic', async () => {
    const h = harness([]);
    const bad = prepareJob({ topic: 't', partition: 0, offset: '5', key: null, value: Buffer.from('nope'), headers: {} }, new Map([['biz', 'key']]), 1);
    expect(await h.processor.work(bad, context())).toBe('done');
    expect(h.published.map((p) => p.topic)).toEqual(['dlq']);
    expect(h.calls).toHaveLength(0);
  });

  it('never sends a completed requestId again: the stored result is published once more', async () => {
    const h = harness([]);
    await h.processor.work(job('r1'), context());
    await h.processor.work(job('r1', 'different text, same id'), context());
    expect(h.calls).toHaveLength(1);
    const [first, second] = h.published;
    expect(second!.record.value.toString()).toBe(first!.record.value.toString());
    expect(second!.record.headers['event-id']).toBe(first!.record.headers['event-id']);
  });

  it('forgets the oldest completed ids beyond completedMax', async () => {
    const h = harness([]);
    for (const id of ['a', 'b', 'c']) await h.processor.work(job(id), context());
    expect(h.processor.completedCount).toBe(2);
    await h.processor.work(job('a'), context());
    expect(h.calls).toHaveLength(4);
  });

  it('a duplicate arriving while the first is in flight waits for it instead of sending', async () => {
    const h = harness([]);
    h.gate();
    const first = h.processor.work(job('r1'), context());
    await tick();
    const second = h.processor.work(job('r1'), context());
    await tick();
    expect(h.calls).toHaveLength(1);
    h.release();
    expect(await first).toBe('done');
    expect(await second).toBe('done');
    expect(h.calls).toHaveLength(1);
    expect(h.results()).toHaveLength(2);
  });

  it('told to stop: abandons a request waiting to retry, but publishes one whose call succeeds', async () => {
    const slow = harness([{ kind: 'http-error', status: 500 }], { policy: { maxAttempts: 3, backoffInitialMs: 60_000, backoffMaxMs: 60_000 } });
    const ctx = context();
    const pending = slow.processor.work(job('r1'), ctx);
    await tick();
    ctx.stopNow();
    expect(await pending).toBe('abandoned');
    expect(slow.published).toHaveLength(0);

    const h = harness([]);
    h.gate();
    const ctx2 = context();
    const inCall = h.processor.work(job('r2'), ctx2);
    await tick();
    ctx2.stopNow();
    h.release();
    expect(await inCall).toBe('done');
    expect(h.results()).toEqual([expect.objectContaining({ requestId: 'r2', outcome: 'accepted' })]);
  });

  it('retries publishing until Kafka takes it, and gives up only at the hard deadline', async () => {
    let failures = 2;
    const published: RecordToWrite[] = [];
    const h = harness([], {
      publish: async (_topic, record) => {
        if (failures-- > 0) throw new Error('kafka down');
        published.push(record);
      },
    });
    expect(await h.processor.work(job('r1'), context())).toBe('done');
    expect(published).toHaveLength(1);

    const never = harness([], {
      publish: async () => {
        throw new Error('kafka down');
      },
    });
    const ctx = context();
    const pending = never.processor.work(job('r2'), ctx);
    await new Promise((r) => setTimeout(r, 50));
    ctx.abortNow();
    expect(await pending).toBe('abandoned');
    // The send happened: a later duplicate in this process republishes instead of sending.
    expect(never.calls).toHaveLength(1);
  });
});
