import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ensureKafkaJars, startLocalBroker } from '../../src/local-kafka/local-broker.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function waitFor(predicate: () => boolean, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (predicate()) return true;
    await new Promise((r) => setTimeout(r, 100));
  }
  return predicate();
}

describe('embedded local broker', () => {
  it('fails with a message naming Maven when Maven is missing and the jars are not cached', () => {
    const path = process.env.PATH;
    process.env.PATH = '/nonexistent';
    try {
      expect(() => ensureKafkaJars({ cacheDir: '/tmp/msgbridge-empty-cache-for-test' })).toThrowError(/install Maven/);
    } finally {
      process.env.PATH = path;
    }
  });

  it('starts on a free loopback port, and stops without leaving its JVM or data behind', async () => {
    const broker = await startLocalBroker({ heapMb: 256 });
    expect(broker.bootstrap).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(alive(broker.pid)).toBe(true);
    await broker.stop();
    expect(alive(broker.pid)).toBe(false);
    expect(existsSync(broker.dataDir)).toBe(false);
  });

  it.runIf(process.platform === 'linux')('does not leave an orphan JVM when its parent process is killed', async () => {
    const script = fileURLToPath(new URL('../helpers/broker-child.ts', import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    const line = await new Promise<string>((resolve, reject) => {
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        if (out.includes('\n')) resolve(out.trim());
      });
      child.once('exit', (code) => reject(new Error(`broker child exited early with ${code}`)));
    });
    const { pid } = JSON.parse(line) as { pid: number };
    expect(alive(pid)).toBe(true);
    child.kill('SIGKILL');
    expect(await waitFor(() => !alive(pid), 20_000)).toBe(true);
  });
});
