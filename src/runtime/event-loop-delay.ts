import { createHistogram } from 'node:perf_hooks';
import { Gauge, type Registry } from 'prom-client';

/** What a Node histogram exposes (perf_hooks' createHistogram); a plain object in the unit tests. */
export interface DelayHistogram {
  readonly count: number;
  readonly min: number;
  readonly max: number;
  readonly mean: number;
  readonly stddev: number;
  percentile(p: number): number;
}

export interface DelayFigures {
  min: number;
  max: number;
  mean: number;
  stddev: number;
  p50: number;
  p90: number;
  p99: number;
}

/** The figures of a histogram of delays in nanoseconds, in seconds; undefined when it is empty. */
export function delayFigures(histogram: DelayHistogram): DelayFigures | undefined {
  if (histogram.count === 0) return undefined;
  return {
    min: histogram.min / 1e9,
    max: histogram.max / 1e9,
    mean: histogram.mean / 1e9,
    stddev: histogram.stddev / 1e9,
    p50: histogram.percentile(50) / 1e9,
    p90: histogram.percentile(90) / 1e9,
    p99: histogram.percentile(99) / 1e9,
  };
}

/** The gauges prom-client's default metrics name for them, so dashboards keep working. */
export const EVENT_LOOP_DELAY_GAUGES = {
  min: ['nodejs_eventloop_lag_min_seconds', 'The minimum event loop delay since the last scrape.', 'min'],
  max: ['nodejs_eventloop_lag_max_seconds', 'The maximum event loop delay since the last scrape.', 'max'],
  mean: ['nodejs_eventloop_lag_mean_seconds', 'The mean event loop delay since the last scrape.', 'average'],
  stddev: [
    'nodejs_eventloop_lag_stddev_seconds',
    'The standard deviation of the event loop delays since the last scrape.',
    'average',
  ],
  p50: [
    'nodejs_eventloop_lag_p50_seconds',
    'The 50th percentile of the event loop delays since the last scrape.',
    'average',
  ],
  p90: [
    'nodejs_eventloop_lag_p90_seconds',
    'The 90th percentile of the event loop delays since the last scrape.',
    'average',
  ],
  p99: [
    'nodejs_eventloop_lag_p99_seconds',
    'The 99th percentile of the event loop delays since the last scrape.',
    'average',
  ],
} as const satisfies Record<keyof DelayFigures, readonly [string, string, 'min' | 'max' | 'average']>;

/**
 * Registers the event-loop delay gauges: how late a timer due every `periodMs` fires, over the
 * ticks since the last scrape (between scrapes closer than a tick they keep their last values).
 * Node's monitorEventLoopDelay is not used: it records the whole interval between its ticks
 * (an idle process shows the period itself), and after each reset it drops the next interval,
 * so a stall that began just after a scrape went unseen.
 */
export function registerEventLoopDelay(registry: Registry, prefix: string, periodMs: number): void {
  const histogram = createHistogram();
  let last = performance.now();
  setInterval(() => {
    const now = performance.now();
    histogram.record(Math.max(1, Math.round((now - last - periodMs) * 1e6))); // whole ns, at least 1
    last = now;
  }, periodMs).unref();
  const gauges: { figure: keyof DelayFigures; gauge: Gauge }[] = [];
  // The first gauge's collect reads the histogram for all of them, as prom-client's own does.
  const collect = () => {
    const figures = delayFigures(histogram);
    if (!figures) return;
    for (const { figure, gauge } of gauges) gauge.set(figures[figure]);
    histogram.reset();
  };
  for (const [figure, [name, help, aggregator]] of Object.entries(EVENT_LOOP_DELAY_GAUGES)) {
    const first = gauges.length === 0;
    gauges.push({
      figure: figure as keyof DelayFigures,
      gauge: new Gauge({ name: prefix + name, help, registers: [registry], aggregator, ...(first ? { collect } : {}) }),
    });
  }
}
