import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/platform/logger.js';
import { createShutdown } from '../../src/runtime/shutdown.js';

describe('shutdown (drain once, bounded by the grace)', () => {
  it('is complete when the drain resolves, true or nothing', async () => {
    expect(await createShutdown({ logger: silentLogger, graceMs: 1000, drain: async () => true }).stop('test')).toBe(
      true,
    );
    expect(
      await createShutdown({ logger: silentLogger, graceMs: 1000, drain: async () => undefined }).stop('test'),
    ).toBe(true);
  });

  it('is incomplete when a role says its drain left work unfinished, when the drain fails, or past the grace', async () => {
    expect(await createShutdown({ logger: silentLogger, graceMs: 1000, drain: async () => false }).stop('test')).toBe(
      false,
    );
    expect(
      await createShutdown({
        logger: silentLogger,
        graceMs: 1000,
        drain: () => Promise.reject(new Error('boom')),
      }).stop('test'),
    ).toBe(false);
    expect(
      await createShutdown({ logger: silentLogger, graceMs: 20, drain: () => new Promise(() => {}) }).stop('test'),
    ).toBe(false);
  });

  it('drains once: a second stop gets the answer of the first', async () => {
    let drains = 0;
    const shutdown = createShutdown({ logger: silentLogger, graceMs: 1000, drain: async () => void (drains += 1) });
    const [a, b] = await Promise.all([shutdown.stop('one'), shutdown.stop('two')]);
    expect([a, b, drains]).toEqual([true, true, 1]);
  });
});
