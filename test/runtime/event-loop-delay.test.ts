import { describe, expect, it } from 'vitest';
import { delayFigures, EVENT_LOOP_DELAY_GAUGES, type DelayHistogram } from '../../src/runtime/event-loop-delay.js';
import { createMetricsRegistry } from '../../src/runtime/metrics.js';

const MS = 1e6;
const histogram = (ticksMs: number[]): DelayHistogram => {
  const sorted = [...ticksMs].sort((a, b) => a - b);
  const mean = sorted.reduce((a, b) => a + b, 0) / sorted.length;
  return {
    count: sorted.length,
    min: sorted[0]! * MS,
    max: sorted.at(-1)! * MS,
    mean: mean * MS,
    stddev: Math.sqrt(sorted.reduce((a, b) => a + (b - mean) ** 2, 0) / sorted.length) * MS,
    percentile: (p) => sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]! * MS,
  };
};

async function delays(registry: ReturnType<typeof createMetricsRegistry>): Promise<Record<string, number[]>> {
  const out: Record<string, number[]> = {};
  for (const metric of await registry.getMetricsAsJSON()) {
    if (metric.name.startsWith('msgbridge_nodejs_eventloop_lag')) out[metric.name] = metric.values.map((v) => v.value);
  }
  return out;
}

describe('event loop delay', () => {
  it('gives the figures of a histogram in seconds', () => {
    const figures = delayFigures(histogram([0.2, 0.4, 0.1, 250, 0.001]))!;
    expect(figures.min).toBeCloseTo(0.000001, 9);
    expect(figures.max).toBeCloseTo(0.25, 9);
    expect(figures.p50).toBeCloseTo(0.0002, 9);
    expect(figures.p99).toBeCloseTo(0.25, 9);
    expect(figures.mean).toBeCloseTo((0.2 + 0.4 + 0.1 + 250 + 0.001) / 5 / 1000, 9);
    expect(figures.stddev).toBeGreaterThan(0.09);
  });

  it('has no figures when no tick was recorded since the last reading', () => {
    expect(
      delayFigures({ count: 0, min: 9223372036854776000, max: 0, mean: NaN, stddev: NaN, percentile: () => 0 }),
    ).toBeUndefined();
  });

  it('reads near zero for an idle process, and a stall that began just after a scrape, once per name', async () => {
    const registry = createMetricsRegistry('test');
    await new Promise((r) => setTimeout(r, 650));
    const idle = await delays(registry);
    // prom-client's setImmediate gauge stays; the seven others are this module's.
    expect(Object.keys(idle).sort()).toEqual(
      [
        'msgbridge_nodejs_eventloop_lag_seconds',
        ...Object.values(EVENT_LOOP_DELAY_GAUGES).map(([name]) => `msgbridge_${name}`),
      ].sort(),
    );
    for (const values of Object.values(idle)) expect(values).toHaveLength(1);
    // prom-client's gauges read their timer's 100 ms period here.
    expect(idle.msgbridge_nodejs_eventloop_lag_p50_seconds![0]).toBeLessThan(0.06);
    expect(idle.msgbridge_nodejs_eventloop_lag_min_seconds![0]).toBeLessThan(0.06);

    const until = performance.now() + 300;
    while (performance.now() < until) {
      // a stall of 300 ms right after the scrape: the tick due within it comes 200–300 ms late
      // (Node's monitorEventLoopDelay drops the first interval after a reset, and with it this)
    }
    await new Promise((r) => setTimeout(r, 250));
    const stalled = await delays(registry);
    expect(stalled.msgbridge_nodejs_eventloop_lag_max_seconds![0]).toBeGreaterThan(0.15);
    expect(stalled.msgbridge_nodejs_eventloop_lag_max_seconds![0]).toBeLessThan(3);
  });
});
