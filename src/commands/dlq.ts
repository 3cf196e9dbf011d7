import { createInterface } from 'node:readline/promises';
import { InvalidArgumentError, Option, type Command } from 'commander';
import { MsgbridgeError } from '../platform/errors.js';
import { commandConfig, operatorBrokers } from './context.js';
import { excerpt } from './dlq-rules.js';
import {
  countRecords,
  dlqList,
  dlqStats,
  filtersOf,
  iso,
  jsonRecord,
  openDlq,
  type DlqSession,
  type FilterArgs,
  type TimeArg,
} from './dlq-browse.js';
import { checkRedriveTopic, defaultRedriveName, executeRedrive, planRedrive, STALL_MS, sum } from './dlq-redrive.js';
import { parseIntegerOption } from './options.js';
import { redriveLedgerTopic } from '../kafka/dlq-redrive.js';

export { defaultRedriveName } from './dlq-redrive.js';

/**
 * `msgbridge dlq stats|list|redrive <topic>`: what is in a dead-letter topic, grouped by why, and
 * sending it back once the cause is fixed. The rules (which role, which code, the re-check) are
 * in dlq-rules.ts; reading and the transactions in src/kafka/dlq-*.ts. The operator's walk
 * through an incident is in docs/operations.md ("Dead letters") and deploy/observability/README.md.
 * The work itself is in dlq-browse.ts and dlq-redrive.ts (the tracker's console calls the same functions); this file
 * parses the arguments and prints.
 */

type FilterOptions = FilterArgs;

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

const out = (line = '') => process.stdout.write(`${line}\n`);
const note = (line: string) => process.stderr.write(`${line}\n`);
const fmt = (n: number) => n.toLocaleString('en-US');

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
    throw new InvalidArgumentError(
      `${name} expects an ISO time with a zone (2026-11-20T10:00:00Z), a date (2026-11-20, UTC), ms since the epoch, or a duration ago (30m, 2h, 7d), got "${value}"`,
    );
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
  if (!Number.isSafeInteger(n) || n < 1 || n > 100_000)
    throw new InvalidArgumentError(`--rate expects records per second from 1 to 100000 (100 or 100/s), got "${value}"`);
  return n;
}

/** A redrive's name: its consumer group and transactional ids are derived from it. */
export function parseRedriveName(value: string): string {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$/.test(value)) {
    throw new InvalidArgumentError(
      `--name expects 1-100 letters, digits, '.', '_' or '-' (starting with a letter or digit), got "${value}"`,
    );
  }
  return value;
}

/** `--from 0:120,1:87`: where each partition's next page starts (printed by the previous page). */
export function parseCursor(value: string): Map<number, number> {
  const cursor = new Map<number, number>();
  for (const part of value.split(',')) {
    const m = /^\s*(\d{1,6}):(\d{1,19})\s*$/.exec(part);
    if (!m || cursor.has(Number(m[1])) || !Number.isSafeInteger(Number(m[2]))) {
      throw new InvalidArgumentError(
        `--from expects partition:offset pairs separated by commas (0:120,1:87), as the previous page printed, got "${value}"`,
      );
    }
    cursor.set(Number(m[1]), Number(m[2]));
  }
  return cursor;
}

function addFilterOptions(command: Command): Command {
  return command
    .option(
      '--code <code>',
      'only records with this error code (RELAY_UNKNOWN_BUSINESS, schema, not-json, ...; see dlq stats)',
      nonEmpty('--code'),
    )
    .option('--business <id>', 'only records of this business', nonEmpty('--business'))
    .option(
      '--since <time>',
      'only records written at or after this time (ISO time, ms, or 2h / 7d ago); found by timestamp, not by reading from the start',
      parseTimeArg('--since'),
    )
    .option('--until <time>', 'only records written at or before this time', parseTimeArg('--until'));
}

