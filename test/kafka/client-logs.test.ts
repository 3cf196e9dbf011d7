import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/load.js';
import { createKafka } from '../../src/kafka/client.js';
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
    const logger = createLogger({ level: 'debug', name: 'sender', destination }).child({ component: 'sender', groupId: 'msgbridge-sender' });
    const kafka = createKafka(loadConfig({ env: {} }).kafka, { logger, brokers: ['127.0.0.1:9'] });
    kafka.logger().error('Connection error', { broker: '127.0.0.1:9', groupId: 'msgbridge-sender', retryCount: 2 });
    expect(lines).toHaveLength(1);
    expect(repeatedKeys(lines[0]!)).toEqual([]);
    expect(JSON.parse(lines[0]!)).toMatchObject({ component: 'sender', library: 'kafkajs', groupId: 'msgbridge-sender', broker: '127.0.0.1:9', retryCount: 2, msg: 'Connection error' });
    // A logger that binds nothing: the line says it comes from kafkajs.
    const plain = createLogger({ level: 'debug', name: 'x', destination });
    createKafka(loadConfig({ env: {} }).kafka, { logger: plain, brokers: ['127.0.0.1:9'] })
      .logger()
      .warn('slow', { broker: 'b' });
    expect(JSON.parse(lines[1]!)).toMatchObject({ component: 'kafkajs', broker: 'b' });
  });
});
