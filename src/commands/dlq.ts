import { createHash } from 'node:crypto';
import { createInterface } from 'node:readline/promises';
import { InvalidArgumentError, Option, type Command } from 'commander';
import type { Config } from '../config/schema.js';
import { createKafka, type KafkaClient } from '../kafka/client.js';
import { offsetsAtTime, readRange, topicEnds, type PartitionEnds } from '../kafka/dlq-reader.js';
import { committedOffsets, listRedrives, redriveGroupId, runRedrive, setStartOffsets } from '../kafka/dlq-redrive.js';
import { connectingToKafka } from '../kafka/failure.js';
import type { OutputRecord } from '../kafka/transactional-engine.js';
import { MsgbridgeError } from '../platform/errors.js';
import { commandConfig, operatorBrokers } from './context.js';
import {
  configuredDlqs,
  deadLetterOf,
  excerpt,
  isReference,
  matches,
  recheck,
  recheckContext,
  redriveHeaders,
  referenceSource,
  withSource,
  type DeadLetter,
  type DlqRole,
  type Filters,
  type Recheck,
  type StillFailing,
} from './dlq-rules.js';
import type { ConsumedRecord } from '../kafka/group-consumer.js';
import { parseIntegerOption } from './options.js';

/**
 * `msgbridge dlq stats|list|redrive <topic>`: what is in a dead-letter topic, grouped by why, and
 * sending it back once the cause is fixed. The rules (which role, which code, the re-check) are
 * in dlq-rules.ts; reading and the transactions in src/kafka/dlq-*.ts. The operator's walk
 * through an incident is in the README ("Dead letters") and deploy/observability/README.md.
 */

interface FilterOptions {
  code?: string;
  business?: string;
  since?: TimeArg;
  until?: TimeArg;
}

interface ListOptions extends FilterOptions {
  max: number;
  json?: boolean;
  from?: Map<number, number>;
}

interface RedriveOptions extends FilterOptions {
  dryRun?: boolean;
  rate?: number;
  yes?: boolean;
  name?: string;
  allowAnyTopic?: boolean;
}

/** A time argument: the text as given (part of a redrive's default name) and the instant. */
interface TimeArg {
  text: string;
  ms: number;
}

const out = (line = '') => process.stdout.write(`${line}\n`);
const note = (line: string) => process.stderr.write(`${line}\n`);
const fmt = (n: number) => n.toLocaleString('en-US');
const iso = (ms: number) => (Number.isFinite(ms) ? new Date(ms).toISOString() : '?');

// ---- argument parsers (commander: a refused value exits 2 with the message) ----

const RELATIVE = /^(\d+)\s*(s|m|h|d|w)$/;
const UNIT_MS: Record<string, number> = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 };

/** An ISO time with a zone, ms since the epoch, or a duration ago (`90m`, `2h`, `7d`). */
export function parseTimeArg(name: string, now: () => number = Date.now) {
  return (value: string): TimeArg => {
    const text = value.trim();
    const relative = RELATIVE.exec(text);
    if (relative) return { text, ms: now() - Number(relative[1]) * UNIT_MS[relative[2]!]! };
    if (/^\d{10,16}$/.test(text)) return { text, ms: Number(text) };
    if (/^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:?\d{2}))?$/.test(text)) {
      const ms = Date.parse(text.length === 10 ? `${text}T00:00:00Z` : text);
      if (Number.isFinite(ms)) return { text, ms };
    }
    throw new InvalidArgumentError(`${name} expects an ISO time with a zone (2026-11-20T10:00:00Z), a date (2026-11-20, UTC), ms since the epoch, or a duration ago (30m, 2h, 7d), got "${value}"`);
  };
}

function nonEmpty(name: string) {
  return (value: string): string => {
    if (value.trim() === '') throw new InvalidArgumentError(`${name} expects a value, got an empty one`);
    return value.trim();
  };
}

/** `--rate 100` or `--rate 100/s`: records produced per second. */
export function parseRate(value: string): number {
  const m = /^(\d+)(\/s)?$/.exec(value.trim());
  const n = m ? Number(m[1]) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > 100_000) throw new InvalidArgumentError(`--rate expects records per second from 1 to 100000 (100 or 100/s), got "${value}"`);
  return n;
}