export function registerDlqCommand(program: Command): void {
  const dlq = program
    .command('dlq')
    .description('inspect and redrive the dead-letter topics (webhooks-dlq, send-requests-dlq)');

  dlq
    .command('stats')
    .description('counts by error code and business, oldest and newest, and how far each redrive got')
    .argument('<topic>', 'a DLQ topic (webhooks-dlq, send-requests-dlq)')
    .option('--json', 'one JSON object instead of the table')
    .action(async (topic: string, opts: { json?: boolean }, command: Command) => stats(command, topic, opts));

  addFilterOptions(
    dlq
      .command('list')
      .description(
        'one line a record (partition/offset, time, business, code, excerpt), oldest first per partition, a page at a time',
      )
      .argument('<topic>', 'a DLQ topic (webhooks-dlq, send-requests-dlq)'),
  )
    .option('-n, --max <count>', 'records a page (default 50)', parseIntegerOption('--max', 1, 100_000), 50)
    .option(
      '--from <cursor>',
      'continue where the previous page stopped (it prints the value: partition:offset,...)',
      parseCursor,
    )
    .option('--json', 'one JSON object a record: the whole record with its headers')
    .action(async (topic: string, opts: ListOptions, command: Command) => list(command, topic, opts));

  addFilterOptions(
    dlq
      .command('redrive')
      .description(
        're-check the selected dead letters as their role would now and produce those that pass to their original topic (exactly once, resumable)',
      )
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
    .addOption(
      new Option(
        '--allow-any-topic',
        'redrive a topic that is not one of the configured DLQ topics (kafka.topics.webhooksDlq, sendRequestsDlq)',
      ),
    )
    .action(async (topic: string, opts: RedriveOptions, command: Command) => redrive(command, topic, opts));
}

// ---- shared steps ----

/** Config, brokers, and the topic's partitions; a missing topic or an unreachable Kafka ends here (exit 2). */
async function open(command: Command, topic: string): Promise<DlqSession> {
  const config = commandConfig(command);
  return openDlq(config, operatorBrokers(config), topic);
}

function progressPrinter(
  label: string,
  total: number,
): { tick(done: number, extra?: string): void; stop(how?: string): void } {
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
      note(
        `${label}: ${fmt(done)} of ${fmt(total)} records (${total > 0 ? Math.floor((done / total) * 100) : 100}%)${extra ? ` · ${extra}` : ''} · ${fmt(rate)}/s`,
      );
    },
    stop(how = 'done') {
      if (printed) note(`${label}: ${how} after ${((Date.now() - started) / 1000).toFixed(1)} s`);
    },
  };
}

// ---- stats ----

async function stats(command: Command, topic: string, opts: { json?: boolean }): Promise<void> {
  const session = await open(command, topic);
  const total = countRecords(
    new Map([...session.ends].map(([p, e]) => [p, e.low])),
    new Map([...session.ends].map(([p, e]) => [p, e.high])),
  );
  const progress = progressPrinter(`reading ${topic}`, total);
  const s = await dlqStats(session, topic, (done) => progress.tick(done));
  progress.stop();
  if (opts.json) {
    const { byRole: _byRole, ...json } = s;
    out(JSON.stringify(json));
    return;
  }
  const { records } = s;
  const byRole = Object.entries(s.byRole);
  out(
    `${topic} on ${session.brokers.join(',')}: ${fmt(records)} records in ${s.partitions} partition${s.partitions === 1 ? '' : 's'}${records ? `, ${byRole.map(([r, n]) => `${fmt(n)} ${r}`).join(', ')}` : ''}`,
  );
  if (records === 0) {
    out('nothing dead-lettered (or retention removed it).');
    return;
  }
  out(`oldest ${s.oldest}   newest ${s.newest}`);
  out('');
  out('by code:');
  const width = Math.max(...Object.keys(s.byCode).map((c) => c.length), 4);
  for (const [code, g] of Object.entries(s.byCode)) {
    const all = Object.entries(g.businesses);
    const businesses = all
      .slice(0, 5)
      .map(([b, n]) => `${b} ${fmt(n)}`)
      .join(', ');
    out(
      `  ${code.padEnd(width)}  ${fmt(g.count).padStart(9)}   ${businesses}${all.length > 5 ? `, +${all.length - 5} more` : ''}`,
    );
  }
  out('');
  out('by business:');
  const byBusiness = Object.entries(s.byBusiness);
  for (const [business, n] of byBusiness.slice(0, 20)) out(`  ${business.padEnd(width)}  ${fmt(n).padStart(9)}`);
  if (byBusiness.length > 20) out(`  (+${byBusiness.length - 20} more)`);
  out('');
  if (s.redrives.length === 0) {
    out('redrives: none yet (msgbridge dlq redrive)');
  } else {
    out(
      `already redriven: ${fmt(s.redriven)} of ${fmt(records)} (produced again once; every redrive skips them: ledger ${redriveLedgerTopic(s.topic)})`,
    );
    for (const r of s.redrives) out(`  redrive ${r.name}: passed ${fmt(r.passed)} records (consumer group ${r.group})`);
  }
}

