import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    maxWorkers: 2,
    // globalThis.gc for the tests that measure what a structure keeps alive (test/sender/result-records.test.ts).
    execArgv: ['--expose-gc'],
    reporters: ['default'],
  },
});
