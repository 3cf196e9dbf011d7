import { spawn } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { runCli } from '../helpers/cli.js';
import { uniqueTopic } from '../helpers/kafka.js';

/**
 * Ctrl-C on `npm start`: a terminal sends SIGINT to the whole foreground process group, the
 * embedded broker included. The roles must drain on a broker that is still there: no error
 * line, no stack trace, exit 0. (Its own broker: KAFKA_BROKERS unset.)
 */
describe('msgbridge dev interrupted like Ctrl-C', () => {
  it('after a send went through every role, stops them before its embedded broker: exit 0, no line at error level, no stack', async () => {
    const suffix = uniqueTopic('devint');
    const root = join(import.meta.dirname, '..', '..');
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', 'dev', '--summary-interval', '0'], {
      cwd: root,
      // A process group of its own, as a shell gives a foreground job.
      detached: true,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: process.env.HOME ?? '/tmp',
        MSGBRIDGE_LOG_LEVEL: 'warn',
        MSGBRIDGE_INGRESS_PORT: '0',
        MSGBRIDGE_INGRESS_ADMIN_PORT: '0',
        MSGBRIDGE_SIMULATOR_PORT: '0',
        MSGBRIDGE_TRACKER_PORT: '0',
        MSGBRIDGE_TRACKER_ADMIN_PORT: '0',
        MSGBRIDGE_SENDER_ADMIN_PORT: '0',
        MSGBRIDGE__sender__groupId: `${suffix}-sender`,
        MSGBRIDGE__tracker__groupId: `${suffix}-tracker`,
        MSGBRIDGE__tracker__transactionalIdPrefix: `${suffix}-tracker`,
        MSGBRIDGE_TRACKER_STATE_DIR: mkdtempSync(join(tmpdir(), 'msgbridge-devint-')),
        MSGBRIDGE_SENDER_STATE_DIR: mkdtempSync(join(tmpdir(), 'msgbridge-devint-sender-')),
        // Not the developer's kept Kafka (~/.cache/msgbridge/dev-state/kafka).
        MSGBRIDGE__localKafka__devDataDir: JSON.stringify(mkdtempSync(join(tmpdir(), 'msgbridge-devint-kafka-'))),
      },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    const deadline = Date.now() + 120_000;
    while (!/tracker\s+\S+ \+ \S+ →/.test(stdout) && child.exitCode === null && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 200));
    expect(stdout).toMatch(/ingress\s+http:/);
    // Traffic through every role first, as a user tries it: the customer writes, a send follows to read.
    const brokers = /Kafka\s+(\S+)/.exec(stdout)![1]!;
    const simulator = /simulator\s+(http:\/\/\S+)/.exec(stdout)![1]!;
    const business = /businesses\s+([^,\s]+)/.exec(stdout)![1]!;
    const inbound = await runCli([
      'simulator',
      'inbound',
      '--business',
      business,
      '--from',
      '+15550002222',
      '--text',
      'Hi!',
      '--url',
      simulator,
    ]);
    expect(inbound.code, inbound.stdout + inbound.stderr).toBe(0);
    const sent = await runCli(
      ['send', 'text', '--business', business, '--to', '+15550002222', '--text', 'Hello', '--timeout', '60'],
      { KAFKA_BROKERS: brokers },
      90_000,
    );
    expect(sent.code, sent.stdout + sent.stderr).toBe(0);
    process.kill(-child.pid!, 'SIGINT');
    const timer = setTimeout(() => process.kill(-child.pid!, 'SIGKILL'), 90_000);
    const code = await exited;
    clearTimeout(timer);
    const errors = stderr.split('\n').filter((l) => /"level":(50|60)/.test(l) || /^\s+at /.test(l));
    // The warnings too, on a failure: what led to an error line (a crash's cause is a warning).
    const context = stderr.split('\n').filter((l) => /"level":40/.test(l));
    expect(errors, [...context, ...errors].join('\n')).toEqual([]);
    expect(code).toBe(0);
    expect(stdout).toMatch(/stopped\.\n$/);
  }, 360_000);
});