// ---- list ----

async function list(command: Command, topic: string, opts: ListOptions): Promise<void> {
  const filters = filtersOf(opts);
  const session = await open(command, topic);
  const page = await dlqList(session, topic, filters, { max: opts.max, from: opts.from });
  const shown = page.letters;
  if (opts.json) {
    for (const l of shown) out(JSON.stringify(jsonRecord(l)));
  } else {
    const bw = Math.max(8, ...shown.map((l) => (l.business ?? '-').length));
    const cw = Math.max(4, ...shown.map((l) => l.code.length));
    out(`${'PART/OFFSET'.padEnd(12)}  ${'TIME'.padEnd(24)}  ${'BUSINESS'.padEnd(bw)}  ${'CODE'.padEnd(cw)}  EXCERPT`);
    for (const l of shown) {
      out(
        `${`${l.partition}/${l.offset}`.padEnd(12)}  ${iso(l.timestamp).padEnd(24)}  ${(l.business ?? '-').padEnd(bw)}  ${l.code.padEnd(cw)}  ${excerpt(l.value)}`,
      );
    }
  }
  const cursor = [...page.next].map(([p, o]) => `${p}:${o}`).join(',');
  if (page.stopped)
    note(
      `${shown.length} shown (--max ${opts.max}); next page: msgbridge dlq list ${topic} ${filterArgs(opts)}--from ${cursor}`,
    );
  else note(`${shown.length} shown; end of ${topic}${filters.until !== undefined ? ' up to --until' : ''}`);
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

async function redrive(command: Command, topic: string, opts: RedriveOptions): Promise<void> {
  const filters = filtersOf(opts);
  const config = commandConfig(command);
  checkRedriveTopic(config, topic, opts.allowAnyTopic);
  if (!opts.yes && !opts.dryRun && !process.stdin.isTTY) {
    throw new MsgbridgeError(
      'INVALID_ARGUMENT',
      'a redrive asks for confirmation, but stdin is not a terminal: pass --yes to redrive without asking (or --dry-run to only look)',
    );
  }
  const session = await open(command, topic);
  const name = opts.name ?? defaultRedriveName(topic, opts);

  let progress: ReturnType<typeof progressPrinter> | undefined;
  const plan = await planRedrive(session, topic, filters, name, (done, total) =>
    (progress ??= progressPrinter(`checking ${topic}`, total)).tick(done),
  );
  progress?.stop();
  const { starts, ends, groupId } = plan;
  out(`redrive of ${topic} on Kafka ${session.brokers.join(',')} (cluster ${session.clusterId})`);
  out(
    `  name ${name} (consumer group and transactional ids ${groupId}); ${plan.resuming ? 'resuming where it stopped' : 'a new redrive'}`,
  );
  const filterText = filterArgs(opts).trim();
  out(
    `  records ${[...starts]
      .sort((a, b) => a[0] - b[0])
      .map(([p, o]) => `${p}:${o}-${ends.get(p)}`)
      .join(' ')} (partition:from-to)${filterText ? `, filters ${filterText}` : ''}`,
  );
  const toProduce = sum(plan.tally.produced);
  out(`  selected ${fmt(plan.tally.selected)} of ${fmt(plan.tally.selected + plan.tally.outside)} records`);
  out(
    `  would produce ${fmt(toProduce)}${toProduce ? `: ${[...plan.tally.produced].map(([t, n]) => `${fmt(n)} → ${t}`).join(', ')}` : ''}`,
  );
  for (const [how, n] of plan.derived) out(`    ${fmt(n)} of them: ${how}`);
  if (plan.tally.redriven > 0)
    out(`  already redriven, skipped: ${fmt(plan.tally.redriven)} (ledger ${redriveLedgerTopic(plan.topic)})`);
  const failing = sum(plan.tally.failing);
  out(
    `  would fail again, not produced: ${fmt(failing)}${failing ? ` (${[...plan.tally.failing].map(([c, n]) => `${c} ${fmt(n)}`).join(', ')})` : ''}`,
  );
  for (const line of plan.failures) out(`    ${line}`);
  if (failing > plan.failures.length)
    out(`    … and ${fmt(failing - plan.failures.length)} more (the run lists each one as it passes it)`);

  if (opts.dryRun) {
    out('dry run: nothing was written (no record produced, no offset committed).');
    return;
  }
  if (toProduce === 0) {
    out('nothing to produce: nothing was written.');
    return;
  }
  if (!opts.yes) {
    const answer = await ask(
      `Produce ${fmt(toProduce)} records to ${[...plan.tally.produced.keys()].join(', ')} on ${session.brokers.join(',')}? Type yes to go on: `,
    );
    if (answer.trim().toLowerCase() !== 'yes') {
      out('not confirmed: nothing was written.');
      process.exitCode = 1;
      return;
    }
  }

  const run = progressPrinter(`redriving ${topic}`, countRecords(starts, ends));
  const abort = new AbortController();
  const interrupt = () => abort.abort();
  process.once('SIGINT', interrupt);
  process.once('SIGTERM', interrupt);
  let outcome;
  try {
    outcome = await executeRedrive(session, plan, {
      rate: opts.rate,
      signal: abort.signal,
      onCommitted: (done, stillFailing) => {
        for (const line of stillFailing) note(`still failing: ${line}`);
        run.tick(
          done.selected + done.outside,
          `${fmt(sum(done.produced))} produced, ${fmt(sum(done.failing))} failing again`,
        );
      },
    });
  } finally {
    process.removeListener('SIGINT', interrupt);
    process.removeListener('SIGTERM', interrupt);
  }
  const { done } = outcome;
  if (outcome.stopped) {
    run.stop('stopped');
    const sofar = `${fmt(sum(done.produced))} records produced and committed so far; run the same command again to continue where it stopped`;
    if (outcome.stopped === 'stalled') {
      note(
        `msgbridge: the redrive made no progress for ${STALL_MS / 1000} s (Kafka slow or unreachable, or the topic ends in transaction markers): ${sofar}.`,
      );
      process.exitCode = 1;
    } else {
      note(`interrupted: ${sofar}.`);
      process.exitCode = 130;
    }
    return;
  }
  run.stop();
  const produced = sum(done.produced);
  out(
    `done: produced ${fmt(produced)}${produced ? ` (${[...done.produced].map(([t, n]) => `${t} ${fmt(n)}`).join(', ')})` : ''}, ${fmt(sum(done.failing))} still failing, ${fmt(done.redriven)} already redriven (skipped), ${fmt(done.outside)} outside the filters, in ${(outcome.ms / 1000).toFixed(1)} s.`,
  );
  if (sum(done.failing) > 0) {
    out(
      `  the records still failing are behind this redrive now: once their cause is fixed, redrive them again under a new name (--name ${name}.2).`,
    );
  }
}

async function ask(question: string): Promise<string> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return await rl.question(question);
  } finally {
    rl.close();
  }
}