/** A redrive's name: its consumer group and transactional ids are derived from it. */
export function parseRedriveName(value: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/.test(value)) {
    throw new InvalidArgumentError(`--name expects 1-100 letters, digits, '.', '_' or '-' (starting with a letter or digit), got "${value}"`);
  }
  return value;
}

/** `--from 0:120,1:87`: where each partition's next page starts (printed by the previous page). */
export function parseCursor(value: string): Map<number, number> {
  const cursor = new Map<number, number>();
  for (const part of value.split(',')) {
    const m = /^\s*(\d{1,6}):(\d{1,19})\s*$/.exec(part);
    if (!m || cursor.has(Number(m[1])) || !Number.isSafeInteger(Number(m[2]))) {
      throw new InvalidArgumentError(`--from expects partition:offset pairs separated by commas (0:120,1:87), as the previous page printed, got "${value}"`);
    }
    cursor.set(Number(m[1]), Number(m[2]));
  }
  return cursor;
}

function addFilterOptions(command: Command): Command {
  return command
    .option('--code <code>', 'only records with this error code (RELAY_UNKNOWN_BUSINESS, schema, not-json, ...; see dlq stats)', nonEmpty('--code'))
    .option('--business <id>', 'only records of this business', nonEmpty('--business'))
    .option('--since <time>', 'only records written at or after this time (ISO time, ms, or 2h / 7d ago); found by timestamp, not by reading from the start', parseTimeArg('--since'))
    .option('--until <time>', 'only records written at or before this time', parseTimeArg('--until'));
}

function filtersOf(opts: FilterOptions): Filters {
  if (opts.since && opts.until && opts.until.ms < opts.since.ms) {
    throw new MsgbridgeError('INVALID_ARGUMENT', `--until (${iso(opts.until.ms)}) is before --since (${iso(opts.since.ms)})`);
  }
  return { code: opts.code, business: opts.business, since: opts.since?.ms, until: opts.until?.ms };
}

export function registerDlqCommand(program: Command): void {
  const dlq = program.command('dlq').description('inspect and redrive the dead-letter topics (webhooks-dlq, send-requests-dlq)');

  dlq
    .command('stats')
    .description('counts by error code and business, oldest and newest, and how far each redrive got')
    .argument('<topic>', 'a DLQ topic (webhooks-dlq, send-requests-dlq)')
    .option('--json', 'one JSON object instead of the table')
    .action(async (topic: string, opts: { json?: boolean }, command: Command) => stats(command, topic, opts));

  addFilterOptions(
    dlq
      .command('list')
      .description('one line a record (partition/offset, time, business, code, excerpt), oldest first per partition, a page at a time')
      .argument('<topic>', 'a DLQ topic (webhooks-dlq, send-requests-dlq)'),
  )
    .option('-n, --max <count>', 'records a page (default 50)', parseIntegerOption('--max', 1, 100_000), 50)
    .option('--from <cursor>', 'continue where the previous page stopped (it prints the value: partition:offset,...)', parseCursor)
    .option('--json', 'one JSON object a record: the whole record with its headers')
    .action(async (topic: string, opts: ListOptions, command: Command) => list(command, topic, opts));

  addFilterOptions(
    dlq
      .command('redrive')
      .description('re-check the selected dead letters as their role would now and produce those that pass to their original topic (exactly once, resumable)')
      .argument('<topic>', 'a DLQ topic (webhooks-dlq, send-requests-dlq)'),
  )
    .option('--dry-run', 'read and re-check only: say what would happen, write nothing')
    .option('--rate <n/s>', 'records produced per second at most', parseRate)
    .option('-y, --yes', 'do not ask for confirmation (needed when stdin is not a terminal)')
    .option(
      '--name <name>',
      "the redrive's name: its consumer group msgbridge-dlq-redrive.<name> records how far it got (default: derived from the topic and filters, so the same command resumes)",
      parseRedriveName,
    )
    .addOption(new Option('--allow-any-topic', 'redrive a topic that is not one of the configured DLQ topics (kafka.topics.webhooksDlq, sendRequestsDlq)'))
    .action(async (topic: string, opts: RedriveOptions, command: Command) => redrive(command, topic, opts));
}

// ---- shared steps ----

