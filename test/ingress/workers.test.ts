import { InvalidArgumentError } from 'commander';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { main } from '../../src/cli.js';
import { parseWorkersOption } from '../../src/commands/ingress.js';
import { createIngressMetrics } from '../../src/ingress/metrics.js';
import {
  aggregateWorkerMetrics,
  aggregationOf,
  availableCores,
  cgroupCpuLimit,
  resolveIngressWorkers,
} from '../../src/ingress/workers.js';
import type { PublisherStats } from '../../src/kafka/batching-publisher.js';
import { createMetricsRegistry } from '../../src/runtime/metrics.js';

/** A file system of these files only. */
const files = (contents: Record<string, string>) => (path: string) => contents[path];

describe('ingress.workers "auto": the cores available to the process', () => {
  it('is the CPUs it may run on when no cgroup sets a quota (v2 "max", v1 -1, or no files)', () => {
    expect(availableCores({ read: files({}), parallelism: () => 8 })).toBe(8);
    expect(
      availableCores({
        read: files({ '/proc/self/cgroup': '0::/\n', '/sys/fs/cgroup/cpu.max': 'max 100000\n' }),
        parallelism: () => 8,
      }),
    ).toBe(8);
    expect(
      availableCores({
        read: files({
          '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '-1\n',
          '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000\n',
        }),
        parallelism: () => 2,
      }),
    ).toBe(2);
  });

  it('rounds a cgroup v2 quota up to whole cores and takes the smaller of quota and CPUs', () => {
    const v2 = (max: string) => files({ '/proc/self/cgroup': '0::/\n', '/sys/fs/cgroup/cpu.max': max });
    expect(availableCores({ read: v2('150000 100000'), parallelism: () => 8 })).toBe(2);
    expect(availableCores({ read: v2('400000 100000\n'), parallelism: () => 8 })).toBe(4);
    expect(availableCores({ read: v2('50000 100000'), parallelism: () => 8 })).toBe(1);
    expect(availableCores({ read: v2('800000 100000'), parallelism: () => 2 })).toBe(2);
  });

  it('reads the process own cgroup and its ancestors (v2), the smallest quota winning', () => {
    const read = files({
      '/proc/self/cgroup': '0::/kubepods.slice/pod-a/container-b\n',
      '/sys/fs/cgroup/kubepods.slice/cpu.max': '1600000 100000',
      '/sys/fs/cgroup/kubepods.slice/pod-a/cpu.max': '300000 100000',
      '/sys/fs/cgroup/kubepods.slice/pod-a/container-b/cpu.max': 'max 100000',
    });
    expect(cgroupCpuLimit(read)).toBe(3);
    expect(availableCores({ read, parallelism: () => 16 })).toBe(3);
  });

  it('falls back to cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us (either mount name)', () => {
    expect(
      availableCores({
        read: files({
          '/proc/self/cgroup': '4:cpu,cpuacct:/docker/abc\n',
          '/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us': '250000',
          '/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us': '100000',
        }),
        parallelism: () => 8,
      }),
    ).toBe(3);
    expect(
      availableCores({
        read: files({
          '/proc/self/cgroup': '1:cpu:/\n',
          '/sys/fs/cgroup/cpu/cpu.cfs_quota_us': '100000\n',
          '/sys/fs/cgroup/cpu/cpu.cfs_period_us': '100000\n',
        }),
        parallelism: () => 8,
      }),
    ).toBe(1);
  });

  it('never answers less than one core, and "auto" never more than 256 workers', () => {
    expect(availableCores({ read: files({}), parallelism: () => 0 })).toBe(1);
    expect(resolveIngressWorkers('auto', () => 4)).toBe(4);
    expect(resolveIngressWorkers('auto', () => 512)).toBe(256);
    expect(resolveIngressWorkers(3, () => 64)).toBe(3);
  });

  it('on this machine is a whole number of cores', () => {
    expect(Number.isInteger(availableCores())).toBe(true);
    expect(availableCores()).toBeGreaterThanOrEqual(1);
  });
});

