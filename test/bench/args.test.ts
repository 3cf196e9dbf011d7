import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { choice, decimal, headerComment, usage, wholeNumber } from '../../bench/args.js';

const run = promisify(execFile);
const ROOT = join(import.meta.dirname, '..', '..');

/**
 * Each bench with one of its numeric options: `--help`, an unknown option and a bad value are answered before any work
 * starts.
 */
const BENCHES: [file: string, numericOption: string][] = [
  ['bounded-maps', 'inserts'],
  ['fuzz', 'requests'],
  ['hung-broker', 'rounds'],
  ['ingress', 'connections'],
  ['kstreams', 'messages'],
  ['provider-client', 'calls'],
  ['sender-idle', 'starts'],
  ['sender-ledger', 'entries'],
  ['sender-throughput', 'in-flight'],
  ['sender', 'recipients'],
  ['simulator', 'rounds'],
  ['tracker-conversation', 'history'],
  ['tracker-volume', 'history'],
  ['tracker', 'batch'],
  ['window-lookup', 'entries'],
];

async function bench(file: string, args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  try {
    const { stdout, stderr } = await run(process.execPath, ['--import', 'tsx', `bench/${file}.ts`, ...args], {
      cwd: ROOT,
      timeout: 60_000,
    });
    return { code: 0, stdout, stderr };
  } catch (error) {
    // A spawn that failed outright has no output: its message stands in for stderr.
    const e = error as { code?: number; stdout?: string; stderr?: string; message: string };
    return { code: e.code ?? -1, stdout: e.stdout ?? '', stderr: e.stderr ?? e.message };
  }
}

describe('bench options (bench/args.ts)', () => {
  it('reads whole numbers from digits only, at or above the minimum', () => {
    expect(wholeNumber('rounds', '3', 1)).toBe(3);
    expect(wholeNumber('warmup', '0', 0)).toBe(0);
    for (const text of ['', ' ', 'abc', '1.5', '-1', '1e3', '0x10', '12abc', '99999999999999999999'])
      expect(wholeNumber('rounds', text, 0)).toBe(`--rounds must be a whole number of at least 0, not "${text}"`);
    expect(wholeNumber('rounds', '0', 1)).toBe('--rounds must be a whole number of at least 1, not "0"');
  });

  it('reads a word from the ones allowed, and names them when it is another', () => {
    expect(choice('ids', 'random', ['random', 'ordered'])).toBe('random');
    expect(choice('ids', 'ordered', ['random', 'ordered'])).toBe('ordered');
    for (const text of ['', 'Random', 'uuid', 'random '])
      expect(choice('ids', text, ['random', 'ordered'])).toEqual({
        error: `--ids takes random or ordered, not "${text}"`,
      });
  });

  it('reads decimals above the floor', () => {
    expect(decimal('rate', '200', 0)).toBe(200);
    expect(decimal('rate', '0.5', 0)).toBe(0.5);
    for (const text of ['0', '', 'abc', '-2', '1e3', '.5', 'Infinity'])
      expect(decimal('rate', text, 0)).toBe(`--rate must be a number above 0, not "${text}"`);
  });

  it('takes a file\u2019s leading comment lines as its usage', () => {
    expect(headerComment('// one\n//   two\n//\nimport x;\n// not this\n')).toBe('one\n  two\n\n');
    expect(headerComment('import x;\n')).toBe('\n');
  });

  it('lists every option with its default after the usage', () => {
    const text = usage('// run me\nimport x;\n', {
      rounds: { type: 'string', default: '3' },
      rate: { type: 'string' },
      quick: { type: 'boolean', default: false },
    });
    expect(text).toBe(
      [
        'run me',
        '',
        'options:',
        `  ${'--rounds <value>'.padEnd(28)} default 3`,
        '  --rate <value>',
        `  ${'--quick'.padEnd(28)} default false`,
        '',
      ].join('\n'),
    );
  });

  // Spawned benches: a few at a time, each a Node process with the tsx loader.
  // Each bench's --help output (the option list only benchArgs prints) shows that it reads its
  // options through benchArgs before anything else, so the shared answer to an unknown option is
  // checked on one bench; a bad value is checked on each, as each picks its own reader.
  it(
    'answers --help and a bad value of every bench, and an unknown option, before starting anything',
    { timeout: 180_000 },
    async () => {
      const failures: string[] = [];
      const [unknownIn] = BENCHES[0]!;
      const unknown = await bench(unknownIn, ['--no-such-option']);
      if (
        unknown.code !== 2 ||
        unknown.stderr !== `bench/${unknownIn}.ts: Unknown option '--no-such-option' (--help lists the options)\n`
      )
        failures.push(
          `${unknownIn} --no-such-option: exit ${unknown.code}, ${JSON.stringify(unknown.stderr.slice(0, 200))}`,
        );
      const queue = [...BENCHES];
      const worker = async () => {
        for (let next = queue.shift(); next; next = queue.shift()) {
          const [file, option] = next;
          const help = await bench(file, ['--help']);
          const header = headerComment(readFileSync(join(ROOT, 'bench', `${file}.ts`), 'utf8'));
          if (
            help.code !== 0 ||
            header.trim() === '' ||
            !help.stdout.startsWith(`${header}\noptions:\n`) ||
            !help.stdout.includes(`  --${option} <value>`)
          )
            failures.push(`${file} --help: exit ${help.code}, ${JSON.stringify(help.stdout.slice(0, 80))}`);
          const bad = await bench(file, [`--${option}`, 'x']);
          if (
            bad.code !== 2 ||
            !bad.stderr.startsWith(`bench/${file}.ts: --${option} must be a whole number`) ||
            bad.stderr.split('\n').length !== 2
          )
            failures.push(`${file} --${option} x: exit ${bad.code}, ${JSON.stringify(bad.stderr.slice(0, 200))}`);
        }
      };
      await Promise.all([worker(), worker(), worker()]);
      expect(failures).toEqual([]);
    },
  );
});
