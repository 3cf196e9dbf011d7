import { Counter, Gauge, type Registry } from 'prom-client';
import type { EngineStats } from '../kafka/transactional-engine.js';
import type { TrackerCounters } from './tracker-logic.js';

/** What the gauges read at scrape time. */
export interface TrackerGaugeSources {
  engine: () => EngineStats;
  ownedTasks: () => number;
  cached: () => { messages: number; conversations: number };
  /** Per owned task: entries and bytes of its local store (read at scrape time). */
  stores: () => {
    task: number;
    messages: number;
    conversations: number;
    outcomes: number;
    inbound: number;
    bytes: number;
  }[];
  /**
   * Records not yet processed per input topic (high watermark − committed offset of the group), refreshed at scrape
   * time.
   */
  lag: () => Promise<Map<string, number>>;
}

export interface TrackerMetrics extends TrackerCounters {
  /** A task's store caught up with its changelogs: `mode` bulk (no usable store) or delta (from its checkpoint). */
  restore(seconds: number, mode: 'bulk' | 'delta', records: number): void;
  expired(kind: 'message' | 'conversation' | 'request_outcome' | 'inbound_message', count: number): void;
}

export function createTrackerMetrics(registry: Registry, sources: TrackerGaugeSources): TrackerMetrics {
  const registers = [registry];
  const events = new Counter({
    name: 'msgbridge_tracker_events_total',
    help: 'Input events applied, by topic and outcome (applied, result_merged, filled_timestamp, filled_after_failure, regression_refused, redundant, duplicate, window_moved, window_unchanged, outcome_recorded, outcome_unchanged, inbound_recorded, inbound_duplicate)',
    labelNames: ['topic', 'outcome'],
    registers,
  });
  const skipped = new Counter({
    name: 'msgbridge_tracker_records_skipped_total',
    help: 'Input records that carry no event the tracker applies, by reason',
    labelNames: ['reason'],
    registers,
  });
  const evictions = new Counter({
    name: 'msgbridge_tracker_evictions_total',
    help: 'States dropped from the in-memory cache to stay within its bound (per task; they stay in the local store)',
    labelNames: ['kind'],
    registers,
  });
  const restoreSeconds = new Gauge({
    name: 'msgbridge_tracker_last_restore_seconds',
    help: 'How long the last task start took to bring its local store up to its changelogs',
    registers,
  });
  const restores = new Counter({
    name: 'msgbridge_tracker_restores_total',
    help: 'Task starts, by mode: bulk (store rebuilt from the changelogs) or delta (read from the store checkpoint)',
    labelNames: ['mode'],
    registers,
  });
  const restoreRecords = new Counter({
    name: 'msgbridge_tracker_restore_records_total',
    help: 'Changelog records read while restoring tasks, by mode',
    labelNames: ['mode'],
    registers,
  });
  const expired = new Counter({
    name: 'msgbridge_tracker_expired_total',
    help: 'States dropped from the local stores after tracker.stateRetentionMs (messages, request outcomes, inbound messages) or tracker.conversationRetentionMs (windows)',
    labelNames: ['kind'],
    registers,
  });
  // Every series from the start (a rate over a series that appears later starts wrong).
  for (const mode of ['bulk', 'delta']) {
    restores.inc({ mode }, 0);
    restoreRecords.inc({ mode }, 0);
  }
  for (const kind of ['message', 'conversation', 'request_outcome', 'inbound_message']) expired.inc({ kind }, 0);
  new Gauge({
    name: 'msgbridge_tracker_store_entries',
    help: 'States in the local store of each owned task, by kind',
    labelNames: ['task', 'kind'],
    registers,
    collect() {
      this.reset();
      for (const s of sources.stores()) {
        this.set({ task: String(s.task), kind: 'message' }, s.messages);
        this.set({ task: String(s.task), kind: 'conversation' }, s.conversations);
        this.set({ task: String(s.task), kind: 'request_outcome' }, s.outcomes);
        this.set({ task: String(s.task), kind: 'inbound_message' }, s.inbound);
      }
    },
  });
  new Gauge({
    name: 'msgbridge_tracker_store_bytes',
    help: 'Bytes the local store of each owned task takes on disk',
    labelNames: ['task'],
    registers,
    collect() {
      this.reset();
      for (const s of sources.stores()) this.set({ task: String(s.task) }, s.bytes);
    },
  });
  const engineGauge = (name: string, help: string, read: (s: EngineStats) => number) =>
    new Gauge({
      name,
      help,
      registers,
      collect() {
        this.set(read(sources.engine()));
      },
    });
  engineGauge(
    'msgbridge_tracker_transactions_committed',
    'Transactions committed by this member since it started',
    (s) => s.transactions,
  );
  engineGauge(
    'msgbridge_tracker_transactions_failed',
    'Transactions that failed (aborted, then the task restarted from Kafka)',
    (s) => s.failedTransactions,
  );
  engineGauge('msgbridge_tracker_fenced', 'Tasks this member lost to a newer owner (fenced)', (s) => s.fenced);
  engineGauge('msgbridge_tracker_records_in', 'Input records processed', (s) => s.recordsIn);
  engineGauge('msgbridge_tracker_records_out', 'State records published', (s) => s.recordsOut);
  new Gauge({
    name: 'msgbridge_tracker_tasks',
    help: 'Tasks (partition numbers of the inputs) this member processes',
    registers,
    collect() {
      this.set(sources.ownedTasks());
    },
  });
  new Gauge({
    name: 'msgbridge_tracker_cached_states',
    help: 'States held in the in-memory caches of all owned tasks, by kind',
    labelNames: ['kind'],
    registers,
    collect() {
      const c = sources.cached();
      this.set({ kind: 'message' }, c.messages);
      this.set({ kind: 'conversation' }, c.conversations);
    },
  });
  new Gauge({
    name: 'msgbridge_tracker_consumer_lag',
    help: 'Input records not yet processed by the tracker group, by topic',
    labelNames: ['topic'],
    registers,
    async collect() {
      for (const [topic, lag] of await sources.lag().catch(() => new Map<string, number>())) this.set({ topic }, lag);
    },
  });
  return {
    event: (topic, outcome) => events.inc({ topic, outcome }),
    skipped: (reason) => skipped.inc({ reason }),
    evicted: (kind) => evictions.inc({ kind }),
    restore(seconds, mode, records) {
      restores.inc({ mode });
      restoreRecords.inc({ mode }, records);
      restoreSeconds.set(seconds);
    },
    expired: (kind, count) => expired.inc({ kind }, count),
  };
}
