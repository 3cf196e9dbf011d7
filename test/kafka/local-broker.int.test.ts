import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ensureKafkaJars, removeKeptDir, startLocalBroker } from '../../src/local-kafka/local-broker.js';
import { countRecords, testKafka } from '../helpers/kafka.js';

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

  it('keeps its data in keepDir between runs: formatted once, its ports while free, one process at a time, then emptied', async () => {
    const keepDir = join(mkdtempSync(join(tmpdir(), 'msgbridge-kept-')), 'kafka');
    const progress: string[] = [];
    const first = await startLocalBroker({ heapMb: 256, keepDir, onProgress: (line) => progress.push(line) });
    expect(first.dataDir).toBe(keepDir);
    expect(progress).toContain('formatting KRaft storage');
    const producer = testKafka('kept-test', [first.bootstrap]).producer({
      allowAutoTopicCreation: true,
      // Retried after the new topic's leader election without writing the records twice.
      idempotent: true,
      maxInFlightRequests: 1,
    });
    await producer.connect();
    await producer.send({ topic: 'kept', acks: -1, messages: [{ value: 'one' }, { value: 'two' }] });
    await producer.disconnect();
    // Held: another start and an emptying are refused, naming the holder.
    await expect(startLocalBroker({ heapMb: 256, keepDir })).rejects.toMatchObject({
      code: 'LOCAL_BROKER_BUSY',
      message: expect.stringContaining(`in use by process ${process.pid}`),
    });
    expect(() => removeKeptDir(keepDir)).toThrow(/in use by process/);
    await first.stop();
    expect(alive(first.pid)).toBe(false);

    // A holder killed with -9 leaves its lock behind: the next start takes it over.
    writeFileSync(join(keepDir, 'owner.pid'), '2147483646\n');
    progress.length = 0;
    const second = await startLocalBroker({ heapMb: 256, keepDir, onProgress: (line) => progress.push(line) });
    try {
      expect(progress).not.toContain('formatting KRaft storage');
      expect(progress).toContain(`reusing the Kafka data kept in ${keepDir}`);
      expect(second.bootstrap).toBe(first.bootstrap);
      expect(readFileSync(join(keepDir, 'owner.pid'), 'utf8').trim()).toBe(String(process.pid));
      expect(await countRecords('kept', [second.bootstrap])).toBe(2);
    } finally {
      await second.stop();
    }
    expect(existsSync(join(keepDir, 'owner.pid'))).toBe(false);

    // Its last port taken by someone else: new ports, the same data.
    const squatter = createServer();
    await new Promise<void>((resolve) => squatter.listen(second.port, '127.0.0.1', resolve));
    const third = await startLocalBroker({ heapMb: 256, keepDir });
    try {
      expect(third.port).not.toBe(second.port);
      expect(await countRecords('kept', [third.bootstrap])).toBe(2);
    } finally {
      await third.stop();
      squatter.close();
    }
    removeKeptDir(keepDir);
    expect(existsSync(keepDir)).toBe(false);
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
