import { collectDefaultMetrics, Registry } from 'prom-client';

/** One registry per role process, with the process metrics (RSS, event loop lag, GC). */
export function createMetricsRegistry(role: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ role });
  // The event loop delay is sampled every 100 ms instead of prom-client's 10: its timer woke an
  // idle sender 100 times a second, plus the poll after each (idle CPU 10 → 7–9 ms a second,
  // docs/benchmarks.md). A stall still delays the sample due during it.
  collectDefaultMetrics({ register: registry, prefix: 'msgbridge_', eventLoopMonitoringPrecision: 100 });
  return registry;
}
