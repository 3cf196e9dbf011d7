import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { consumeRecords, countRecords } from '../helpers/kafka.js';
import { messageId, signedHeaders, statusEvent } from './fixtures.js';
import { chunk, rawConnection, startTestIngress, type TestIngress } from './harness.js';
import { uwsInUse } from '../../src/platform/uws.js';

const SECRET = 'framing-secret';
const PATH = '/webhooks/biz_1/delivery_status';

/** A correctly signed webhook, as the provider would send it, with the head lines given. */
function signed(body: string, headLines: string[]): string {
  const signature = signedHeaders(SECRET, body)['x-service-hmac-sha256']!;
  return `POST ${PATH} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nx-service-hmac-sha256: ${signature}\r\n${headLines.map((l) => `${l}\r\n`).join('')}\r\n`;
}

/**
 * Sends raw bytes on a fresh connection; resolves with everything answered once the connection closes (or after 2 s).
 */
async function exchange(port: number, bytes: string): Promise<string> {
  const c = await rawConnection(port);
  c.socket.write(bytes);
  await Promise.race([c.closedAfter, new Promise((r) => setTimeout(r, 2000))]);
  c.socket.destroy();
  return c.received();
}

/**
 * Request smuggling: framing a proxy in front could read differently is refused (400, closed)
 * or dropped by uWS itself, and nothing from such a connection reaches Kafka, although every
 * body in here is correctly signed. A well-framed control request proves the test can fail.
 */