interface Session {
  config: Config;
  brokers: string[];
  kafka: KafkaClient;
  dlqs: Map<string, DlqRole>;
  ends: Map<number, PartitionEnds>;
}

/** Config, brokers, and the topic's partitions; a missing topic or an unreachable Kafka ends here (exit 2). */
async function open(command: Command, topic: string): Promise<Session> {
  const config = commandConfig(command);
  const brokers = operatorBrokers(config);
  const kafka = createKafka(config.kafka, { brokers, clientId: 'msgbridge-dlq' });
  const topics = await connectingToKafka(brokers, async () => {
    const admin = kafka.admin();
    await admin.connect();
    try {
      return await admin.listTopics();
    } finally {
      await admin.disconnect().catch(() => undefined);
    }
  });
  if (!topics.includes(topic)) {
    const dlqs = [...configuredDlqs(config).keys()].filter((t) => topics.includes(t));
    throw new MsgbridgeError('INVALID_ARGUMENT', `topic "${topic}" does not exist on ${brokers.join(',')}; the configured DLQ topics there: ${dlqs.join(', ') || '(none yet)'}`);
  }
  const ends = await connectingToKafka(brokers, () => topicEnds(kafka, topic));
  return { config, brokers, kafka, dlqs: configuredDlqs(config), ends };
}

/** Where a read starts: `--since` through the time index, else the log start; never before the log start. */
async function startOffsets(session: Session, topic: string, since: number | undefined): Promise<Map<number, number>> {
  if (since === undefined) return new Map([...session.ends].map(([p, e]) => [p, e.low]));
  return offsetsAtTime(session.kafka, topic, since, session.ends);
}

/** Where a read ends: past `--until` through the time index (records are still filtered by time), else the high watermark. */
async function endOffsets(session: Session, topic: string, until: number | undefined): Promise<Map<number, number>> {
  const high = new Map([...session.ends].map(([p, e]) => [p, e.high]));
  if (until === undefined) return high;
  // Timestamps within a partition may go back a little (producer clocks): a margin past --until.
  const after = await offsetsAtTime(session.kafka, topic, until + 60_000, session.ends);
  return new Map([...high].map(([p, h]) => [p, Math.min(h, after.get(p) ?? h)]));
}

const countRecords = (from: Map<number, number>, to: Map<number, number>) => [...from].reduce((n, [p, o]) => n + Math.max(0, (to.get(p) ?? o) - o), 0);

function progressPrinter(label: string, total: number): { tick(done: number, extra?: string): void; stop(how?: string): void } {
  let last = 0;
  let printed = false;
  const started = Date.now();
  return {
    tick(done, extra) {
      const now = Date.now();
      if (now - last < 1_000 || now - started < 1_000) return;
      last = now;
      printed = true;
      const rate = Math.round(done / ((now - started) / 1000));
      note(`${label}: ${fmt(done)} of ${fmt(total)} records (${total > 0 ? Math.floor((done / total) * 100) : 100}%)${extra ? ` · ${extra}` : ''} · ${fmt(rate)}/s`);
    },
    stop(how = 'done') {
      if (printed) note(`${label}: ${how} after ${((Date.now() - started) / 1000).toFixed(1)} s`);
    },
  };
}

// ---- stats ----

interface Group {
  count: number;
  businesses: Map<string, number>;
}