describe('the workers aggregated /metrics', () => {
  const stats = (queuedEvents: number, connected: boolean): PublisherStats =>
    ({
      queuedEvents,
      inFlightEvents: 0,
      queuedBytes: queuedEvents * 100,
      inFlightBytes: 0,
      connected,
    }) as PublisherStats;

  it('sums counters, histograms and queue gauges, takes the minimum of ready and connected, keeps per-thread runtime metrics per worker', async () => {
    const worker = (id: string, requests: number, ready: boolean, connected: boolean, queued: number) => {
      const registry = createMetricsRegistry('ingress');
      const metrics = createIngressMetrics(
        registry,
        { stats: () => stats(queued, connected), ready: () => ready },
        { worker: id },
      );
      for (let i = 0; i < requests; i++) metrics.request('messages', 'published');
      metrics.publishLatency('event', 0.003);
      return registry;
    };
    const registries = [worker('1', 3, true, false, 5), worker('2', 4, false, true, 7)];
    const aggregated = aggregateWorkerMetrics(
      await Promise.all(registries.map(async (r, i) => ({ id: String(i + 1), metrics: await r.getMetricsAsJSON() }))),
    );
    const text = await aggregated.metrics();
    const value = (series: string) =>
      Number(new RegExp(`^${series.replace(/[{}]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1]);
    expect(value('msgbridge_ingress_requests_total{topic="messages",outcome="published",role="ingress"}')).toBe(7);
    expect(value('msgbridge_ingress_worker_requests_total{worker="1",role="ingress"}')).toBe(3);
    expect(value('msgbridge_ingress_worker_requests_total{worker="2",role="ingress"}')).toBe(4);
    expect(value('msgbridge_ingress_publish_latency_seconds_count{destination="event",role="ingress"}')).toBe(2);
    expect(value('msgbridge_ingress_queue_depth{state="queued",role="ingress"}')).toBe(12);
    expect(value('msgbridge_ingress_ready{role="ingress"}')).toBe(0);
    expect(value('msgbridge_ingress_kafka_connected{role="ingress"}')).toBe(0);
    // Per thread: one series per worker. Process-wide: one series.
    expect(text).toMatch(/^msgbridge_nodejs_heap_size_used_bytes\{role="ingress",worker="1"\} \d+/m);
    expect(text).toMatch(/^msgbridge_nodejs_heap_size_used_bytes\{role="ingress",worker="2"\} \d+/m);
    expect(text.match(/^msgbridge_process_resident_memory_bytes\{/gm)).toHaveLength(1);
    expect(text.match(/^msgbridge_nodejs_version_info\{/gm)).toHaveLength(1);
  });

  it('names a rule for every kind of metric', () => {
    expect(aggregationOf('msgbridge_ingress_ready').aggregator).toBe('min');
    expect(aggregationOf('msgbridge_ingress_kafka_connected').aggregator).toBe('min');
    expect(aggregationOf('msgbridge_process_cpu_seconds_total').aggregator).toBe('max');
    expect(aggregationOf('msgbridge_config_reloads_total').aggregator).toBe('max');
    expect(aggregationOf('msgbridge_nodejs_eventloop_lag_p99_seconds')).toEqual({ aggregator: 'sum', perWorker: true });
    expect(aggregationOf('msgbridge_ingress_requests_total')).toEqual({ aggregator: 'sum', perWorker: false });
  });
});

describe('--workers and MSGBRIDGE_INGRESS_WORKERS', () => {
  afterEach(() => vi.restoreAllMocks());

  it('takes an integer from 1 to 256 or "auto"', () => {
    expect(parseWorkersOption('1')).toBe(1);
    expect(parseWorkersOption(' 4 ')).toBe(4);
    expect(parseWorkersOption('256')).toBe(256);
    expect(parseWorkersOption('auto')).toBe('auto');
  });

  it.each(['0', '257', '-1', '1.5', 'two', '', 'AUTO'])(
    'refuses %j with a message naming the option and the values it takes',
    (value) => {
      expect(() => parseWorkersOption(value)).toThrow(InvalidArgumentError);
      expect(() => parseWorkersOption(value)).toThrow(
        `--workers expects an integer from 1 to 256 or "auto", got "${value}"`,
      );
    },
  );

  it('msgbridge ingress --workers 0 exits 2 with that message, before touching Kafka', async () => {
    const stderr: string[] = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      stderr.push(String(chunk));
      return true;
    });
    vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    expect(await main(['node', 'msgbridge', 'ingress', '--workers', '0'])).toBe(2);
    expect(stderr.join('')).toContain('--workers expects an integer from 1 to 256 or "auto", got "0"');
  });
});
