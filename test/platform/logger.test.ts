import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, roleLoggers } from '../../src/platform/logger.js';

/** Log lines are JSON objects whose keys are unique: log pipelines keep one of two, or reject the line. */
function capture(): { stream: Writable; lines: () => string[] } {
  let text = '';
  const stream = new Writable({
    write(chunk, _enc, done) {
      text += chunk.toString();
      done();
    },
  });
  return { stream, lines: () => text.trim().split('\n').filter(Boolean) };
}

/** The top-level keys of a JSON object line, repeats included (JSON.parse would hide them). */
function topLevelKeys(line: string): string[] {
  return [...line.matchAll(/[{,]"([^"]+)":/g)].map((m) => m[1]!);
}

describe('logger', () => {
  it('several roles in one process: each line has one role key, its own', () => {
    const { stream, lines } = capture();
    const loggers = roleLoggers(['dev', 'tracker', 'sender'], { level: 'info', destination: stream });
    loggers.tracker.child({ component: 'transactional-engine' }).info({ task: 1 }, 'task started');
    loggers.dev.info('ready');
    const [tracker, dev] = lines();
    for (const line of [tracker!, dev!]) {
      const keys = topLevelKeys(line);
      expect(keys.filter((k) => k === 'role')).toHaveLength(1);
      expect(new Set(keys).size).toBe(keys.length);
    }
    expect(JSON.parse(tracker!)).toMatchObject({ role: 'tracker', component: 'transactional-engine', task: 1 });
    expect(JSON.parse(dev!)).toMatchObject({ role: 'dev', msg: 'ready' });
  });

  it('a child with the role again would repeat the key (why dev does not do that)', () => {
    const { stream, lines } = capture();
    createLogger({ level: 'info', name: 'dev', destination: stream }).child({ role: 'tracker' }).info('x');
    expect(topLevelKeys(lines()[0]!).filter((k) => k === 'role')).toHaveLength(2);
  });
});
