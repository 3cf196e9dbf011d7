import type { Config } from '../config/schema.js';
import { createKafka, type KafkaPort } from '../kafka/client.js';
import { withAdmin } from '../kafka/admin.js';
import { offsetsAtTime, readRange, topicEnds, type PartitionEnds } from '../kafka/dlq-reader.js';
import { ledgerKey, listRedrives, readRedriveLedger, redriveGroupId } from '../kafka/dlq-redrive.js';
import { connectingToKafka } from '../kafka/failure.js';
import { MsgbridgeError } from '../platform/errors.js';
import { configuredDlqs, deadLetterOf, matches, type DeadLetter, type DlqRole, type Filters } from './dlq-rules.js';

/**
 * Browsing a DLQ topic for `msgbridge dlq stats|list` without the terminal: the session on a
 * topic (its partitions' ends, the cluster's id), time filters through the broker's time index,
 * the stats and the pages. The commands (dlq.ts) print it, the tracker's console calls it
 * through its DLQ port (dlq-console.ts); redriving is dlq-redrive.ts.
 */

export interface DlqSession {
  config: Config;
  brokers: string[];
  kafka: KafkaPort;
  dlqs: Map<string, DlqRole>;
  ends: Map<number, PartitionEnds>;
  /** The cluster's id (its brokers may be reached through names shared by several clusters). */
  clusterId: string;
}

/** Time filters as typed (their text is part of a redrive's default name) and the instant. */
export interface TimeArg {
  text: string;
  ms: number;
}

export interface FilterArgs {
  code?: string | undefined;
  business?: string | undefined;
  since?: TimeArg | undefined;
  until?: TimeArg | undefined;
}

export const iso = (ms: number) => (Number.isFinite(ms) ? new Date(ms).toISOString() : '?');

export function filtersOf(opts: FilterArgs): Filters {
  if (opts.since && opts.until && opts.until.ms < opts.since.ms) {
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      `--until (${iso(opts.until.ms)}) is before --since (${iso(opts.since.ms)})`,
    );
  }
  return { code: opts.code, business: opts.business, since: opts.since?.ms, until: opts.until?.ms };
}

/** Brokers and the topic's partitions; a missing topic or an unreachable Kafka ends here. */
export async function openDlq(config: Config, brokers: string[], topic: string): Promise<DlqSession> {
  const kafka = createKafka(config.kafka, { brokers, clientId: 'msgbridge-dlq' });
  const { topics, clusterId } = await connectingToKafka(brokers, () =>
    withAdmin(kafka, async (admin) => ({ topics: await admin.listTopics(), clusterId: await admin.clusterId() })),
  );
  if (!topics.includes(topic)) {
    const dlqs = [...configuredDlqs(config).keys()].filter((t) => topics.includes(t));
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      `topic "${topic}" does not exist on ${brokers.join(',')}; the configured DLQ topics there: ${dlqs.join(', ') || '(none yet)'}`,
      {
        details: { missingTopic: topic },
      },
    );
  }
  const ends = await connectingToKafka(brokers, () => topicEnds(kafka, topic));
  return { config, brokers, kafka, dlqs: configuredDlqs(config), ends, clusterId };
}

/** Where a read starts: `since` through the time index, else the log start; never before the log start. */
export async function startOffsets(
  session: DlqSession,
  topic: string,
  since: number | undefined,
): Promise<Map<number, number>> {
  if (since === undefined) return new Map([...session.ends].map(([p, e]) => [p, e.low]));
  return offsetsAtTime(session.kafka, topic, since, session.ends);
}

/**
 * Where a read ends: past `until` through the time index (records are still filtered by time), else the high watermark.
 */
async function endOffsets(session: DlqSession, topic: string, until: number | undefined): Promise<Map<number, number>> {
  const high = new Map([...session.ends].map(([p, e]) => [p, e.high]));
  if (until === undefined) return high;
  // Timestamps within a partition may go back a little (producer clocks): a margin past --until.
  const after = await offsetsAtTime(session.kafka, topic, until + 60_000, session.ends);
  return new Map([...high].map(([p, h]) => [p, Math.min(h, after.get(p) ?? h)]));
}

export const countRecords = (from: Map<number, number>, to: Map<number, number>) =>
  [...from].reduce((n, [p, o]) => n + Math.max(0, (to.get(p) ?? o) - o), 0);

// ---- stats ----

export interface DlqStats {
  topic: string;
  brokers: string[];
  records: number;
  partitions: number;
  oldest: string | null;
  newest: string | null;
  byCode: Record<string, { count: number; businesses: Record<string, number> }>;
  byBusiness: Record<string, number>;
  byRole: Record<string, number>;
  redriven: number;
  redrives: { name: string; group: string; passed: number; offsets: Record<string, number> }[];
}

