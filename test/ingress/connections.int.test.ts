import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { uwsInUse } from '../../src/platform/uws.js';
import { countRecords } from '../helpers/kafka.js';
import { messageId, signedHeaders, statusEvent } from './fixtures.js';
import { chunk, rawConnection, startTestIngress, type TestIngress } from './harness.js';

const SECRET = 'connections-secret';

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

  it('closes idle keep-alive connections and slow bodies; a length merely declared reserves no memory', async () => {
    // An idle keep-alive connection: uWS closes it itself, the registry's 20.30 build after about
    // 10 s without traffic, the official 20.57 build (Node 22/24, the image) after about 32 s.
    const idleBoundMs = uwsInUse()?.name === 'uWebSockets.js' ? 20_000 : 40_000;
    const idle = await rawConnection(t.ingress.port);
    // Any answer will do (the webhook port has no GET route): the connection then sits idle.
    idle.socket.write('GET /nothing-here HTTP/1.1\r\nhost: x\r\n\r\n');

    // A body trickling in a byte every 2 s never looks idle; the body deadline (8 s) closes it.
    const slow = await rawConnection(t.ingress.port);
    slow.socket.write(
      `POST /webhooks/biz_1/delivery_status HTTP/1.1\r\nhost: x\r\ncontent-length: 2000\r\nx-service-hmac-sha256: ${'A'.repeat(43)}=\r\n\r\n{`,
    );
    const trickle = setInterval(() => slow.socket.write(' '), 2000);

    try {
      // 2000 bytes are promised but only a few arrived: a 1500-byte body fits the 3000-byte budget.
      await new Promise((r) => setTimeout(r, 300));
      const body = statusEvent(messageId()).padEnd(1500, ' ');
      const meanwhile = await t.post('/webhooks/biz_1/delivery_status', body, signedHeaders(SECRET, body));
      expect(meanwhile.status).toBe(200);
      expect((await t.admin('/readyz')).status).toBe(200);

      const slowClosedAfter = await slow.closedAfter;
      expect(slowClosedAfter).toBeGreaterThanOrEqual(7500);
      expect(slowClosedAfter).toBeLessThan(12_000);
      expect(slow.received()).toBe(''); // cut off, not answered

      const idleClosedAfter = await idle.closedAfter;
      expect(idle.received()).toMatch(/^HTTP\/1\.1 404 /);
      expect(idleClosedAfter).toBeGreaterThanOrEqual(8000);
      expect(idleClosedAfter).toBeLessThan(idleBoundMs);

      const after = statusEvent(messageId()).padEnd(1500, ' ');
      const accepted = await t.post('/webhooks/biz_1/delivery_status', after, signedHeaders(SECRET, after));
      expect(accepted.status).toBe(200);
      expect(await countRecords(t.topics.deliveryStatus)).toBe(2);
    } finally {
      clearInterval(trickle);
      idle.socket.destroy();
      slow.socket.destroy();
    }
  }, 60_000);

  it('holds chunked bodies (no content-length) to the memory budget as they arrive', async () => {
    const head = (signature: string) =>
      `POST /webhooks/biz_1/delivery_status HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\ncontent-type: application/json\r\nx-service-hmac-sha256: ${signature}\r\n\r\n`;
    const first = statusEvent(messageId()).padEnd(1500, ' ');
    const second = statusEvent(messageId()).padEnd(1600, ' ');

    // The first body arrives but for its last bytes and its end, and is held meanwhile.
    const holding = await rawConnection(t.ingress.port);
    holding.socket.write(head(signedHeaders(SECRET, first)['x-service-hmac-sha256']!) + chunk(first.slice(0, 1490)));
    const refusedConnection = await rawConnection(t.ingress.port);
    const before = await countRecords(t.topics.deliveryStatus);
    try {
      await new Promise((r) => setTimeout(r, 300));
      // The second, also without a length, is admitted (nothing declared) but 1490 + 1600 passes 3000.
      refusedConnection.socket.write(
        head(signedHeaders(SECRET, second)['x-service-hmac-sha256']!) + chunk(second) + '0\r\n\r\n',
      );
      await refusedConnection.closedAfter;
      expect(refusedConnection.received()).toMatch(/^HTTP\/1\.1 503 /);
      expect(refusedConnection.received()).toMatch(/retry-after: /i);
      expect(refusedConnection.received()).toContain('"QUEUE_FULL"');

      // The first is unaffected: it completes and is published.
      holding.socket.write(chunk(first.slice(1490)) + '0\r\n\r\n');
      await vi.waitFor(() => expect(holding.received()).toMatch(/^HTTP\/1\.1 200 /), { timeout: 10_000 });
      expect(await countRecords(t.topics.deliveryStatus)).toBe(before + 1);
    } finally {
      holding.socket.destroy();
      refusedConnection.socket.destroy();
    }
  }, 30_000);
});