async function stats(command: Command, topic: string, opts: { json?: boolean }): Promise<void> {
  const session = await open(command, topic);
  const from = new Map([...session.ends].map(([p, e]) => [p, e.low]));
  const to = new Map([...session.ends].map(([p, e]) => [p, e.high]));
  const total = countRecords(from, to);
  const redrives = await connectingToKafka(session.brokers, () => listRedrives(session.kafka, topic));
  // A record is behind a redrive when that redrive's committed position on its partition is past it.
  const furthest = new Map<number, number>();
  for (const r of redrives) for (const [p, o] of r.offsets) furthest.set(p, Math.max(furthest.get(p) ?? 0, o));
  const byCode = new Map<string, Group>();
  const byBusiness = new Map<string, number>();
  const byRole = new Map<string, number>();
  let oldest = Infinity;
  let newest = -Infinity;
  let records = 0;
  let behind = 0;
  const progress = progressPrinter(`reading ${topic}`, total);
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
      if (Number(letter.offset) < (furthest.get(letter.partition) ?? 0)) behind++;
      progress.tick(records);
      return 'continue';
    },
  });
  progress.stop();
  const sorted = <T>(map: Map<string, T>, count: (v: T) => number) => [...map].sort((a, b) => count(b[1]) - count(a[1]) || a[0].localeCompare(b[0]));
  const redriveLines = redrives.map((r) => {
    const passed = [...r.offsets].reduce((n, [p, o]) => n + Math.max(0, Math.min(o, session.ends.get(p)?.high ?? o) - (session.ends.get(p)?.low ?? 0)), 0);
    return { name: r.name, group: redriveGroupId(r.name), passed, offsets: Object.fromEntries(r.offsets) };
  });
  if (opts.json) {
    out(
      JSON.stringify({
        topic,
        brokers: session.brokers,
        records,
        partitions: session.ends.size,
        oldest: records ? iso(oldest) : null,
        newest: records ? iso(newest) : null,
        byCode: Object.fromEntries(sorted(byCode, (g) => g.count).map(([code, g]) => [code, { count: g.count, businesses: Object.fromEntries(g.businesses) }])),
        byBusiness: Object.fromEntries(sorted(byBusiness, (n) => n)),
        behindARedrive: behind,
        redrives: redriveLines,
      }),
    );
    return;
  }
  out(
    `${topic} on ${session.brokers.join(',')}: ${fmt(records)} records in ${session.ends.size} partition${session.ends.size === 1 ? '' : 's'}${records ? `, ${[...byRole].map(([r, n]) => `${fmt(n)} ${r}`).join(', ')}` : ''}`,
  );
  if (records === 0) {
    out('nothing dead-lettered (or retention removed it).');
    return;
  }
  out(`oldest ${iso(oldest)}   newest ${iso(newest)}`);
  out('');
  out('by code:');
  const width = Math.max(...[...byCode.keys()].map((c) => c.length), 4);
  for (const [code, g] of sorted(byCode, (v) => v.count)) {
    const businesses = sorted(g.businesses, (n) => n)
      .slice(0, 5)
      .map(([b, n]) => `${b} ${fmt(n)}`)
      .join(', ');
    out(`  ${code.padEnd(width)}  ${fmt(g.count).padStart(9)}   ${businesses}${g.businesses.size > 5 ? `, +${g.businesses.size - 5} more` : ''}`);
  }
  out('');
  out('by business:');
  for (const [business, n] of sorted(byBusiness, (v) => v).slice(0, 20)) out(`  ${business.padEnd(width)}  ${fmt(n).padStart(9)}`);
  if (byBusiness.size > 20) out(`  (+${byBusiness.size - 20} more)`);
  out('');
  if (redriveLines.length === 0) {
    out('redrives: none yet (msgbridge dlq redrive)');
  } else {
    out(`already behind a redrive: ${fmt(behind)} of ${fmt(records)} (each was produced again, or re-checked and left failing, or outside that redrive's filters)`);
    for (const r of redriveLines) out(`  redrive ${r.name}: passed ${fmt(r.passed)} records (consumer group ${r.group})`);
  }
}

// ---- list ----

