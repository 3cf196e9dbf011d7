import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { connect } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { describe, expect, it } from 'vitest';
import { consumeRecords, countRecords, createTopics, kafkaBrokers } from '../helpers/kafka.js';
import { inboundEvent, messageId, signedHeaders, statusEvent } from './fixtures.js';
import { KAFKA_CLIENTS, ingressTopics } from './harness.js';

const SECRET = 'drain-secret';
const CLI = fileURLToPath(new URL('../../src/cli.ts', import.meta.url));
const sha256 = (body: string) => createHash('sha256').update(body).digest('hex');

/** A POST over a raw socket: headers and half the body now, the rest on `finish()`, which resolves with the answer. */
function straddle(url: URL, body: string, headers: Record<string, string>): { finish(): Promise<string> } {
  const socket = connect(Number(url.port), url.hostname);
  socket.on('error', () => {});
  let text = '';
  socket.on('data', (d) => (text += d.toString('latin1')));
  const bytes = Buffer.from(body);
  const half = Math.floor(bytes.length / 2);
  const head = Object.entries({ ...headers, host: url.host, 'content-length': String(bytes.length) })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  socket.write(`POST /webhooks/biz_1 HTTP/1.1\r\n${head}\r\n`);
  socket.write(bytes.subarray(0, half));
  return {
    finish: () =>
      new Promise((resolve) => {
        socket.write(bytes.subarray(half));
        const done = () => {
          clearTimeout(timer);
          socket.destroy();
          resolve(text);
        };
        const timer = setTimeout(done, 10_000);
        socket.on('data', () => {
          if (/\r\n\r\n/.test(text)) done();
        });
        socket.on('close', done);
      }),
  };
}

/**
 * `msgbridge ingress` as its own process, configured by environment variables alone (the
 * single-business shorthand), SIGTERM in the middle of a load: it must exit 0, and every
 * event it answered 200 must be in Kafka.
 */
describe('msgbridge ingress: SIGTERM under load', () => {
  it.each(KAFKA_CLIENTS)(
    'drains (kafka.client %s): exits 0 and loses no acknowledged event',
    async (client) => {
      const topics = ingressTopics();
      await createTopics([topics.messages, topics.deliveryStatus, topics.webhooksDlq], 3);
      const child = spawn(process.execPath, ['--import', 'tsx', CLI, 'ingress'], {
        env: {
          ...process.env,
          KAFKA_BROKERS: kafkaBrokers().join(','),
          MSGBRIDGE_BUSINESS_ID: 'biz_1',
          MSGBRIDGE_SIGNING_SECRET: SECRET,
          MSGBRIDGE_INGRESS_PORT: '0',
          MSGBRIDGE_INGRESS_ADMIN_PORT: '0',
          MSGBRIDGE__ingress__host: '127.0.0.1',
          MSGBRIDGE__ingress__drainGraceMs: '15000',
          MSGBRIDGE__kafka__client: client,
          MSGBRIDGE__kafka__topics__messages: topics.messages,
          MSGBRIDGE__kafka__topics__deliveryStatus: topics.deliveryStatus,
          MSGBRIDGE__kafka__topics__webhooksDlq: topics.webhooksDlq,
          MSGBRIDGE_LOG_LEVEL: 'warn',
          MSGBRIDGE_CONFIG: '',
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let stderr = '';
      child.stderr.on('data', (d) => (stderr += String(d)));
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      try {
        const firstLine = await Promise.race([
          new Promise<string>((resolve) => createInterface({ input: child.stdout }).once('line', resolve)),
          exited.then((code) => {
            throw new Error(`msgbridge ingress exited with ${code} before listening:\n${stderr}`);
          }),
        ]);
        const { ingress: url } = JSON.parse(firstLine) as { ingress: string };

        const pool = new Pool(url, { connections: 24 });
        const acknowledged = new Map<string, 'messages' | 'delivery_status'>();
        const answered: Record<string, number> = {};
        let running = true;
        let n = 0;
        const client = async () => {
          while (running) {
            const inbound = n++ % 4 === 0;
            const body = inbound
              ? inboundEvent(`+1555${String(n).padStart(7, '0')}`)
              : statusEvent(messageId(), 'delivered');
            try {
              const res = await pool.request({
                method: 'POST',
                path: '/webhooks/biz_1',
                body,
                headers: signedHeaders(SECRET, body),
              });
              await res.body.dump();
              answered[res.statusCode] = (answered[res.statusCode] ?? 0) + 1;
              if (res.statusCode === 200) acknowledged.set(sha256(body), inbound ? 'messages' : 'delivery_status');
            } catch {
              answered.error = (answered.error ?? 0) + 1;
              await new Promise((r) => setTimeout(r, 10));
            }
          }
        };
        const clients = Array.from({ length: 24 }, client);

        while (acknowledged.size < 300) await new Promise((r) => setTimeout(r, 20));
        // One request certainly in flight when the signal comes: its headers and half its body
        // are in before the signal, the rest after. (Whether any of the load's requests is in
        // the ingress at that instant depends on timing: a fast producer often leaves none.)
        const halfSent = statusEvent(messageId(), 'read');
        const straddling = straddle(new URL(url), halfSent, signedHeaders(SECRET, halfSent));
        await new Promise((r) => setTimeout(r, 300));
        child.kill('SIGTERM');
        await new Promise((r) => setTimeout(r, 200));
        const straddled = await straddling.finish();
        if (straddled.startsWith('HTTP/1.1 200 ')) acknowledged.set(sha256(halfSent), 'delivery_status');
        const code = await exited;
        running = false;
        await Promise.all(clients);
        await pool.destroy();

        expect(code, stderr).toBe(0);
        // A request in flight when the signal came was finished, not cut off.
        expect(straddled).toMatch(/^HTTP\/1\.1 200 /);
        expect(answered['200']).toBeGreaterThanOrEqual(300);
        const expectedMessages = [...acknowledged.values()].filter((t) => t === 'messages').length;
        const expectedStatuses = acknowledged.size - expectedMessages;
        // Nothing is acknowledged that is not written: at least as many records as 200 answers
        // (a few more are possible: answered 503 by the drain deadline, then written).
        expect(await countRecords(topics.messages)).toBeGreaterThanOrEqual(expectedMessages);
        expect(await countRecords(topics.deliveryStatus)).toBeGreaterThanOrEqual(expectedStatuses);
        const total = (await countRecords(topics.messages)) + (await countRecords(topics.deliveryStatus));
        const records = await consumeRecords([topics.messages, topics.deliveryStatus], total);
        const stored = new Set(records.map((r) => r.headers['event-id']));
        const lost = [...acknowledged.keys()].filter((id) => !stored.has(id));
        expect(lost).toEqual([]);
      } finally {
        if (child.exitCode === null) child.kill('SIGKILL');
      }
    },
    120_000,
  );

  it('refuses to start, with a message naming what to set, when no business has a signing secret', () => {
    const result = spawnSync(process.execPath, ['--import', 'tsx', CLI, 'ingress'], {
      env: {
        ...process.env,
        KAFKA_BROKERS: kafkaBrokers().join(','),
        MSGBRIDGE_BUSINESS_ID: '',
        MSGBRIDGE_SIGNING_SECRET: '',
        MSGBRIDGE_CONFIG: '',
      },
      encoding: 'utf8',
      timeout: 60_000,
    });
    expect(result.status).toBe(2);
    expect(result.stderr).toContain('MSGBRIDGE_SIGNING_SECRET');
  });
});