describe('ingress drain with a body still arriving', () => {
  it('cuts off a stalled upload after half the grace period, unanswered, and finishes the drain in time', async () => {
    const t = await startTestIngress({
      env: { MSGBRIDGE_BUSINESS_ID: 'biz_1', MSGBRIDGE_SIGNING_SECRET: SECRET },
      // The body deadline alone (30 s) would outlast the grace period (4 s).
      overrides: {
        ingress: { idleTimeoutSeconds: 30, drainGraceMs: 4000, publishTimeoutMs: 1500 },
        kafka: { connectionTimeoutMs: 1500 },
      },
    });
    const stalled = await rawConnection(t.ingress.port);
    try {
      const body = statusEvent(messageId());
      stalled.socket.write(
        `POST /webhooks/biz_1/delivery_status HTTP/1.1\r\nhost: x\r\ncontent-length: ${body.length}\r\nx-service-hmac-sha256: ${signedHeaders(SECRET, body)['x-service-hmac-sha256']}\r\n\r\n${body.slice(0, 10)}`,
      );
      await new Promise((r) => setTimeout(r, 300));
      const started = Date.now();
      await t.ingress.drain();
      const tookMs = Date.now() - started;
      expect(tookMs).toBeGreaterThanOrEqual(1900);
      expect(tookMs).toBeLessThan(4000);
      await stalled.closedAfter;
      expect(stalled.received()).toBe(''); // cut off, not answered: the provider sends it again
      expect(t.logs.some((l) => l.includes('still arriving at the end of the drain'))).toBe(true);
      expect(await countRecords(t.topics.deliveryStatus)).toBe(0);
    } finally {
      stalled.socket.destroy();
      await t.stop();
    }
  }, 30_000);
});

describe('ingress under connections that promise bodies and never send them', () => {
  it('80 idle connections promising 1 MiB each: every signed webhook from another address still gets 200; the slowest idle ones are closed to make room', async () => {
    const t = await startTestIngress({
      env: { MSGBRIDGE_BUSINESS_ID: 'biz_1', MSGBRIDGE_SIGNING_SECRET: SECRET },
      overrides: { ingress: { idleTimeoutSeconds: 30, maxReceivingPerAddress: 64 } },
    });
    const attackers: Awaited<ReturnType<typeof rawConnection>>[] = [];
    try {
      const promise = `POST /webhooks/biz_1/delivery_status HTTP/1.1\r\nhost: x\r\ncontent-length: 1048576\r\nx-service-hmac-sha256: ${'A'.repeat(43)}=\r\n\r\n`;
      for (let i = 0; i < 80; i++) {
        const c = await rawConnection(t.ingress.port, '127.0.0.3');
        c.socket.write(promise);
        attackers.push(c);
      }
      await new Promise((r) => setTimeout(r, 300));
      // 64 are in progress (the address's bound); the 16 beyond it, all in their first second, got 503.
      expect(attackers.filter((c) => /^HTTP\/1\.1 503 /.test(c.received())).length).toBe(16);
      expect(
        attackers.filter(
          (c) => c.received().includes('receiving-limit') || c.received().includes('still sending their body'),
        ).length,
      ).toBe(16);
      expect((await t.admin('/readyz')).status).toBe(200);

      // The provider, from another address: every correctly signed webhook is accepted.
      const sent: string[] = [];
      const answers = await Promise.all(
        Array.from({ length: 20 }, async () => {
          const body = statusEvent(messageId());
          sent.push(body);
          const c = await rawConnection(t.ingress.port, '127.0.0.2');
          const signature = signedHeaders(SECRET, body)['x-service-hmac-sha256']!;
          c.socket.write(
            `POST /webhooks/biz_1/delivery_status HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nx-service-hmac-sha256: ${signature}\r\nconnection: close\r\n\r\n${body}`,
          );
          await c.closedAfter;
          return c.received();
        }),
      );
      expect(answers.filter((a) => /^HTTP\/1\.1 200 /.test(a))).toHaveLength(20);
      expect(await countRecords(t.topics.deliveryStatus)).toBe(20);

      // Past their first second, a new connection from the same address takes the place of the slowest idle one.
      await new Promise((r) => setTimeout(r, 1000));
      const open = () => attackers.filter((c) => !c.socket.destroyed && c.received() === '').length;
      const before = open();
      const newcomer = await rawConnection(t.ingress.port, '127.0.0.3');
      newcomer.socket.write(promise);
      attackers.push(newcomer);
      await vi.waitFor(() => expect(open()).toBe(before), { timeout: 5000 });
      expect(t.logs.some((l) => l.includes('closed to make room'))).toBe(true);
    } finally {
      for (const c of attackers) c.socket.destroy();
      await t.stop();
    }
  }, 60_000);
});
