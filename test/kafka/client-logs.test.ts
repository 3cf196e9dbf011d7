import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { createKafkajsClient } from '../../src/kafka/client.js';
import { createLogger } from '../../src/platform/logger.js';
import { repeatedKeys } from '../helpers/log-lines.js';

describe('kafkajs log lines', () => {
  it('carry no key twice when the logger already binds component or groupId, and keep the client named', () => {
    const lines: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        lines.push(...chunk.toString().split('\n').filter(Boolean));
        done();
      },
    });
    const logger = createLogger({ level: 'debug', name: 'sender', destination }).child({
      component: 'sender',
      groupId: 'msgbridge-sender',
    });
    const kafka = createKafkajsClient(loadConfig({ env: {} }).kafka, { logger, brokers: ['127.0.0.1:9'] });
    kafka
      .logger()
      .error('Offset commit refused', { broker: '127.0.0.1:9', groupId: 'msgbridge-sender', retryCount: 2 });
    expect(lines).toHaveLength(1);
    expect(repeatedKeys(lines[0]!)).toEqual([]);
    expect(JSON.parse(lines[0]!)).toMatchObject({
      component: 'sender',
      library: 'kafkajs',
      groupId: 'msgbridge-sender',
      broker: '127.0.0.1:9',
      retryCount: 2,
      msg: 'Offset commit refused',
    });
    // A logger that binds nothing: the line says it comes from kafkajs.
    const plain = createLogger({ level: 'debug', name: 'x', destination });
    createKafkajsClient(loadConfig({ env: {} }).kafka, { logger: plain, brokers: ['127.0.0.1:9'] })
      .logger()
      .warn('slow', { broker: 'b' });
    expect(JSON.parse(lines[1]!)).toMatchObject({ component: 'kafkajs', broker: 'b' });
  });
});

/** A logger destination that keeps each line it is given, parsed. */
function jsonLines() {
  const lines: Record<string, unknown>[] = [];
  const destination = new Writable({
    write(chunk: Buffer, _encoding, done) {
      for (const text of chunk.toString().split('\n').filter(Boolean))
        lines.push(JSON.parse(text) as Record<string, unknown>);
      done();
    },
  });
  return { lines, destination };
}

describe('a broker that does not answer', () => {
  it('is one warning per broker every 30 s, naming the cause; the retries are debug lines', () => {
    const { lines, destination } = jsonLines();
    const logger = createLogger({ level: 'debug', name: 'sender', destination }).child({ component: 'sender' });
    const log = createKafkajsClient(loadConfig({ env: {} }).kafka, { logger, brokers: ['127.0.0.1:9'] }).logger();
    for (let i = 0; i < 5; i++)
      log.error('Connection error: connect ECONNREFUSED 127.0.0.1:9', {
        broker: '127.0.0.1:9',
        stack: 'Error: connect ECONNREFUSED\n    at x',
      });
    log.error('Response OffsetCommit(key: 8, version: 5)', { broker: '127.0.0.1:10', error: 'The request timed out' });
    log.error('Response Heartbeat(key: 12, version: 3)', {
      broker: '127.0.0.1:9',
      error: 'The coordinator is not aware of this member',
    });
    const warnings = lines.filter((l) => l.level === 40);
    expect(warnings.map((l) => [l.broker, l.cause])).toEqual([
      ['127.0.0.1:9', 'Connection error: connect ECONNREFUSED 127.0.0.1:9'],
      ['127.0.0.1:10', 'The request timed out'],
    ]);
    expect(warnings.every((l) => l.stack === undefined)).toBe(true);
    expect(lines.filter((l) => l.level === 20)).toHaveLength(4);
    // Not a broker that is away: an answer the member must act on stays an error.
    expect(lines.filter((l) => l.level === 50).map((l) => l.msg)).toEqual(['Response Heartbeat(key: 12, version: 3)']);
  });
});

describe('a consumer that kafkajs restarts', () => {
  it('is a warning: the crash was logged with its cause; a crash itself stays an error', () => {
    const { lines, destination } = jsonLines();
    const logger = createLogger({ level: 'debug', name: 'tracker', destination });
    const log = createKafkajsClient(loadConfig({ env: {} }).kafka, { logger, brokers: ['127.0.0.1:9'] }).logger();
    log.error('Crash: KafkaJSError: Something unexpected', { groupId: 'g', retryCount: 0 });
    log.error('Restarting the consumer in 300ms', { groupId: 'g', retryCount: 0, retryTime: 300 });
    expect(lines.map((l) => [l.level, l.msg])).toEqual([
      [50, 'Crash: KafkaJSError: Something unexpected'],
      [40, 'Restarting the consumer in 300ms'],
    ]);
  });
});
