import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { join } from 'node:path';
import { assertUniqueLogKeys } from './log-lines.js';

const root = join(import.meta.dirname, '..', '..');

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

function spawnCli(args: string[], env: Record<string, string>): ChildProcessWithoutNullStreams {
  return spawn(process.execPath, ['--import', 'tsx', 'src/cli.ts', ...args], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '/tmp', MSGBRIDGE_LOG_LEVEL: 'warn', ...env },
  });
}

/**
 * Runs `msgbridge <args>` as a real process to completion (killed after timeoutMs). Every log
 * line it printed must carry each key once (rejects otherwise), as every process of the suite.
 */
export function runCli(args: string[], env: Record<string, string> = {}, timeoutMs = 60_000): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawnCli(args, env);
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      try {
        assertUniqueLogKeys(stdout);
        assertUniqueLogKeys(stderr);
      } catch (error) {
        reject(error as Error);
        return;
      }
      resolve({ code, stdout, stderr });
    });
  });
}

/**
 * A long-running `msgbridge <args>` (dev, a role): wait for output, then stop it with a signal (its log lines checked
 * as runCli's).
 */
export function startCli(args: string[], env: Record<string, string> = {}) {
  const child = spawnCli(args, env);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
  return {
    child,
    output: () => ({ stdout, stderr }),
    async waitFor(pattern: RegExp, timeoutMs = 90_000): Promise<RegExpMatchArray> {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const match = pattern.exec(stdout);
        if (match) return match;
        if (child.exitCode !== null)
          throw new Error(`process exited (${child.exitCode}) before ${pattern}:\n${stdout}\n${stderr}`);
        if (Date.now() > deadline) throw new Error(`no ${pattern} within ${timeoutMs} ms:\n${stdout}\n${stderr}`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    async stop(signal: NodeJS.Signals = 'SIGINT', timeoutMs = 60_000): Promise<number | null> {
      if (child.exitCode === null) child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
      const code = await exited;
      clearTimeout(timer);
      assertUniqueLogKeys(stdout);
      assertUniqueLogKeys(stderr);
      return code;
    },
  };
}
