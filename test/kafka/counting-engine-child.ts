import { fileURLToPath } from 'node:url';
import { Kafka, logLevel } from 'kafkajs';
import type { ConsumedRecord } from '../../src/kafka/group-consumer.js';
import { createLogger, type Logger } from '../../src/platform/logger.js';
import { readChangelogPartition } from '../../src/kafka/changelog-reader.js';
import {
  startTransactionalEngine,
  type TransactionalEngine,
  type TransactionalEngineOptions,
} from '../../src/kafka/transactional-engine.js';

/**
 * The proof processor of the engine's tests: a running count per key. Each input record
 * publishes `{ key, count, source }` to a compacted output topic, in the task's partition, and
 * the counts are rebuilt from that topic when a task starts. Applying an input twice shows up as
 * a repeated count, losing one as a gap: exactness is checkable from the output alone.
 *
 * Run as a script (`node --import tsx counting-engine-child.ts`), it reads its settings from
 * COUNTING_ENGINE (JSON), prints `ready` and `progress <n>` lines, and stops on SIGTERM: the
 * kill -9 test runs it as a child.
 */
export interface CountingEngineSettings {
  brokers: string[];
  groupId: string;
  transactionalIdPrefix: string;
  inputTopics: string[];
  outputTopic: string;
  maxBatchRecords?: number;
  /** A pause inside every process() call: slows the engine so that a kill lands mid-stream. */
  delayMs?: number;
  sessionTimeoutMs?: number;
  /** Bytes of padding in every output value (bigger transactions, longer to send). */
  padBytes?: number;
  /** The process kills itself (SIGKILL) at this step of its `after`-th transaction: a kill at an exact point. */
  selfKill?: { phase: 'sent' | 'committed'; after: number };
  /** Once this many records went through process(), this life holds its next batch for ever: a kill
   * from outside always finds work left, however late a loaded machine lets the test send it. */
  holdAfterRecords?: number;
}

export interface CountingEngine {
  engine: TransactionalEngine;
  /** Committed counts of the tasks this member owns. */
  counts: Map<number, Map<string, number>>;
  /** Called inside process(), before the outputs are sent: a test can hold a batch here. */
  gate: { beforeProcess?: (task: number, records: ConsumedRecord[]) => Promise<void> };
  processed: { task: number; topic: string; partition: number; offsets: string[] }[];
}

export async function startCountingEngine(
  settings: CountingEngineSettings,
  extra: Partial<TransactionalEngineOptions> & { kafka?: Kafka; logger?: Logger } = {},
): Promise<CountingEngine> {
  const kafka =
    extra.kafka ??
    new Kafka({
      clientId: 'counting-engine',
      brokers: settings.brokers,
      logLevel: logLevel.NOTHING,
      retry: { retries: 5, initialRetryTime: 100, maxRetryTime: 2000 },
    });
  const counts = new Map<number, Map<string, number>>();
  const gate: CountingEngine['gate'] = {};
  const processed: CountingEngine['processed'] = [];
  const pad = settings.padBytes ? 'p'.repeat(settings.padBytes) : undefined;
  let transactions = 0;
  let seen = 0;
  const engine = await startTransactionalEngine({
    kafka,
    groupId: settings.groupId,
    inputTopics: settings.inputTopics,
    transactionalIdPrefix: settings.transactionalIdPrefix,
    maxBatchRecords: settings.maxBatchRecords ?? 50,
    sessionTimeoutMs: settings.sessionTimeoutMs ?? 6_000,
    heartbeatIntervalMs: 500,
    maxWaitTimeMs: 100,
    transactionTimeoutMs: 20_000,
    retryBackoffMs: { initial: 100, max: 1_000 },
    ...extra,
    onTransaction(event) {
      if (settings.selfKill?.phase === event.phase && ++transactions >= settings.selfKill.after)
        process.kill(process.pid, 'SIGKILL');
    },
    async onTaskAssigned(task, { signal }) {
      const state = new Map<string, number>();
      await readChangelogPartition({
        kafka,
        topic: settings.outputTopic,
        partition: task,
        signal,
        timeoutMs: 30_000,
        onRecord: (r) => state.set(r.key!.toString(), (JSON.parse(r.value!.toString()) as { count: number }).count),
      });
      counts.set(task, state);
    },
    onTaskRevoked(task) {
      counts.delete(task);
    },
    async process(task, records) {
      const state = counts.get(task);
      if (!state) throw new Error(`task ${task} has no state`);
      await gate.beforeProcess?.(task, records);
      if (settings.holdAfterRecords !== undefined && seen >= settings.holdAfterRecords) await new Promise(() => {});
      seen += records.length;
      if (settings.delayMs) await new Promise((r) => setTimeout(r, settings.delayMs));
      const pending = new Map<string, number>();
      const outputs = records.map((r) => {
        const key = r.key!.toString();
        const count = (pending.get(key) ?? state.get(key) ?? 0) + 1;
        pending.set(key, count);
        return {
          topic: settings.outputTopic,
          partition: task,
          key,
          value: JSON.stringify({ key, count, source: r.value!.toString(), ...(pad ? { pad } : {}) }),
        };
      });
      return {
        outputs,
        commit: () => {
          for (const [key, count] of pending) state.set(key, count);
          processed.push({
            task,
            topic: records[0]!.topic,
            partition: records[0]!.partition,
            offsets: records.map((r) => r.offset),
          });
        },
      };
    },
  });
  return { engine, counts, gate, processed };
}

