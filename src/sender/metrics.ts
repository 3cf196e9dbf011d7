import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { ConversationTableStats } from './conversation-table.js';
import type { RunnerStats } from './keyed-runner.js';

/**
 * How a request finished, as the `outcome` label of msgbridge_sender_requests_total (not the tracker's RequestOutcome
 * record).
 */
export type RequestOutcomeLabel = 'accepted' | 'rejected' | 'expired' | 'dlq' | 'duplicate';

/** What the conversation window guard did with a text (README "Conversation window"). */
export type ConversationDecision = 'open' | 'unknown' | 'override' | 'sms' | 'rejected' | 'fallback';

/** What the sender reports; prom-client behind it (createSenderMetrics), a no-op in unit tests. */
export interface SenderMetrics {
  outcome(outcome: RequestOutcomeLabel, businessId: string | undefined): void;
  providerCall(operation: string, result: string, seconds: number): void;
  retry(reason: string): void;
  inFlight(delta: 1 | -1): void;
  requestToResult(seconds: number): void;
  commit(result: 'ok' | 'error'): void;
  rebalance(): void;
  publishError(): void;
  circuitChange(businessId: string, state: 'open' | 'closed'): void;
  conversation(decision: ConversationDecision, businessId: string): void;
  conversationRecordSkipped(): void;
}

/** What the gauges read at scrape time. */
export interface SenderGaugeSources {
  stats: () => RunnerStats;
  /** Businesses whose circuit is open. */
  openCircuits: () => string[];
  /** Businesses whose adaptive rate is below the configured one, with their rate. */
  slowedRates: () => Map<string, number>;
  configuredRate: number;
  businesses: readonly string[];
  /** False while results cannot be published (the last produce failed). */
  publishing: () => boolean;
  /** The conversation table, when the guard is on. */
  conversationTable?: () => ConversationTableStats;
}

export const noopSenderMetrics: SenderMetrics = {
  outcome() {},
  providerCall() {},
  retry() {},
  inFlight() {},
  requestToResult() {},
  commit() {},
  rebalance() {},
  publishError() {},
  circuitChange() {},
  conversation() {},
  conversationRecordSkipped() {},
};