async function list(command: Command, topic: string, opts: ListOptions): Promise<void> {
  const filters = filtersOf(opts);
  const session = await open(command, topic);
  let from = await startOffsets(session, topic, filters.since);
  if (opts.from) {
    for (const p of opts.from.keys()) {
      if (!session.ends.has(p)) throw new MsgbridgeError('INVALID_ARGUMENT', `--from names partition ${p}, but ${topic} has partitions 0-${session.ends.size - 1}`);
    }
    from = new Map([...from].map(([p, o]) => [p, Math.max(o, opts.from!.get(p) ?? o)]));
  }
  const to = await endOffsets(session, topic, filters.until);
  const shown: DeadLetter[] = [];
  const result = await readRange({
    kafka: session.kafka,
    topic,
    from,
    to,
    timeoutMs: 10 * 60_000,
    onRecord: (record) => {
      const letter = deadLetterOf(record, session.dlqs);
      if (!matches(letter, filters)) return 'continue';
      shown.push(letter);
      return shown.length >= opts.max ? 'stop' : 'continue';
    },
  });
  shown.sort((a, b) => a.timestamp - b.timestamp || a.partition - b.partition || Number(a.offset) - Number(b.offset));
  if (opts.json) {
    for (const l of shown) out(JSON.stringify(jsonRecord(l)));
  } else {
    const bw = Math.max(8, ...shown.map((l) => (l.business ?? '-').length));
    const cw = Math.max(4, ...shown.map((l) => l.code.length));
    out(`${'PART/OFFSET'.padEnd(12)}  ${'TIME'.padEnd(24)}  ${'BUSINESS'.padEnd(bw)}  ${'CODE'.padEnd(cw)}  EXCERPT`);
    for (const l of shown) {
      out(`${`${l.partition}/${l.offset}`.padEnd(12)}  ${iso(l.timestamp).padEnd(24)}  ${(l.business ?? '-').padEnd(bw)}  ${l.code.padEnd(cw)}  ${excerpt(l.value)}`);
    }
  }
  const cursor = [...result.next].map(([p, o]) => `${p}:${o}`).join(',');
  if (result.stopped) note(`${shown.length} shown (--max ${opts.max}); next page: msgbridge dlq list ${topic} ${filterArgs(opts)}--from ${cursor}`);
  else note(`${shown.length} shown; end of ${topic}${filters.until !== undefined ? ' up to --until' : ''}`);
}

function jsonRecord(l: DeadLetter): Record<string, unknown> {
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

function filterArgs(opts: FilterOptions): string {
  const q = (s: string) => (/^[A-Za-z0-9_.:+-]+$/.test(s) ? s : `'${s.replace(/'/g, "'\\''")}'`);
  let args = '';
  if (opts.code) args += `--code ${q(opts.code)} `;
  if (opts.business) args += `--business ${q(opts.business)} `;
  if (opts.since) args += `--since ${q(iso(opts.since.ms))} `;
  if (opts.until) args += `--until ${q(iso(opts.until.ms))} `;
  return args;
}

// ---- redrive ----

/** The default name: the topic and the filters as typed, so the same command resumes the same redrive. */
export function defaultRedriveName(topic: string, opts: FilterOptions): string {
  const filters = [opts.code && `code=${opts.code}`, opts.business && `business=${opts.business}`, opts.since && `since=${opts.since.text}`, opts.until && `until=${opts.until.text}`].filter(Boolean);
  const base = topic.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 60);
  if (filters.length === 0) return `${base}.all`;
  return `${base}.${createHash('sha256').update(filters.join('\n')).digest('hex').slice(0, 10)}`;
}

/** A redrive that commits no chunk for this long stops with a clear message instead of hanging. */
const STALL_MS = 120_000;

interface Tally {
  selected: number;
  outside: number;
  produced: Map<string, number>;
  failing: Map<string, number>;
}

const newTally = (): Tally => ({ selected: 0, outside: 0, produced: new Map(), failing: new Map() });
const sum = (m: Map<string, number>) => [...m.values()].reduce((a, b) => a + b, 0);
const bump = (m: Map<string, number>, k: string, n = 1) => m.set(k, (m.get(k) ?? 0) + n);

