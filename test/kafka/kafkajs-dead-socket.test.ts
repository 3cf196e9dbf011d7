import type { Socket } from 'node:net';
import { createRequire } from 'node:module';
import { describe, expect, it } from 'vitest';
import '../../src/kafka/kafkajs-failover-fix.js';
import { closedPort } from '../helpers/http-proxy.js';

const require = createRequire(import.meta.url);
const KafkajsConnection = require('kafkajs/src/network/connection.js') as new (options: object) => {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
};
const kafkajsSocketFactory = (require('kafkajs/src/network/socketFactory.js') as () => (o: object) => Socket)();
const { createLogger, LEVELS } = require('kafkajs/src/loggers/index.js') as {
  createLogger(options: { level: number; logCreator: () => () => void }): unknown;
  LEVELS: { NOTHING: number };
};

describe("kafkajs's connection to a dead broker", () => {
  it('disconnected again and again after a refused connect: no listeners pile up, no warning', async () => {
    const sockets: Socket[] = [];
    const socketFactory = (options: object) => {
      const socket = kafkajsSocketFactory(options);
      sockets.push(socket);
      return socket;
    };
    const connection = new KafkajsConnection({
      host: '127.0.0.1',
      port: await closedPort(),
      logger: createLogger({ level: LEVELS.NOTHING, logCreator: () => () => undefined }),
      socketFactory,
      requestTimeout: 1000,
      connectionTimeout: 1000,
    });
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => void warnings.push(warning);
    process.on('warning', onWarning);
    try {
      await expect(connection.connect()).rejects.toThrow(/ECONNREFUSED/);
      expect(sockets).toHaveLength(1);
      const refused = sockets[0]!;
      expect(refused.destroyed).toBe(true);
      // kafkajs's own connect callback and socket options wait for a `connect` that never comes.
      const atRefusal = refused.listenerCount('connect');
      // What the broker pool does on each attempt to reach a dead broker (twelve attempts: more than Node's limit of ten).
      for (let attempt = 0; attempt < 12; attempt++) await connection.disconnect();
      await new Promise((resolve) => setImmediate(resolve));
      expect(refused.listenerCount('connect')).toBe(atRefusal);
      expect(warnings.filter((w) => w.name === 'MaxListenersExceededWarning')).toEqual([]);
    } finally {
      process.off('warning', onWarning);
    }
  });
});
