import { createHash } from 'node:crypto';
import type { Config } from '../config/schema.js';
import type { KafkaPort } from '../kafka/client.js';
import { readRange, topicEnds } from '../kafka/dlq-reader.js';
import {
  committedOffsets,
  ensureRedriveLedger,
  ledgerEntry,
  ledgerKey,
  readRedriveLedger,
  redriveGroupId,
  runRedrive,
  setStartOffsets,
} from '../kafka/dlq-redrive.js';
import { connectingToKafka } from '../kafka/failure.js';
import type { OutputRecord } from '../kafka/transactional-engine.js';
import type { ConsumedRecord } from '../kafka/group-consumer.js';
import { MsgbridgeError } from '../platform/errors.js';
import {
  configuredDlqs,
  deadLetterOf,
  isReference,
  matches,
  recheck,
  recheckContext,
  redriveHeaders,
  referenceSource,
  withSource,
  type DeadLetter,
  type Filters,
  type Recheck,
  type StillFailing,
} from './dlq-rules.js';
import { countRecords, startOffsets, type DlqSession, type FilterArgs } from './dlq-browse.js';

/**
 * Redriving dead letters for `msgbridge dlq redrive` without the terminal: the plan (every
 * record of the range read and re-checked, nothing written) and its run. The command (dlq.ts)
 * prints it, the tracker's console calls it (dlq-console.ts). One code path, so the console's
 * redrive is the command's redrive: same re-check, same consumer group per name, same
 * exactly-once transactions, resumable either way.
 */

/** The default name: the topic and the filters as typed, so the same selection resumes the same redrive. */
export function defaultRedriveName(topic: string, opts: FilterArgs): string {
  const filters = [
    opts.code && `code=${opts.code}`,
    opts.business && `business=${opts.business}`,
    opts.since && `since=${opts.since.text}`,
    opts.until && `until=${opts.until.text}`,
  ].filter(Boolean);
  const base = topic.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 60);
  if (filters.length === 0) return `${base}.all`;
  return `${base}.${createHash('sha256').update(filters.join('\n')).digest('hex').slice(0, 10)}`;
}

/** A redrive that commits no chunk for this long stops with a clear message instead of hanging. */
export const STALL_MS = 120_000;

export interface Tally {
  selected: number;
  outside: number;
  /** Selected, but produced again already (by this redrive or another): in the topic's ledger, skipped. */
  redriven: number;
  produced: Map<string, number>;
  failing: Map<string, number>;
}

const newTally = (): Tally => ({
  selected: 0,
  outside: 0,
  redriven: 0,
  produced: new Map(),
  failing: new Map(),
});
export const sum = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);
const bump = (m: Map<string, number>, k: string, n = 1) => m.set(k, (m.get(k) ?? 0) + n);

/** What a redrive would do: every record of its range read and re-checked, nothing written. */
export interface RedrivePlan {
  topic: string;
  name: string;
  groupId: string;
  filters: Filters;
  /** The redrive's consumer group has committed positions: it resumes. */
  resuming: boolean;
  starts: Map<number, number>;
  ends: Map<number, number>;
  tally: Tally;
  /** How many records of the plan were made redrivable by a derivation (e.g. an expiry dropped), by how. */
  derived: Map<string, number>;
  /** The first 20 records that would fail again, one line each. */
  failures: string[];
}

function failureLine(letter: DeadLetter, code: string, reason: string): string {
  return `${letter.partition}/${letter.offset}  ${letter.business ?? '-'}  ${code}: ${reason.length > 200 ? `${reason.slice(0, 199)}…` : reason}`;
}

/**
 * Refuses a topic that is not a configured DLQ unless allowed (each record's role is then read from its schema header).
 */
export function checkRedriveTopic(config: Config, topic: string, allowAnyTopic: boolean | undefined): void {
  const dlqs = configuredDlqs(config);
  if (!dlqs.has(topic) && !allowAnyTopic) {
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      `"${topic}" is not a configured DLQ topic (${[...dlqs.keys()].join(', ')}): refusing to redrive it; pass --allow-any-topic if you mean it (each record's role is then read from its schema header)`,
    );
  }
}

