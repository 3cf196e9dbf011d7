import { Counter, Gauge, Histogram, type Registry } from 'prom-client';
import type { BatchInfo, PublisherStats } from '../kafka/batching-publisher.js';

/** Outcome of one webhook request, as counted and logged. */
export type IngressOutcome =
  | 'published'
  | 'dead_lettered'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'too_large'
  | 'bad_framing'
  | 'unsupported_encoding'
  | 'queue_full'
  | 'publish_timeout'
  | 'kafka_unavailable'
  | 'shutting_down'
  | 'aborted';

export interface IngressMetrics {
  request(topic: string, outcome: IngressOutcome): void;
  deadLetter(reason: string): void;
  publishLatency(destination: 'event' | 'dlq', seconds: number): void;
  batch(info: BatchInfo): void;
  /** A producer was thrown away (it is replaced with backoff). */
  producerFailure(): void;
}

/**
 * The ingress metrics on a prom-client registry. Label children are cached: `labels()` hashes
 * its arguments, which is measurable at tens of thousands of requests a second.
 */
export function createIngressMetrics(
  registry: Registry,
  sources: { stats: () => PublisherStats; ready: () => boolean },
  options: { worker?: string } = {},
): IngressMetrics {
  const registers = [registry];
  // With ingress.workers > 1 (workers.ts): which worker thread answered, so that the aggregated
  // /metrics shows how the kernel spread the connections.
  let workerRequests: { inc(): void } | undefined;
  if (options.worker !== undefined) {
    const counter = new Counter({
      name: 'msgbridge_ingress_worker_requests_total',
      help: 'Webhook requests answered by each ingress worker thread (ingress.workers above 1)',
      labelNames: ['worker'] as const,
      registers,
    });
    counter.inc({ worker: options.worker }, 0);
    workerRequests = counter.labels(options.worker);
  }
  const requests = new Counter({
    name: 'msgbridge_ingress_requests_total',
    help: 'Webhook requests by webhook topic and outcome',
    labelNames: ['topic', 'outcome'] as const,
    registers,
  });
  const deadLetters = new Counter({
    name: 'msgbridge_ingress_dead_letters_total',
    help: 'Authentic webhooks written to the dead-letter topic, by reason',
    labelNames: ['reason'] as const,
    registers,
  });
  const latency = new Histogram({
    name: 'msgbridge_ingress_publish_latency_seconds',
    help: 'From the complete request to the Kafka acknowledgement of its record',
    labelNames: ['destination'] as const,
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
    registers,
  });
  const batchSize = new Histogram({
    name: 'msgbridge_ingress_batch_size',
    help: 'Events per produce request',
    buckets: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
    registers,
  });
  const batchBytes = new Histogram({
    name: 'msgbridge_ingress_batch_bytes',
    help: 'Estimated bytes per produce request',
    buckets: [1024, 8192, 65536, 262144, 1048576, 4194304],
    registers,
  });
  const batchDuration = new Histogram({
    name: 'msgbridge_ingress_batch_duration_seconds',
    help: 'Round trip of one produce request (acks=all)',
    labelNames: ['outcome'] as const,
    buckets: [0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });
  new Gauge({
    name: 'msgbridge_ingress_queue_depth',
    help: 'Events held by the publisher: waiting, or in a produce request in flight',
    labelNames: ['state'] as const,
    registers,
    collect() {
      const s = sources.stats();
      this.set({ state: 'queued' }, s.queuedEvents);
      this.set({ state: 'in_flight' }, s.inFlightEvents);
    },
  });
  new Gauge({
    name: 'msgbridge_ingress_queue_bytes',
    help: 'Bytes held by the publisher',
    registers,
    collect() {
      const s = sources.stats();
      this.set(s.queuedBytes + s.inFlightBytes);
    },
  });
  new Gauge({
    name: 'msgbridge_ingress_kafka_connected',
    help: '1 when every partition leader the topics need has a connected producer (read at scrape time)',
    registers,
    collect() {
      this.set(sources.stats().connected ? 1 : 0);
    },
  });
  const producerFailures = new Counter({
    name: 'msgbridge_ingress_kafka_producer_failures_total',
    help: 'Producers thrown away after a failed or given-up produce request, a failed probe or a failed connect (each is replaced with backoff)',
    registers,
  });
  producerFailures.inc(0);
  new Gauge({
    name: 'msgbridge_ingress_ready',
    help: '1 when /readyz answers 200',
    registers,
    collect() {
      this.set(sources.ready() ? 1 : 0);
    },
  });

  const requestChildren = new Map<string, { inc(): void }>();
  const latencyChildren = { event: latency.labels('event'), dlq: latency.labels('dlq') };
  const durationChildren = { ok: batchDuration.labels('ok'), failed: batchDuration.labels('failed') };

  return {
    request(topic, outcome) {
      const id = `${topic}|${outcome}`;
      let child = requestChildren.get(id);
      if (!child) requestChildren.set(id, (child = requests.labels(topic, outcome)));
      child.inc();
      workerRequests?.inc();
    },
    deadLetter(reason) {
      deadLetters.labels(reason).inc();
    },
    publishLatency(destination, seconds) {
      latencyChildren[destination].observe(seconds);
    },
    batch(info) {
      batchSize.observe(info.events);
      batchBytes.observe(info.bytes);
      (info.ok ? durationChildren.ok : durationChildren.failed).observe(info.durationMs / 1000);
    },
    producerFailure() {
      producerFailures.inc();
    },
  };
}