export function createSenderMetrics(registry: Registry, sources: SenderGaugeSources): SenderMetrics {
  const registers = [registry];
  const requests = new Counter({
    name: 'msgbridge_sender_requests_total',
    help: 'Send requests finished, by outcome (accepted, rejected, expired, dlq, duplicate = a repeated requestId answered from memory)',
    labelNames: ['outcome', 'business'],
    registers,
  });
  const latency = new Histogram({
    name: 'msgbridge_sender_provider_request_duration_seconds',
    help: 'Duration of one provider send call, by operation and result (2xx, 4xx, 5xx, timeout, network)',
    labelNames: ['operation', 'result'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers,
  });
  const retries = new Counter({
    name: 'msgbridge_sender_retries_total',
    help: 'Provider calls retried, by reason (rate-limited, server-error, timeout, network, other)',
    labelNames: ['reason'],
    registers,
  });
  const inFlight = new Gauge({
    name: 'msgbridge_sender_provider_in_flight',
    help: 'Provider calls in progress',
    registers,
  });
  const endToEnd = new Histogram({
    name: 'msgbridge_sender_request_to_result_seconds',
    help: 'From the request record timestamp to its result being acknowledged by Kafka',
    buckets: [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300],
    registers,
  });
  const commits = new Counter({
    name: 'msgbridge_sender_commits_total',
    help: 'Offset commits, by result',
    labelNames: ['result'],
    registers,
  });
  const rebalances = new Counter({
    name: 'msgbridge_sender_assignments_total',
    help: 'Group (re)joins with a new assignment',
    registers,
  });
  const publishErrors = new Counter({
    name: 'msgbridge_sender_publish_errors_total',
    help: 'Failed attempts to publish a result or DLQ record (retried)',
    registers,
  });
  const circuitChanges = new Counter({
    name: 'msgbridge_sender_circuit_changes_total',
    help: 'Changes of state of the per-business provider circuit (open: the provider keeps failing, requests wait; closed: it answers again)',
    labelNames: ['business', 'state'],
    registers,
  });
  registerStateGauges(registers, sources);
  const conversations = new Counter({
    name: 'msgbridge_sender_conversation_window_total',
    help: 'Texts checked by the conversation window guard (sender.conversationWindow "reject"), by decision: open (sent), unknown (sent: the table cannot tell), override (sent: conversationWindow "ignore"), sms (sent: the rule is only WhatsApp\'s), rejected (refused without a provider call), fallback (its fallbackTemplate sent instead)',
    labelNames: ['decision', 'business'],
    registers,
  });
  const skippedRecords = new Counter({
    name: 'msgbridge_sender_conversation_records_skipped_total',
    help: 'Records of the conversations topic that are not a conversation window (skipped)',
    registers,
  });
  if (sources.conversationTable) registerConversationTableGauges(registers, sources.conversationTable);
  // Per-request series, each label set resolved once: prom-client hashes a labels object on
  // every call otherwise (2% of the sender's CPU at 5,000 results/s). Bounded by the label values
  // (outcomes × configured businesses, operations × result classes).
  const outcomes = new Map<string, ReturnType<typeof requests.labels>>();
  const calls = new Map<string, ReturnType<typeof latency.labels>>();
  const outcomeSeries = (outcome: string, business: string) => {
    const key = `${outcome}\u0000${business}`;
    let series = outcomes.get(key);
    if (!series) outcomes.set(key, (series = requests.labels({ outcome, business })));
    return series;
  };
  const callSeries = (operation: string, result: string) => {
    const key = `${operation}\u0000${result}`;
    let series = calls.get(key);
    if (!series) calls.set(key, (series = latency.labels({ operation, result })));
    return series;
  };
  return {
    conversation: (decision, businessId) => conversations.inc({ decision, business: businessId }),
    conversationRecordSkipped: () => skippedRecords.inc(),
    outcome: (outcome, businessId) => outcomeSeries(outcome, businessId ?? 'unknown').inc(),
    providerCall: (operation, result, seconds) => callSeries(operation, result).observe(seconds),
    retry: (reason) => retries.inc({ reason }),
    inFlight: (delta) => inFlight.inc(delta),
    requestToResult: (seconds) => endToEnd.observe(seconds),
    commit: (result) => commits.inc({ result }),
    rebalance: () => rebalances.inc(),
    publishError: () => publishErrors.inc(),
    circuitChange: (business, state) => circuitChanges.inc({ business, state }),
  };
}

/** The gauges read at scrape time: circuits, rates, publishing, the runner's buffers and partitions. */
function registerStateGauges(registers: Registry[], sources: SenderGaugeSources): void {
  const { stats } = sources;
  new Gauge({
    name: 'msgbridge_sender_circuit_open',
    help: '1 while the provider circuit of a business is open (its requests wait, one probe at a time), else 0',
    labelNames: ['business'],
    registers,
    collect() {
      const open = new Set(sources.openCircuits());
      for (const business of new Set([...sources.businesses, ...open]))
        this.set({ business }, open.has(business) ? 1 : 0);
    },
  });
  new Gauge({
    name: 'msgbridge_sender_rate_per_second',
    help: 'Current token-bucket rate per business: lowered by 429s, climbing back to sender.ratePerSecond',
    labelNames: ['business'],
    registers,
    collect() {
      const slowed = sources.slowedRates();
      for (const business of new Set([...sources.businesses, ...slowed.keys()]))
        this.set({ business }, slowed.get(business) ?? sources.configuredRate);
    },
  });
  new Gauge({
    name: 'msgbridge_sender_results_publishable',
    help: '1 while results reach Kafka, 0 after a failed produce until one succeeds again (then /readyz is 503)',
    registers,
    collect() {
      this.set(sources.publishing() ? 1 : 0);
    },
  });
  new Gauge({
    name: 'msgbridge_sender_buffered_requests',
    help: 'Requests taken from Kafka and not yet finished (queued + running)',
    registers,
    collect() {
      this.set(stats().buffered);
    },
  });
  new Gauge({
    name: 'msgbridge_sender_commit_lag',
    help: 'Records read but not yet committed, over the owned partitions',
    registers,
    collect() {
      this.set(stats().commitLag);
    },
  });
  new Gauge({
    name: 'msgbridge_sender_owned_partitions',
    help: 'Partitions of send-requests this member owns',
    registers,
    collect() {
      this.set(stats().partitions);
    },
  });
}

/** The conversation table's gauges (when the guard is on). */
function registerConversationTableGauges(registers: Registry[], table: () => ConversationTableStats): void {
  new Gauge({
    name: 'msgbridge_sender_conversation_table_entries',
    help: "Open conversation windows in the sender's table (bounded by sender.conversationTableMaxEntries)",
    registers,
    collect() {
      this.set(table().entries);
    },
  });
  new Gauge({
    name: 'msgbridge_sender_conversation_table_complete',
    help: '1 once the conversations topic was read to its end and is followed (a customer never seen counts as closed), else 0',
    registers,
    collect() {
      this.set(table().complete ? 1 : 0);
    },
  });
  let evictedSeen = 0;
  new Counter({
    name: 'msgbridge_sender_conversation_table_evictions_total',
    help: 'Open windows dropped because the table was full (texts to customers never seen are then sent as they are until those windows would have closed)',
    registers,
    collect() {
      const evicted = table().evictedOpen;
      if (evicted > evictedSeen) this.inc(evicted - evictedSeen);
      evictedSeen = evicted;
    },
  });
}
