import { collectDefaultMetrics, Registry } from 'prom-client';

/** One registry per role process, with the process metrics (RSS, event loop lag, GC). */
export function createMetricsRegistry(role: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ role });
  collectDefaultMetrics({ register: registry, prefix: 'msgbridge_' });
  return registry;
}