export async function planRedrive(
  session: DlqSession,
  topic: string,
  filters: Filters,
  name: string,
  onProgress?: (done: number, total: number) => void,
): Promise<RedrivePlan> {
  const groupId = redriveGroupId(name);
  const committed = await connectingToKafka(session.brokers, () => committedOffsets(session.kafka, groupId, topic));
  const since = await startOffsets(session, topic, filters.since);
  const starts = new Map(
    [...session.ends].map(([p, e]) => [p, Math.max(e.low, committed.get(p) ?? since.get(p) ?? e.low)]),
  );
  const ends = new Map([...session.ends].map(([p, e]) => [p, e.high]));
  const context = recheckContext(session.config);
  const ledger = await connectingToKafka(session.brokers, () => readRedriveLedger(session.kafka, topic));
  const plan: RedrivePlan = {
    topic,
    name,
    groupId,
    filters,
    resuming: committed.size > 0,
    starts,
    ends,
    tally: newTally(),
    derived: new Map(),
    failures: [],
  };
  const tallyPlan = (letter: DeadLetter, decision: Recheck) => {
    if (decision.kind === 'fails') {
      bump(plan.tally.failing, decision.code);
      if (plan.failures.length < 20) plan.failures.push(failureLine(letter, decision.code, decision.reason));
    } else {
      bump(plan.tally.produced, decision.topic);
      if (decision.derived) bump(plan.derived, decision.derived);
    }
  };
  const total = countRecords(starts, ends);
  const references: DeadLetter[] = [];
  let read = 0;
  await readRange({
    kafka: session.kafka,
    topic,
    from: starts,
    to: ends,
    timeoutMs: 60 * 60_000,
    onRecord: (record) => {
      onProgress?.(++read, total);
      const letter = deadLetterOf(record, session.dlqs);
      if (!matches(letter, filters)) {
        plan.tally.outside++;
        return 'continue';
      }
      plan.tally.selected++;
      if (ledger.has(ledgerKey(letter.partition, letter.offset))) {
        plan.tally.redriven++;
        return 'continue';
      }
      if (isReference(letter)) {
        references.push(letter);
        return 'continue';
      }
      tallyPlan(letter, recheck(letter, context));
      return 'continue';
    },
  });
  // Dead letters too large for the DLQ hold a reference: their request is read from its source record.
  const sources = await resolveReferences(session.kafka, references);
  for (const letter of references) {
    const resolved = sources.get(letter)!;
    tallyPlan(letter, 'kind' in resolved ? resolved : recheck(resolved, context));
  }
  return plan;
}

export interface RedriveRun {
  /** Records produced per second at most. */
  rate?: number | undefined;
  /** Stops the run between chunks (what it committed stays; the same name resumes). */
  signal?: AbortSignal;
  /** After each committed chunk: the running totals and the lines of the records that still fail. */
  onCommitted?(done: Tally, stillFailing: string[]): void;
}

export interface RedriveOutcome {
  done: Tally;
  /** Ended before the range's end: interrupted by the signal, or stalled (no commit for STALL_MS). */
  stopped: 'interrupted' | 'stalled' | undefined;
  ms: number;
}

