import {
  AggregatorRegistry,
  Registry,
  type Aggregator,
  type MetricObjectWithValues,
  type MetricValue,
} from 'prom-client';

/**
 * `/metrics` with worker threads: how the metrics the workers hand over are merged into one
 * registry (README.md, "Worker threads"). Apart from the supervision because it is a pure
 * function of metric names and values: the rules can be read and tested without a thread.
 */

/** One registry's metrics as getMetricsAsJSON gives them (what a worker posts). */
export type Metrics = MetricObjectWithValues<MetricValue<string>>[];

/**
 * How each metric of the workers is combined (README.md, "Worker threads"): counters,
 * histograms and the queue gauges add up; ready and kafka_connected take the minimum (1 only
 * when every worker is); what every thread of the process reads alike (process_*: CPU, memory,
 * descriptors; the businesses file's count and reloads, which each worker does on its own)
 * takes the maximum; what is each thread's own (nodejs_*: heap, event loop, GC) keeps a
 * `worker` label.
 */
export function aggregationOf(name: string): { aggregator: Aggregator; perWorker: boolean } {
  if (name === 'msgbridge_ingress_ready' || name === 'msgbridge_ingress_kafka_connected')
    return { aggregator: 'min', perWorker: false };
  if (name.startsWith('msgbridge_process_') || name.startsWith('msgbridge_config_'))
    return { aggregator: 'max', perWorker: false };
  if (name === 'msgbridge_nodejs_version_info') return { aggregator: 'first', perWorker: false };
  if (name.startsWith('msgbridge_nodejs_')) return { aggregator: 'sum', perWorker: true };
  return { aggregator: 'sum', perWorker: false };
}

/** One registry holding every worker's metrics, combined by aggregationOf. */
export function aggregateWorkerMetrics(workers: { id: string; metrics: Metrics }[]): Registry {
  const relabelled = workers.map(({ id, metrics }) =>
    metrics.map((metric) => {
      const { aggregator, perWorker } = aggregationOf(metric.name);
      return {
        ...metric,
        aggregator,
        values: perWorker ? metric.values.map((v) => ({ ...v, labels: { ...v.labels, worker: id } })) : metric.values,
      };
    }),
  );
  return AggregatorRegistry.aggregate(relabelled);
}

/** The workers' metrics as the main thread reads them (Ingress.metrics with workers): collected anew on every read. */
export class WorkersRegistry extends Registry {
  constructor(private readonly collect: () => Promise<Registry>) {
    super();
  }
  override async metrics(): Promise<string> {
    return (await this.collect()).metrics();
  }
  override async getMetricsAsJSON(): Promise<Metrics> {
    return (await this.collect()).getMetricsAsJSON();
  }
}
