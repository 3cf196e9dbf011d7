import { InvalidArgumentError } from 'commander';

/** A commander argument parser for an integer within bounds, with a message naming the option. */
export function parseIntegerOption(name: string, min: number, max: number) {
  return (value: string): number => {
    const n = Number(value);
    if (!/^-?\d+$/.test(value.trim()) || !Number.isSafeInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`${name} expects an integer from ${min} to ${max}, got "${value}"`);
    }
    return n;
  };
}