/** Counts by code, business and role, oldest and newest, and how far each redrive got (sorted by count). */
export async function dlqStats(
  session: DlqSession,
  topic: string,
  onProgress?: (done: number, total: number) => void,
): Promise<DlqStats> {
  const from = new Map([...session.ends].map(([p, e]) => [p, e.low]));
  const to = new Map([...session.ends].map(([p, e]) => [p, e.high]));
  const total = countRecords(from, to);
  const redrives = await connectingToKafka(session.brokers, () => listRedrives(session.kafka, topic));
  const ledger = await connectingToKafka(session.brokers, () => readRedriveLedger(session.kafka, topic));
  const byCode = new Map<string, { count: number; businesses: Map<string, number> }>();
  const byBusiness = new Map<string, number>();
  const byRole = new Map<string, number>();
  let oldest = Infinity;
  let newest = -Infinity;
  let records = 0;
  let redriven = 0;
  await readRange({
    kafka: session.kafka,
    topic,
    from,
    to,
    timeoutMs: 30 * 60_000,
    onRecord: (record) => {
      const letter = deadLetterOf(record, session.dlqs);
      records++;
      const business = letter.business ?? '(none)';
      const group = byCode.get(letter.code) ?? { count: 0, businesses: new Map() };
      group.count++;
      group.businesses.set(business, (group.businesses.get(business) ?? 0) + 1);
      byCode.set(letter.code, group);
      byBusiness.set(business, (byBusiness.get(business) ?? 0) + 1);
      byRole.set(letter.role ?? 'unknown', (byRole.get(letter.role ?? 'unknown') ?? 0) + 1);
      oldest = Math.min(oldest, letter.timestamp);
      newest = Math.max(newest, letter.timestamp);
      if (ledger.has(ledgerKey(letter.partition, letter.offset))) redriven++;
      onProgress?.(records, total);
      return 'continue';
    },
  });
  const sorted = <T>(map: Map<string, T>, count: (v: T) => number) =>
    [...map].sort((a, b) => count(b[1]) - count(a[1]) || a[0].localeCompare(b[0]));
  return {
    topic,
    brokers: session.brokers,
    records,
    partitions: session.ends.size,
    oldest: records ? iso(oldest) : null,
    newest: records ? iso(newest) : null,
    byCode: Object.fromEntries(
      sorted(byCode, (g) => g.count).map(([code, g]) => [
        code,
        { count: g.count, businesses: Object.fromEntries(sorted(g.businesses, (n) => n)) },
      ]),
    ),
    byBusiness: Object.fromEntries(sorted(byBusiness, (n) => n)),
    byRole: Object.fromEntries(byRole),
    redriven,
    redrives: redrives.map((r) => {
      const passed = [...r.offsets].reduce(
        (n, [p, o]) => n + Math.max(0, Math.min(o, session.ends.get(p)?.high ?? o) - (session.ends.get(p)?.low ?? 0)),
        0,
      );
      return { name: r.name, group: redriveGroupId(r.name), passed, offsets: Object.fromEntries(r.offsets) };
    }),
  };
}

// ---- list ----

export interface DlqPage {
  letters: DeadLetter[];
  /** Per partition, where the next page starts. */
  next: Map<number, number>;
  /** The page filled before the end of the range. */
  stopped: boolean;
}

/** A page of the records that pass the filters, oldest first; `from` continues a previous page. */
export async function dlqList(
  session: DlqSession,
  topic: string,
  filters: Filters,
  page: { max: number; from?: Map<number, number> | undefined },
): Promise<DlqPage> {
  let from = await startOffsets(session, topic, filters.since);
  if (page.from) {
    for (const p of page.from.keys()) {
      if (!session.ends.has(p))
        throw new MsgbridgeError(
          'INVALID_ARGUMENT',
          `--from names partition ${p}, but ${topic} has partitions 0-${session.ends.size - 1}`,
        );
    }
    from = new Map([...from].map(([p, o]) => [p, Math.max(o, page.from!.get(p) ?? o)]));
  }
  const to = await endOffsets(session, topic, filters.until);
  const letters: DeadLetter[] = [];
  const result = await readRange({
    kafka: session.kafka,
    topic,
    from,
    to,
    timeoutMs: 10 * 60_000,
    onRecord: (record) => {
      const letter = deadLetterOf(record, session.dlqs);
      if (!matches(letter, filters)) return 'continue';
      letters.push(letter);
      return letters.length >= page.max ? 'stop' : 'continue';
    },
  });
  letters.sort((a, b) => a.timestamp - b.timestamp || a.partition - b.partition || Number(a.offset) - Number(b.offset));
  return { letters, next: result.next, stopped: result.stopped };
}

/**
 * A record as `dlq list --json` prints it (and the console shows it): the value as text when it is UTF-8, else base64.
 */
export function jsonRecord(l: DeadLetter): Record<string, unknown> {
  const value = l.value;
  const text = value?.toString('utf8');
  const utf8 = value !== null && Buffer.from(text!, 'utf8').equals(value);
  return {
    topic: l.topic,
    partition: l.partition,
    offset: l.offset,
    timestamp: iso(l.timestamp),
    key: l.key?.toString('utf8') ?? null,
    role: l.role ?? null,
    business: l.business ?? null,
    code: l.code,
    reason: l.reason,
    headers: l.headers,
    ...(value === null ? { value: null } : utf8 ? { value: text } : { valueBase64: value.toString('base64') }),
  };
}
