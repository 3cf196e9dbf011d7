import { collectDefaultMetrics, Registry } from 'prom-client';
import { EVENT_LOOP_DELAY_GAUGES, registerEventLoopDelay } from './event-loop-delay.js';

const PREFIX = 'msgbridge_';
// The event loop delay is sampled every 100 ms instead of prom-client's 10: its timer woke an
// idle sender 100 times a second, plus the poll after each (idle CPU 10 → 7–9 ms a second,
// docs/benchmarks.md). A stall still delays the sample due during it.
const DELAY_PERIOD_MS = 100;
// prom-client's own delay gauges read its timer's period as delay (see event-loop-delay.ts), so
// they are replaced; collectDefaultMetrics cannot leave out their histogram, whose timer is left
// to tick every 24.8 days.
const UNUSED_TIMER_MS = 2 ** 31 - 1;

/** One registry per role process, with the process metrics (RSS, event loop delay, GC). */
export function createMetricsRegistry(role: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ role });
  collectDefaultMetrics({ register: registry, prefix: PREFIX, eventLoopMonitoringPrecision: UNUSED_TIMER_MS });
  for (const [name] of Object.values(EVENT_LOOP_DELAY_GAUGES)) registry.removeSingleMetric(PREFIX + name);
  registerEventLoopDelay(registry, PREFIX, DELAY_PERIOD_MS);
  return registry;
}
