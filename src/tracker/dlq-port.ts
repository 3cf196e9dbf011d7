/**
 * What the console's dead-letter page needs, as the tracker sees it: a port. The implementation
 * is `msgbridge dlq`'s own code (src/commands/dlq-browse.ts and dlq-redrive.ts, wired by src/commands/dlq-console.ts),
 * injected by `msgbridge tracker` and `msgbridge dev`: the tracker imports no command and no
 * other role (the re-check is the ingress's and the sender's). Without a port the page says so.
 * Every value here is plain JSON.
 */

export interface DlqFilter {
  code?: string | undefined;
  business?: string | undefined;
  /** ISO times, inclusive. */
  since?: string | undefined;
  until?: string | undefined;
}

export interface DlqTopicStats {
  topic: string;
  records: number;
  partitions: number;
  oldest: string | null;
  newest: string | null;
  byCode: Record<string, { count: number; businesses: Record<string, number> }>;
  byBusiness: Record<string, number>;
  redriven: number;
  redrives: { name: string; passed: number }[];
}

export interface DlqRecord {
  topic: string;
  partition: number;
  offset: string;
  timestamp: string;
  key: string | null;
  role: string | null;
  business: string | null;
  code: string;
  reason: string;
  headers: Record<string, string>;
  value?: string | null;
  valueBase64?: string;
}

export interface DlqRecordPage {
  records: DlqRecord[];
  /** Where the next page starts (`partition:offset,...`), null at the end. */
  next: string | null;
}

/** A redrive's plan (dry run) or its result. */
export interface DlqRedriveAnswer {
  topic: string;
  /** The redrive's name: its consumer group records how far it got; the same selection resumes it. */
  name: string;
  dryRun: boolean;
  resuming: boolean;
  selected: number;
  outside: number;
  /** Selected but produced again already, by any redrive (the topic's ledger): skipped. */
  redriven: number;
  /** Records produced (or that would be), by target topic. */
  produced: Record<string, number>;
  /** Records that fail the re-check again (not produced), by code. */
  failing: Record<string, number>;
  /** The first records that would fail again, one line each. */
  failures: string[];
  /** A run that ended early: interrupted, or no progress for two minutes (what it committed stays). */
  stopped: 'interrupted' | 'stalled' | null;
  ms: number;
}

export interface DlqPort {
  /** The configured dead-letter topics. */
  topics(): string[];
  stats(topic: string): Promise<DlqTopicStats>;
  list(topic: string, filter: DlqFilter, page: { max: number; from?: string | undefined }): Promise<DlqRecordPage>;
  /** Dry run: the plan, nothing written. Otherwise the redrive itself (`by` names the caller in its log line). */
  redrive(topic: string, filter: DlqFilter, options: { dryRun: boolean; by: string }): Promise<DlqRedriveAnswer>;
}
