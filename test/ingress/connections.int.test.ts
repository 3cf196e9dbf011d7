import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countRecords } from '../helpers/kafka.js';
import { messageId, signedHeaders, statusEvent } from './fixtures.js';
import { startTestIngress, type TestIngress } from './harness.js';

const SECRET = 'connections-secret';

function open(port: number): Promise<{ socket: Socket; closedAfter: Promise<number>; received: () => string }> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let text = '';
    socket.on('data', (d) => (text += String(d)));
    socket.on('error', () => {});
    socket.once('error', reject);
    socket.once('connect', () => {
      const opened = Date.now();
      const closedAfter = new Promise<number>((done) => socket.once('close', () => done(Date.now() - opened)));
      resolve({ socket, closedAfter, received: () => text });
    });
  });
}

/** Connections that hold resources without progress are closed; bodies count against memory. */
describe('ingress connection discipline', () => {
  let t: TestIngress;

  beforeAll(async () => {
    t = await startTestIngress({
      env: { MSGBRIDGE_BUSINESS_ID: 'biz_1', MSGBRIDGE_SIGNING_SECRET: SECRET },
      overrides: { ingress: { idleTimeoutSeconds: 8, maxBodyBytes: 2048, queueMaxBytes: 3000 } },
    });
  });
  afterAll(async () => {
    await t?.stop();
  });

  it('closes idle keep-alive connections and slow bodies, and refuses bodies past the memory budget', async () => {
    // An idle keep-alive connection: uWS closes it after about 10 s without traffic.
    const idle = await open(t.ingress.port);
    idle.socket.write('GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n');

    // A body trickling in a byte every 2 s never looks idle; the body deadline (8 s) closes it.
    const slow = await open(t.ingress.port);
    slow.socket.write(`POST /webhooks/biz_1/delivery_status HTTP/1.1\r\nhost: x\r\ncontent-length: 2000\r\nx-service-hmac-sha256: ${'A'.repeat(43)}=\r\n\r\n{`);
    const trickle = setInterval(() => slow.socket.write(' '), 2000);

    try {
      // While those 2000 bytes are expected, a 1500-byte body would pass the 3000-byte budget.
      await new Promise((r) => setTimeout(r, 300));
      const body = statusEvent(messageId()).padEnd(1500, ' ');
      const refused = await t.post('/webhooks/biz_1/delivery_status', body, signedHeaders(SECRET, body));
      expect(refused.status).toBe(503);
      expect(refused.headers['retry-after']).toBeDefined();
      expect(JSON.parse(refused.body).error.code).toBe('QUEUE_FULL');

      const slowClosedAfter = await slow.closedAfter;
      expect(slowClosedAfter).toBeGreaterThanOrEqual(7500);
      expect(slowClosedAfter).toBeLessThan(12_000);
      expect(slow.received()).toBe(''); // cut off, not answered

      const idleClosedAfter = await idle.closedAfter;
      expect(idle.received()).toMatch(/^HTTP\/1\.1 200 /);
      expect(idleClosedAfter).toBeGreaterThanOrEqual(8000);
      expect(idleClosedAfter).toBeLessThan(20_000);

      // With the slow body gone, the same request fits again.
      const accepted = await t.post('/webhooks/biz_1/delivery_status', body, signedHeaders(SECRET, body));
      expect(accepted.status).toBe(200);
      expect(await countRecords(t.topics.deliveryStatus)).toBe(1);
    } finally {
      clearInterval(trickle);
      idle.socket.destroy();
      slow.socket.destroy();
    }
  }, 40_000);
});