async function main(): Promise<void> {
  const settings = JSON.parse(process.env.COUNTING_ENGINE ?? '{}') as CountingEngineSettings;
  const logger = createLogger({ level: process.env.COUNTING_ENGINE_LOG ?? 'warn', name: 'counting-engine' });
  const { engine } = await startCountingEngine(settings, { logger, onFatal: () => process.exit(3) });
  await engine.ready;
  process.stdout.write('ready\n');
  const progress = setInterval(() => process.stdout.write(`progress ${engine.stats().recordsIn}\n`), 50);
  process.once('SIGTERM', () => {
    clearInterval(progress);
    void engine.stop().then(() => process.exit(0));
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((error: unknown) => {
    process.stderr.write(`counting engine failed: ${(error as Error).message}\n`);
    process.exit(2);
  });
}

/**
 * What is wrong with the output of a counting run, given its inputs: nothing when every input
 * produced exactly one output and each key's counts run 1, 2, 3… in offset order.
 */
export function countingProblems(
  outputs: { partition: number; offset: string; value: Buffer }[],
  inputs: { key: string; value: string }[],
): string[] {
  const problems: string[] = [];
  const parsed = outputs.map((r) => ({
    ...(JSON.parse(r.value.toString()) as { key: string; count: number; source: string }),
    partition: r.partition,
    offset: Number(r.offset),
  }));
  if (parsed.length !== inputs.length) problems.push(`${parsed.length} outputs for ${inputs.length} inputs`);
  const seen = new Map<string, number>();
  for (const p of parsed) seen.set(p.source, (seen.get(p.source) ?? 0) + 1);
  const twice = [...seen].filter(([, n]) => n > 1).map(([s]) => s);
  if (twice.length > 0)
    problems.push(`${twice.length} inputs applied more than once (${twice.slice(0, 5).join(', ')})`);
  const missing = inputs.filter((i) => !seen.has(i.value)).map((i) => i.value);
  if (missing.length > 0) problems.push(`${missing.length} inputs never applied (${missing.slice(0, 5).join(', ')})`);
  const byKey = new Map<string, typeof parsed>();
  for (const p of parsed) byKey.set(p.key, [...(byKey.get(p.key) ?? []), p]);
  const expected = new Map<string, number>();
  for (const i of inputs) expected.set(i.key, (expected.get(i.key) ?? 0) + 1);
  for (const [key, n] of expected) {
    const list = (byKey.get(key) ?? []).sort((a, b) => a.partition - b.partition || a.offset - b.offset);
    if (new Set(list.map((p) => p.partition)).size > 1) problems.push(`key ${key} written to several partitions`);
    const counts = list.map((p) => p.count);
    const wanted = Array.from({ length: n }, (_, i) => i + 1);
    if (counts.join(',') !== wanted.join(','))
      problems.push(
        `key ${key}: counts ${counts.slice(0, 20).join(',')}${counts.length > 20 ? '…' : ''} instead of 1..${n}`,
      );
  }
  return problems;
}
