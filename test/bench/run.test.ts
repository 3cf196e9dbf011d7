import { execFile } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { headerComment } from '../../bench/args.js';
import { BENCHES } from '../../bench/run.js';

const exec = promisify(execFile);
const ROOT = join(import.meta.dirname, '..', '..');

async function run(command: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await exec(command, args, { cwd: ROOT, timeout: 60_000 });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const e = error as { code?: number; stdout?: string; stderr?: string; message: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? e.message };
  }
}

const runner = (args: string[]) => run(process.execPath, ['--import', 'tsx', 'bench/run.ts', ...args]);

describe('npm run bench (bench/run.ts)', () => {
  it('knows every bench: each file of bench/ that reads its options with benchArgs, and no other', () => {
    const entries = readdirSync(join(ROOT, 'bench'))
      .filter(
        (f) => f.endsWith('.ts') && /\bbenchArgs\(import\.meta\.url/.test(readFileSync(join(ROOT, 'bench', f), 'utf8')),
      )
      .map((f) => f.slice(0, -3));
    expect(Object.keys(BENCHES).sort()).toEqual(entries.sort());
  });

  it('lists the benches with one line each, through npm', { timeout: 60_000 }, async () => {
    const { code, stdout } = await run('npm', ['run', '--silent', 'bench', '--', '--help']);
    expect(code).toBe(0);
    const lines = stdout.split('\n').filter((l) => l.startsWith('  '));
    expect(lines.map((l) => l.trim().split(/\s+/)[0])).toEqual(Object.keys(BENCHES));
    const width = Math.max(...Object.keys(BENCHES).map((n) => n.length));
    for (const [name, bench] of Object.entries(BENCHES))
      expect(lines).toContain(`  ${name.padEnd(width)}  ${bench.description}`);
  });

  it('runs a bench by name with the arguments after it, and passes its exit code on', { timeout: 60_000 }, async () => {
    const help = await runner(['ingress', '--help', '--rounds', '1']);
    expect(help.code).toBe(0);
    expect(
      help.stdout.startsWith(`${headerComment(readFileSync(join(ROOT, 'bench', 'ingress.ts'), 'utf8'))}\noptions:\n`),
    ).toBe(true);
    expect(help.stdout).toContain('  --generator <value>');
    const bad = await runner(['ingress', '--rounds', '0']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toBe(
      'bench/ingress.ts: --rounds must be a whole number of at least 1, not "0" (--help lists the options)\n',
    );
  });

  it('answers an unknown name with one line and exit code 2', async () => {
    const { code, stdout, stderr } = await runner(['no-such-bench', '--rounds', '1']);
    expect({ code, stdout, stderr }).toEqual({
      code: 2,
      stdout: '',
      stderr: 'bench/run.ts: no bench named "no-such-bench" (npm run bench -- --help lists them)\n',
    });
    expect((await runner(['toString'])).code).toBe(2);
  });
});
