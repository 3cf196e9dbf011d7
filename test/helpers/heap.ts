/** The heap in use after full collections (the test workers run with --expose-gc: vitest.config.ts). */
export function heapAfterGc(): number {
  const gc = (globalThis as { gc?: () => void }).gc;
  if (!gc) throw new Error('run with --expose-gc (vitest.config.ts passes it to the test workers)');
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}