describe('ingress refuses ambiguous HTTP framing', () => {
  let t: TestIngress;
  let strict: TestIngress;

  beforeAll(async () => {
    t = await startTestIngress({ env: { MSGBRIDGE_BUSINESS_ID: 'biz_1', MSGBRIDGE_SIGNING_SECRET: SECRET } });
    strict = await startTestIngress({
      env: { MSGBRIDGE_BUSINESS_ID: 'biz_1', MSGBRIDGE_SIGNING_SECRET: SECRET },
      overrides: { ingress: { chunkedBodies: false } },
    });
  });
  afterAll(async () => {
    await t?.stop();
    await strict?.stop();
  });

  it('answers 400 and closes for repeated or conflicting lengths and unknown transfer codings; uWS refuses the rest itself; only the control reaches Kafka', async () => {
    const port = t.ingress.port;
    const smuggled = statusEvent(messageId());
    const smuggledRequest = signed(smuggled, [`content-length: ${Buffer.byteLength(smuggled)}`]) + smuggled;
    const cases: { name: string; bytes: string; expect: 'refused' | 'dropped' }[] = [
      // CL 0 then CL n: uWS takes the first; a proxy taking the last would forward the body as this request's.
      {
        name: 'conflicting Content-Length',
        bytes: signed(smuggled, ['content-length: 0', `content-length: ${Buffer.byteLength(smuggled)}`]) + smuggled,
        expect: 'refused',
      },
      {
        name: 'repeated equal Content-Length',
        bytes:
          signed(smuggled, [
            `content-length: ${Buffer.byteLength(smuggled)}`,
            `content-length: ${Buffer.byteLength(smuggled)}`,
          ]) + smuggled,
        expect: 'refused',
      },
      {
        name: 'Transfer-Encoding: xchunked',
        bytes: signed(smuggled, ['transfer-encoding: xchunked']) + chunk(smuggled) + '0\r\n\r\n',
        expect: 'refused',
      },
      {
        name: 'Transfer-Encoding: gzip, chunked',
        bytes: signed(smuggled, ['transfer-encoding: gzip, chunked']) + chunk(smuggled) + '0\r\n\r\n',
        expect: 'refused',
      },
      {
        name: 'repeated Transfer-Encoding',
        bytes:
          signed(smuggled, ['transfer-encoding: chunked', 'transfer-encoding: chunked']) +
          chunk(smuggled) +
          '0\r\n\r\n',
        expect: 'refused',
      },
      {
        name: 'a GET with conflicting lengths hiding a webhook',
        bytes: `GET /healthz HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\ncontent-length: ${Buffer.byteLength(smuggledRequest)}\r\n\r\n${smuggledRequest}`,
        expect: 'refused',
      },
      {
        name: 'both Content-Length and Transfer-Encoding',
        bytes:
          signed(smuggled, ['transfer-encoding: chunked', `content-length: ${Buffer.byteLength(smuggled)}`]) +
          chunk(smuggled) +
          '0\r\n\r\n',
        expect: 'dropped',
      },
      {
        name: 'obs-fold',
        bytes: signed(smuggled, ['x-note: a', ' folded', `content-length: ${Buffer.byteLength(smuggled)}`]) + smuggled,
        expect: 'dropped',
      },
      {
        name: 'a Content-Length list',
        bytes:
          signed(smuggled, [`content-length: ${Buffer.byteLength(smuggled)}, ${Buffer.byteLength(smuggled)}`]) +
          smuggled,
        expect: 'dropped',
      },
    ];
    for (const c of cases) {
      const answer = await exchange(port, c.bytes);
      if (c.expect === 'refused') {
        // 400 and the connection closed; a request uWS had already read behind it (the
        // smuggled one) is refused as well: every answer on the connection is a 400.
        expect(answer, c.name).toMatch(/^HTTP\/1\.1 400 /);
        expect(answer, c.name).toContain('"BAD_FRAMING"');
        expect(
          answer.match(/HTTP\/1\.1 \d+/g)!.every((line) => line.endsWith('400')),
          `${c.name}: ${answer}`,
        ).toBe(true);
      } else if (uwsInUse()?.name === 'uWebSockets.js') {
        // uWS refuses these itself, before msgbridge sees them: the 20.30 build closes the
        // connection without a word...
        expect(answer, c.name).toBe('');
      } else {
        // ...the official 20.57 build answers its own 400 and closes.
        expect(answer, c.name).toBe(
          'HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n<h1>Bad Request</h1><hr><i>uWebSockets/20 Server</i>',
        );
      }
    }
    // The GET's hidden webhook was read behind it and refused too: one more refusal than cases.
    expect(t.logs.filter((l) => l.includes('ambiguous HTTP framing')).length).toBe(
      cases.filter((c) => c.expect === 'refused').length + 1,
    );

    const control = statusEvent(messageId());
    expect(
      await exchange(
        port,
        signed(control, [`content-length: ${Buffer.byteLength(control)}`, 'connection: close']) + control,
      ),
    ).toMatch(/^HTTP\/1\.1 200 /);
    const chunked = statusEvent(messageId());
    expect(
      await exchange(
        port,
        signed(chunked, ['transfer-encoding: chunked', 'connection: close']) + chunk(chunked) + '0\r\n\r\n',
      ),
    ).toMatch(/^HTTP\/1\.1 200 /);
    const records = await consumeRecords(t.topics.deliveryStatus, 2);
    expect(records.map((r) => r.value.toString()).sort()).toEqual([control, chunked].sort());
    expect(await countRecords(t.topics.deliveryStatus)).toBe(2);
    const metrics = (await t.admin('/metrics')).body;
    expect(metrics).toMatch(/msgbridge_ingress_requests_total\{[^}]*outcome="bad_framing"[^}]*\} 7/);
  });

  it('with chunkedBodies false, a chunked body (whose chunk framing uWS does not check) is refused', async () => {
    const body = statusEvent(messageId());
    // Bare LF in the chunk framing: the uWS build accepts it, so only refusing chunked helps.
    const answer = await exchange(
      strict.ingress.port,
      `${signed(body, ['transfer-encoding: chunked'])}${Buffer.byteLength(body).toString(16)}\n${body}\n0\n\n`,
    );
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(answer).toContain('chunked bodies are refused');
    const ok = await exchange(
      strict.ingress.port,
      signed(body, [`content-length: ${Buffer.byteLength(body)}`, 'connection: close']) + body,
    );
    expect(ok).toMatch(/^HTTP\/1\.1 200 /);
    expect(await countRecords(strict.topics.deliveryStatus)).toBe(1);
  });
});
