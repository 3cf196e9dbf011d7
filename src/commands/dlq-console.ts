import type { Config } from '../config/schema.js';
import type { Logger } from '../platform/logger.js';
import { errorMessage, isMsgbridgeError, MsgbridgeError } from '../platform/errors.js';
import type { DlqFilter, DlqPort, DlqRedriveAnswer } from '../tracker/dlq-port.js';
import { configuredDlqs } from './dlq-rules.js';
import { dlqList, dlqStats, filtersOf, jsonRecord, openDlq, type FilterArgs } from './dlq-browse.js';
import {
  checkRedriveTopic,
  defaultRedriveName,
  executeRedrive,
  planRedrive,
  sum,
  type RedrivePlan,
} from './dlq-redrive.js';
import type { DlqRecord } from '../tracker/dlq-port.js';
import { parseCursor } from './dlq.js';

/**
 * The tracker console's dead-letter page, served by `msgbridge dlq`'s own functions
 * (dlq-browse.ts, dlq-redrive.ts): the same stats, pages and redrive as the command, named the same way, so a
 * redrive begun in the console resumes from the command line and the other way round. Only
 * the configured DLQ topics. One redrive per topic at a time in this process.
 */
export function createDlqPort(config: Config, brokers: string[], logger: Logger): DlqPort {
  const topics = [...configuredDlqs(config).keys()];
  const running = new Map<string, string>();
  const known = (topic: string) => {
    if (!topics.includes(topic))
      throw new MsgbridgeError('NOT_FOUND', `"${topic}" is not a configured dead-letter topic (${topics.join(', ')})`);
  };
  /** A configured DLQ topic nothing was ever written to may not exist yet: then it is empty. */
  const missing = (error: unknown) =>
    isMsgbridgeError(error, 'INVALID_ARGUMENT') && error.details?.missingTopic !== undefined;
  return {
    topics: () => topics,
    async stats(topic) {
      known(topic);
      const session = await openDlq(config, brokers, topic).catch((error: unknown) => {
        if (missing(error)) return undefined;
        throw error;
      });
      if (!session)
        return {
          topic,
          records: 0,
          partitions: 0,
          oldest: null,
          newest: null,
          byCode: {},
          byBusiness: {},
          redriven: 0,
          redrives: [],
        };
      const s = await dlqStats(session, topic);
      return { ...s, redrives: s.redrives.map((r) => ({ name: r.name, passed: r.passed })) };
    },
    async list(topic, filter, page) {
      known(topic);
      const session = await openDlq(config, brokers, topic).catch((error: unknown) => {
        if (missing(error)) return undefined;
        throw error;
      });
      if (!session) return { records: [], next: null };
      const result = await dlqList(session, topic, filtersOf(filterArgs(filter)), {
        max: page.max,
        from: page.from === undefined ? undefined : cursorOf(page.from),
      });
      return {
        records: result.letters.map((l) => jsonRecord(l) as unknown as DlqRecord),
        next: result.stopped ? [...result.next].map(([p, o]) => `${p}:${o}`).join(',') : null,
      };
    },
    async redrive(topic, filter, { dryRun, by }) {
      known(topic);
      checkRedriveTopic(config, topic, false);
      const args = filterArgs(filter);
      const name = defaultRedriveName(topic, args);
      if (!dryRun && running.has(topic))
        throw new MsgbridgeError(
          'INVALID_ARGUMENT',
          `a redrive of ${topic} started by ${running.get(topic)} is running: wait for it to end`,
        );
      const session = await openDlq(config, brokers, topic);
      const plan = await planRedrive(session, topic, filtersOf(args), name);
      if (dryRun) return answer(plan, true, undefined, 0);
      running.set(topic, by);
      const fields = { by, topic, name, filter, selected: plan.tally.selected, wouldProduce: sum(plan.tally.produced) };
      logger.info(fields, 'dlq redrive started from the console');
      try {
        const outcome = await executeRedrive(session, plan);
        const done = { ...plan, tally: outcome.done };
        logger.info(
          {
            ...fields,
            produced: sum(outcome.done.produced),
            failing: sum(outcome.done.failing),
            stopped: outcome.stopped ?? null,
            ms: outcome.ms,
          },
          'dlq redrive from the console ended',
        );
        return answer(done, false, outcome.stopped, outcome.ms);
      } catch (error) {
        logger.warn(
          { ...fields, err: errorMessage(error) },
          'dlq redrive from the console failed; what it committed stays (the same selection resumes it)',
        );
        throw error;
      } finally {
        running.delete(topic);
      }
    },
  };
}

function answer(
  plan: RedrivePlan,
  dryRun: boolean,
  stopped: 'interrupted' | 'stalled' | undefined,
  ms: number,
): DlqRedriveAnswer {
  return {
    topic: plan.topic,
    name: plan.name,
    dryRun,
    resuming: plan.resuming,
    selected: plan.tally.selected,
    outside: plan.tally.outside,
    redriven: plan.tally.redriven,
    produced: Object.fromEntries(plan.tally.produced),
    failing: Object.fromEntries(plan.tally.failing),
    failures: plan.failures,
    stopped: stopped ?? null,
    ms,
  };
}

function timeArg(name: string, value: string | undefined) {
  if (value === undefined || value === '') return undefined;
  const ms = Date.parse(value);
  if (!Number.isFinite(ms))
    throw new MsgbridgeError('INVALID_ARGUMENT', `${name} expects an ISO time, got ${JSON.stringify(value)}`);
  return { text: value, ms };
}

function filterArgs(filter: DlqFilter): FilterArgs {
  return {
    code: filter.code || undefined,
    business: filter.business || undefined,
    since: timeArg('since', filter.since),
    until: timeArg('until', filter.until),
  };
}

function cursorOf(value: string): Map<number, number> {
  try {
    return parseCursor(value);
  } catch (error) {
    throw new MsgbridgeError('INVALID_ARGUMENT', errorMessage(error).replace('--from', 'from'));
  }
}
