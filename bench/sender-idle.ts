// What an idle `msgbridge sender` holds: the bench's CLI bundle (as `node dist/cli.js` runs) is
// started STARTS times against the embedded broker, with no request to send; each start prints
// the time to ready; over the second half of IDLE_MS, its CPU per second (ms of CPU a second)
// and its wake-ups a second (the main thread's and all threads', voluntary context switches),
// both from /proc; VmRSS and VmHWM from /proc after IDLE_MS of idling; and V8's heap spaces from
// the sender's own /metrics.
//   npx tsx bench/sender-idle.ts [--starts 3] [--idle-ms 10000]
// KAFKA_BROKERS=host:port uses an existing Kafka; otherwise the embedded local broker starts.
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mkdtempSync } from 'node:fs';
import { bundleCli, senderReady, spawnSenderBundle } from './cli-bundle.js';
import { startLocalBroker, type LocalBroker } from '../src/local-kafka/local-broker.js';
import { benchArgs } from './args.js';
import { cpuSeconds, peakRssMb, rssMb, sleepsSoFar } from './peers.js';

const args = benchArgs(import.meta.url, {
  starts: { type: 'string', default: '3' },
  'idle-ms': { type: 'string', default: '10000' },
});
const STARTS = args.wholeNumber('starts', 1);
const IDLE_MS = args.wholeNumber('idle-ms');

const memory = (pid: number) => ({ rssMiB: Math.round(rssMb(pid)), peakMiB: Math.round(peakRssMb(pid)) });

async function heapSpaces(health: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${health}/metrics`)).text();
  const spaces: Record<string, number> = {};
  for (const m of text.matchAll(
    /^msgbridge_nodejs_heap_space_size_total_bytes\{space="([a-z_]+)"[^}]*\} ([0-9.e+]+)$/gm,
  ))
    if (Number(m[2]) > 0) spaces[m[1]!] = Math.round(Number(m[2]) / 1048576);
  const external = /^msgbridge_nodejs_external_memory_bytes(?:\{[^}]*\})? ([0-9.e+]+)$/m.exec(text);
  if (external) spaces.external = Math.round(Number(external[1]) / 1048576);
  return spaces;
}

async function main() {
  await bundleCli();
  let local: LocalBroker | undefined;
  let brokers = process.env.KAFKA_BROKERS ?? '';
  if (brokers === '') {
    local = await startLocalBroker({ heapMb: 512 });
    brokers = local.bootstrap;
  }
  try {
    for (let i = 1; i <= STARTS; i++) {
      const started = performance.now();
      const child = spawnSenderBundle(
        {
          KAFKA_BROKERS: brokers,
          MSGBRIDGE_BUSINESS_ID: 'biz_idle',
          MSGBRIDGE_API_KEY: 'idle-api-key',
          MSGBRIDGE_PROVIDER_URL: 'http://127.0.0.1:9',
          MSGBRIDGE_LOG_LEVEL: 'warn',
          MSGBRIDGE__sender__groupId: `idle-${Date.now()}-${i}`,
          MSGBRIDGE_SENDER_ADMIN_PORT: '0',
          MSGBRIDGE_SENDER_STATE_DIR: mkdtempSync(join(tmpdir(), 'bench-sender-idle-')),
        },
        ['ignore', 'pipe', 'inherit'],
      );
      const health = await senderReady(child);
      const readyMs = Math.round(performance.now() - started);
      // CPU while idle, over the second half of the idle time (start-up's compiling and GC settled).
      await new Promise((r) => setTimeout(r, IDLE_MS / 2));
      const cpuFrom = cpuSeconds(child.pid!);
      const sleepsFrom = sleepsSoFar(child.pid!);
      await new Promise((r) => setTimeout(r, IDLE_MS / 2));
      const seconds = IDLE_MS / 2 / 1000;
      const idleCpuMsPerSecond = Math.round(((cpuSeconds(child.pid!) - cpuFrom) / seconds) * 10000) / 10;
      const sleeps = sleepsSoFar(child.pid!);
      const wakeUpsPerSecond = {
        main: Math.round((sleeps.main - sleepsFrom.main) / seconds),
        allThreads: Math.round((sleeps.all - sleepsFrom.all) / seconds),
      };
      console.log(
        JSON.stringify({
          start: i,
          readyMs,
          idleCpuMsPerSecond,
          wakeUpsPerSecond,
          ...memory(child.pid!),
          heapSpacesMiB: await heapSpaces(health),
        }),
      );
      child.kill('SIGTERM');
      await new Promise((r) => child.once('exit', r));
    }
  } finally {
    await local?.stop();
  }
}

await main();