async function redrive(command: Command, topic: string, opts: RedriveOptions): Promise<void> {
  const filters = filtersOf(opts);
  const config = commandConfig(command);
  const dlqs = configuredDlqs(config);
  if (!dlqs.has(topic) && !opts.allowAnyTopic) {
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      `"${topic}" is not a configured DLQ topic (${[...dlqs.keys()].join(', ')}): refusing to redrive it; pass --allow-any-topic if you mean it (each record's role is then read from its schema header)`,
    );
  }
  if (!opts.yes && !opts.dryRun && !process.stdin.isTTY) {
    throw new MsgbridgeError('INVALID_ARGUMENT', 'a redrive asks for confirmation, but stdin is not a terminal: pass --yes to redrive without asking (or --dry-run to only look)');
  }
  const session = await open(command, topic);
  const name = opts.name ?? defaultRedriveName(topic, opts);
  const groupId = redriveGroupId(name);
  const committed = await connectingToKafka(session.brokers, () => committedOffsets(session.kafka, groupId, topic));
  const since = await startOffsets(session, topic, filters.since);
  const starts = new Map([...session.ends].map(([p, e]) => [p, Math.max(e.low, committed.get(p) ?? since.get(p) ?? e.low)]));
  const ends = new Map([...session.ends].map(([p, e]) => [p, e.high]));
  const context = recheckContext(config);

  out(`redrive of ${topic} on Kafka ${session.brokers.join(',')}`);
  out(`  name ${name} (consumer group and transactional ids ${groupId}); ${committed.size > 0 ? 'resuming where it stopped' : 'a new redrive'}`);
  const filterText = filterArgs(opts).trim();
  out(
    `  records ${[...starts]
      .sort((a, b) => a[0] - b[0])
      .map(([p, o]) => `${p}:${o}-${ends.get(p)}`)
      .join(' ')} (partition:from-to)${filterText ? `, filters ${filterText}` : ''}`,
  );

  // The plan: every record of the range read and re-checked, nothing written.
  const plan = newTally();
  const failures: string[] = [];
  const derived = new Map<string, number>();
  const total = countRecords(starts, ends);
  const progress = progressPrinter(`checking ${topic}`, total);
  const references: DeadLetter[] = [];
  const tallyPlan = (letter: DeadLetter, decision: Recheck) => {
    if (decision.kind === 'fails') {
      bump(plan.failing, decision.code);
      if (failures.length < 20) failures.push(failureLine(letter, decision.code, decision.reason));
    } else {
      bump(plan.produced, decision.topic);
      if (decision.derived) bump(derived, decision.derived);
    }
  };
  let read = 0;
  await readRange({
    kafka: session.kafka,
    topic,
    from: starts,
    to: ends,
    timeoutMs: 60 * 60_000,
    onRecord: (record) => {
      progress.tick(++read);
      const letter = deadLetterOf(record, dlqs);
      if (!matches(letter, filters)) {
        plan.outside++;
        return 'continue';
      }
      plan.selected++;
      if (isReference(letter)) {
        references.push(letter);
        return 'continue';
      }
      tallyPlan(letter, recheck(letter, context));
      return 'continue';
    },
  });
  progress.stop();
  // Dead letters too large for the DLQ hold a reference: their request is read from its source record.
  for (const letter of references) {
    const resolved = await resolveReference(session.kafka, letter);
    tallyPlan(letter, 'kind' in resolved ? resolved : recheck(resolved, context));
  }
  const toProduce = sum(plan.produced);
  out(`  selected ${fmt(plan.selected)} of ${fmt(plan.selected + plan.outside)} records`);
  out(`  would produce ${fmt(toProduce)}${toProduce ? `: ${[...plan.produced].map(([t, n]) => `${fmt(n)} → ${t}`).join(', ')}` : ''}`);
  for (const [how, n] of derived) out(`    ${fmt(n)} of them: ${how}`);
  const failing = sum(plan.failing);
  out(`  would fail again, not produced: ${fmt(failing)}${failing ? ` (${[...plan.failing].map(([c, n]) => `${c} ${fmt(n)}`).join(', ')})` : ''}`);
  for (const line of failures) out(`    ${line}`);
  if (failing > failures.length) out(`    … and ${fmt(failing - failures.length)} more (the run lists each one as it passes it)`);

  if (opts.dryRun) {
    out('dry run: nothing was written (no record produced, no offset committed).');
    return;
  }
  if (toProduce === 0) {
    out('nothing to produce: nothing was written.');
    return;
  }
  if (!opts.yes) {
    const answer = await ask(`Produce ${fmt(toProduce)} records to ${[...plan.produced.keys()].join(', ')} on ${session.brokers.join(',')}? Type yes to go on: `);
    if (answer.trim().toLowerCase() !== 'yes') {
      out('not confirmed: nothing was written.');
      process.exitCode = 1;
      return;
    }
  }
  if (committed.size === 0 && filters.since !== undefined) await setStartOffsets(session.kafka, groupId, topic, starts);

  const done = newTally();
  const rate = opts.rate;
  const started = Date.now();
  let scheduled = 0;
  const run = progressPrinter(`redriving ${topic}`, total);
  const abort = new AbortController();
  const interrupt = () => abort.abort();
  process.once('SIGINT', interrupt);
  process.once('SIGTERM', interrupt);
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
      ends,
      starts,
      maxBatchRecords: rate ? Math.min(500, rate) : 500,
      signal: abort.signal,
      process: async (records) => {
        const at = Date.now();
        lastProgress = at;
        const outputs: OutputRecord[] = [];
        const chunk = newTally();
        const lines: string[] = [];
        for (const record of records) {
          const letter = deadLetterOf(record, dlqs);
          if (!matches(letter, filters)) {
            chunk.outside++;
            continue;
          }
          chunk.selected++;
          const resolved = isReference(letter) ? await resolveReference(session.kafka, letter) : letter;
          const decision = 'kind' in resolved ? resolved : recheck(resolved, context);
          if (decision.kind === 'fails') {
            bump(chunk.failing, decision.code);
            lines.push(failureLine(letter, decision.code, decision.reason));
            continue;
          }
          bump(chunk.produced, decision.topic);
          outputs.push({ topic: decision.topic, key: decision.key, value: decision.value, headers: { ...decision.headers, ...redriveHeaders(letter, at) } });
        }
        if (rate && outputs.length > 0) {
          scheduled += outputs.length;
          const due = started + (scheduled / rate) * 1000;
          if (due > Date.now()) await new Promise((r) => setTimeout(r, due - Date.now()));
        }
        return {
          outputs,
          committed: () => {
            lastProgress = Date.now();
            done.selected += chunk.selected;
            done.outside += chunk.outside;
            for (const [t, n] of chunk.produced) bump(done.produced, t, n);
            for (const [c, n] of chunk.failing) bump(done.failing, c, n);
            for (const line of lines) note(`still failing: ${line}`);
            run.tick(done.selected + done.outside, `${fmt(sum(done.produced))} produced, ${fmt(sum(done.failing))} failing again`);
          },
        };
      },
    });
  } catch (error) {
    run.stop('stopped');
    if (abort.signal.aborted) {
      const sofar = `${fmt(sum(done.produced))} records produced and committed so far; run the same command again to continue where it stopped`;
      if (stalled) {
        note(`msgbridge: the redrive made no progress for ${STALL_MS / 1000} s (Kafka slow or unreachable, or the topic ends in transaction markers): ${sofar}.`);
        process.exitCode = 1;
      } else {
        note(`interrupted: ${sofar}.`);
        process.exitCode = 130;
      }
      return;
    }
    throw error;
  } finally {
    clearInterval(watchdog);
    process.removeListener('SIGINT', interrupt);
    process.removeListener('SIGTERM', interrupt);
  }
  run.stop();
  const produced = sum(done.produced);
  out(
    `done: produced ${fmt(produced)}${produced ? ` (${[...done.produced].map(([t, n]) => `${t} ${fmt(n)}`).join(', ')})` : ''}, ${fmt(sum(done.failing))} still failing, ${fmt(done.outside)} outside the filters, in ${((Date.now() - started) / 1000).toFixed(1)} s.`,
  );
  if (sum(done.failing) > 0) {
    out(`  the records still failing are behind this redrive now: once their cause is fixed, redrive them again under a new name (--name ${name}.2).`);
  }
}

/** A reference's source record (one record read by offset), or why it cannot be had. */
async function resolveReference(kafka: KafkaClient, letter: DeadLetter): Promise<DeadLetter | StillFailing> {
  const source = referenceSource(letter);
  if (!source) return withSource(letter, undefined);
  const ends = await topicEnds(kafka, source.topic).catch(() => undefined);
  const end = ends?.get(source.partition);
  if (!end || source.offset < end.low || source.offset >= end.high) return withSource(letter, undefined);
  let found: ConsumedRecord | undefined;
  await readRange({
    kafka,
    topic: source.topic,
    from: new Map([[source.partition, source.offset]]),
    to: new Map([[source.partition, source.offset + 1]]),
    timeoutMs: 60_000,
    onRecord: (record) => {
      found = record;
      return 'stop';
    },
  });
  return withSource(letter, found);
}

function failureLine(letter: DeadLetter, code: string, reason: string): string {
  return `${letter.partition}/${letter.offset}  ${letter.business ?? '-'}  ${code}: ${reason.length > 200 ? `${reason.slice(0, 199)}…` : reason}`;
}

async function ask(question: string): Promise<string> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return await rl.question(question);
  } finally {
    rl.close();
  }
}
