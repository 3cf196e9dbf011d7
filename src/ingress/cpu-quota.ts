import { readFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';

/**
 * `ingress.workers: auto`: how many cores this process may use (README.md, "Worker threads").
 * Apart from the rest of workers.ts because it is pure arithmetic over a few files, tested
 * with a fake file system, and knows nothing of threads.
 */

/** Reads a file's text, or undefined when it cannot be read. */
export type ReadText = (path: string) => string | undefined;

const readText: ReadText = (path) => {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
};

/**
 * The CPU quota of this process's cgroup, in whole cores (rounded up), or undefined without
 * one: cgroup v2 `cpu.max` ("max 100000" = none, "150000 100000" = 1.5 → 2), else cgroup v1
 * `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1 = none). Every level from the process's own
 * cgroup (/proc/self/cgroup) up to the mount's root is read, and the smallest quota wins.
 */
export function cgroupCpuLimit(read: ReadText = readText): number | undefined {
  const memberships = (read('/proc/self/cgroup') ?? '').split('\n').map((line) => line.split(':'));
  const ancestry = (mount: string, path: string | undefined) => {
    const dirs = [mount];
    const parts = (path ?? '/').split('/').filter(Boolean);
    for (let i = 1; i <= parts.length; i++) dirs.push(`${mount}/${parts.slice(0, i).join('/')}`);
    return dirs;
  };
  const limits: number[] = [];
  const v2Path = memberships.find((m) => m[0] === '0' && m[1] === '')?.[2];
  for (const dir of ancestry('/sys/fs/cgroup', v2Path)) {
    const [quota, period] = (read(`${dir}/cpu.max`) ?? '').trim().split(/\s+/);
    if (quota === undefined || quota === '' || quota === 'max') continue;
    const cores = Number(quota) / Number(period ?? 100_000);
    if (Number.isFinite(cores) && cores > 0) limits.push(Math.ceil(cores));
  }
  if (limits.length === 0) {
    const v1Path = memberships.find((m) => m[1]?.split(',').includes('cpu'))?.[2];
    for (const mount of ['/sys/fs/cgroup/cpu', '/sys/fs/cgroup/cpu,cpuacct']) {
      for (const dir of ancestry(mount, v1Path)) {
        const quota = Number(read(`${dir}/cpu.cfs_quota_us`)?.trim());
        const period = Number(read(`${dir}/cpu.cfs_period_us`)?.trim());
        if (quota > 0 && period > 0) limits.push(Math.ceil(quota / period));
      }
    }
  }
  return limits.length === 0 ? undefined : Math.min(...limits);
}

/** The cores this process may use: the CPUs it may run on (affinity), bounded by its cgroup's CPU quota. */
export function availableCores(deps: { read?: ReadText; parallelism?: () => number } = {}): number {
  const cpus = (deps.parallelism ?? availableParallelism)();
  const quota = cgroupCpuLimit(deps.read ?? readText);
  return Math.max(1, quota === undefined ? cpus : Math.min(cpus, quota));
}

/** `ingress.workers` as a number of threads ("auto": availableCores(), at most 256). */
export function resolveIngressWorkers(setting: number | 'auto', cores: () => number = availableCores): number {
  return setting === 'auto' ? Math.min(256, Math.max(1, cores())) : setting;
}
