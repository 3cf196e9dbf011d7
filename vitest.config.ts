import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    // Before any test file loads kafkajs: its producers' send fixed (src/kafka/kafkajs-send-fix.ts).
    setupFiles: ['src/kafka/kafkajs-send-fix.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    maxWorkers: 2,
    // globalThis.gc for the tests that measure what a structure keeps alive (test/sender/result-records.test.ts).
    execArgv: ['--expose-gc'],
    reporters: ['default'],
  },
});