/** The redrive itself: exactly once from the plan's positions to its ends, through the consumer group of its name. */
export async function executeRedrive(
  session: DlqSession,
  plan: RedrivePlan,
  options: RedriveRun = {},
): Promise<RedriveOutcome> {
  const { topic, filters, groupId } = plan;
  const context = recheckContext(session.config);
  if (!plan.resuming && filters.since !== undefined) await setStartOffsets(session.kafka, groupId, topic, plan.starts);
  await connectingToKafka(session.brokers, () =>
    ensureRedriveLedger(session.kafka, topic, session.config.kafka.replicationFactor),
  );
  // Read after any earlier run ended: what it produced is either in the ledger or was aborted with its transaction.
  const ledger = await connectingToKafka(session.brokers, () => readRedriveLedger(session.kafka, topic));
  const done = newTally();
  const rate = options.rate;
  const started = Date.now();
  let scheduled = 0;
  const abort = new AbortController();
  const onAbort = () => abort.abort();
  options.signal?.addEventListener('abort', onAbort, { once: true });
  // Never a silent hang: a run that commits nothing for STALL_MS stops (what it committed stays).
  let lastProgress = Date.now();
  let stalled = false;
  const watchdog = setInterval(() => {
    if (Date.now() - lastProgress <= STALL_MS) return;
    stalled = true;
    abort.abort();
  }, 1_000);
  try {
    await runRedrive({
      kafka: session.kafka,
      topic,
      groupId,
      ends: plan.ends,
      starts: plan.starts,
      maxBatchRecords: rate ? Math.min(500, rate) : 500,
      signal: abort.signal,
      process: async (records) => {
        const at = Date.now();
        lastProgress = at;
        const outputs: OutputRecord[] = [];
        const chunk = newTally();
        const lines: string[] = [];
        const letters = records.map((record) => deadLetterOf(record, session.dlqs));
        // The chunk's references resolved together: one read per source topic, not one each.
        const sources = await resolveReferences(
          session.kafka,
          letters.filter((l) => matches(l, filters) && !ledger.has(ledgerKey(l.partition, l.offset)) && isReference(l)),
        );
        for (const letter of letters) {
          if (!matches(letter, filters)) {
            chunk.outside++;
            continue;
          }
          chunk.selected++;
          if (ledger.has(ledgerKey(letter.partition, letter.offset))) {
            chunk.redriven++;
            continue;
          }
          const resolved = sources.get(letter) ?? letter;
          const decision = 'kind' in resolved ? resolved : recheck(resolved, context);
          if (decision.kind === 'fails') {
            bump(chunk.failing, decision.code);
            lines.push(failureLine(letter, decision.code, decision.reason));
            continue;
          }
          bump(chunk.produced, decision.topic);
          outputs.push({
            topic: decision.topic,
            key: decision.key,
            value: decision.value,
            headers: { ...decision.headers, ...redriveHeaders(letter, at) },
          });
          outputs.push(
            ledgerEntry(topic, letter.partition, letter.offset, { redrive: plan.name, at, to: decision.topic }),
          );
        }
        const producing = sum(chunk.produced);
        if (rate && producing > 0) {
          scheduled += producing;
          const due = started + (scheduled / rate) * 1000;
          if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
        }
        return {
          outputs,
          committed: () => {
            lastProgress = Date.now();
            done.selected += chunk.selected;
            done.outside += chunk.outside;
            done.redriven += chunk.redriven;
            for (const [t, n] of chunk.produced) bump(done.produced, t, n);
            for (const [c, n] of chunk.failing) bump(done.failing, c, n);
            options.onCommitted?.(done, lines);
          },
        };
      },
    });
  } catch (error) {
    if (abort.signal.aborted) return { done, stopped: stalled ? 'stalled' : 'interrupted', ms: Date.now() - started };
    throw error;
  } finally {
    clearInterval(watchdog);
    options.signal?.removeEventListener('abort', onAbort);
  }
  return { done, stopped: undefined, ms: Date.now() - started };
}

/**
 * The source records of references (dead letters too large for the DLQ), or why each cannot be
 * had: one read per source topic over the span of the wanted offsets of each partition (a read
 * per record made a large redrive crawl).
 */
async function resolveReferences(
  kafka: KafkaPort,
  letters: DeadLetter[],
): Promise<Map<DeadLetter, DeadLetter | StillFailing>> {
  const out = new Map<DeadLetter, DeadLetter | StillFailing>();
  const byTopic = new Map<string, { letter: DeadLetter; partition: number; offset: number }[]>();
  for (const letter of letters) {
    const source = referenceSource(letter);
    if (!source) out.set(letter, withSource(letter, undefined));
    else {
      const list = byTopic.get(source.topic) ?? [];
      list.push({ letter, partition: source.partition, offset: source.offset });
      byTopic.set(source.topic, list);
    }
  }
  for (const [topic, wanted] of byTopic) {
    const ends = await topicEnds(kafka, topic).catch(() => undefined);
    const from = new Map<number, number>();
    const to = new Map<number, number>();
    for (const w of wanted) {
      const end = ends?.get(w.partition);
      if (!end || w.offset < end.low || w.offset >= end.high) continue;
      from.set(w.partition, Math.min(from.get(w.partition) ?? Infinity, w.offset));
      to.set(w.partition, Math.max(to.get(w.partition) ?? -1, w.offset + 1));
    }
    const found = new Map<string, ConsumedRecord>();
    const need = new Set(wanted.map((w) => `${w.partition}/${w.offset}`));
    if (from.size > 0) {
      await readRange({
        kafka,
        topic,
        from,
        to,
        timeoutMs: 10 * 60_000,
        onRecord: (record) => {
          const at = `${record.partition}/${record.offset}`;
          if (need.has(at)) found.set(at, record);
          return found.size === need.size ? 'stop' : 'continue';
        },
      });
    }
    for (const w of wanted) out.set(w.letter, withSource(w.letter, found.get(`${w.partition}/${w.offset}`)));
  }
  return out;
}
