// Command-line options of the benches, read the way the CLI reads its own: `--help` prints the
// bench's header comment and its options with their defaults, and an unknown option or a bad
// value is one line on stderr and exit code 2, not a stack trace or a run on NaN.
import { readFileSync } from 'node:fs';
import { basename } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, type ParseArgsConfig } from 'node:util';

type Options = NonNullable<ParseArgsConfig['options']>;
type Values<O extends Options> = ReturnType<typeof parseArgs<{ options: O; strict: true }>>['values'];

/** The comment lines a source file starts with, without their `//`: a bench's usage. */
export function headerComment(source: string): string {
  const lines: string[] = [];
  for (const line of source.split('\n')) {
    if (!line.startsWith('//')) break;
    lines.push(line.replace(/^\/\/ ?/, ''));
  }
  return lines.join('\n') + '\n';
}

/** What `--help` prints: the bench's header comment, then every option it reads with its default. */
export function usage(source: string, options: Options): string {
  const lines = Object.entries(options).map(([name, option]) => {
    const form = option.type === 'boolean' ? `--${name}` : `--${name} <value>`;
    return `  ${form.padEnd(28)} ${option.default === undefined ? '' : `default ${String(option.default)}`}`.trimEnd();
  });
  return `${headerComment(source)}\noptions:\n${lines.join('\n')}\n`;
}

/**
 * A whole number at least `min` from an option's text, or why not. Only digits count: `Number`
 * alone takes "", "0x10" and "1e3", which no one means as a count.
 */
export function wholeNumber(option: string, text: string, min: number): number | string {
  const value = /^\d+$/.test(text) ? Number(text) : NaN;
  return Number.isSafeInteger(value) && value >= min
    ? value
    : `--${option} must be a whole number of at least ${min}, not "${text}"`;
}

/** A decimal number above `above` (a rate, a share), or why not. */
export function decimal(option: string, text: string, above: number): number | string {
  const value = /^\d+(\.\d+)?$/.test(text) ? Number(text) : NaN;
  return Number.isFinite(value) && value > above ? value : `--${option} must be a number above ${above}, not "${text}"`;
}

/** One of the words `allowed`, or why not. */
export function choice<T extends string>(option: string, text: string, allowed: readonly T[]): T | { error: string } {
  return (allowed as readonly string[]).includes(text)
    ? (text as T)
    : { error: `--${option} takes ${allowed.join(' or ')}, not "${text}"` };
}

/** Exits with one line naming the bad argument (exit code 2). */
function fail(bench: string, message: string): never {
  process.stderr.write(`${bench}: ${message} (--help lists the options)\n`);
  process.exit(2);
}

/**
 * Parses `process.argv` for the bench at `entry` (its `import.meta.url`). The helpers read an
 * option as a whole number, a comma-separated list of them, or a decimal, and exit with one line
 * on a bad value; options without a default may be absent (`undefined`).
 */
export function benchArgs<const O extends Options>(entry: string, options: O) {
  const file = fileURLToPath(entry);
  const bench = `bench/${basename(file)}`;
  let parsed: Values<O> & { help?: boolean };
  try {
    parsed = parseArgs({ options: { ...options, help: { type: 'boolean' } }, strict: true }).values as Values<O> & {
      help?: boolean;
    };
  } catch (error) {
    fail(bench, (error as Error).message);
  }
  if (parsed.help) {
    process.stdout.write(usage(readFileSync(file, 'utf8'), options));
    process.exit(0);
  }
  const values = parsed as Values<O>;
  const text = (option: keyof O & string): string => String((values as Record<string, unknown>)[option] ?? '');
  const checked = (result: number | string): number => (typeof result === 'string' ? fail(bench, result) : result);
  return {
    values,
    /** A whole number of at least `min` (default 0). */
    wholeNumber: (option: keyof O & string, min = 0): number => checked(wholeNumber(option, text(option), min)),
    /** Comma-separated whole numbers, each at least `min` (default 1). */
    wholeNumbers: (option: keyof O & string, min = 1): number[] =>
      text(option)
        .split(',')
        .map((part) => checked(wholeNumber(option, part.trim(), min))),
    /** A decimal number above `above` (default 0). */
    decimal: (option: keyof O & string, above = 0): number => checked(decimal(option, text(option), above)),
    /** One of the words `allowed`. */
    oneOf: <T extends string>(option: keyof O & string, allowed: readonly T[]): T => {
      const result = choice(option, text(option), allowed);
      return typeof result === 'string' ? result : fail(bench, result.error);
    },
    /** Exits with one line, for a value the bench itself finds wrong. */
    fail: (message: string): never => fail(bench, message),
  };
}
