import { createHash, randomUUID } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTracker, type Tracker } from '../../src/tracker/index.js';
import { createDlqPort } from '../../src/commands/dlq-console.js';
import { createLogger } from '../../src/platform/logger.js';
import { messageId } from '../ingress/fixtures.js';
import { createTopics, kafkaBrokers, produce } from '../helpers/kafka.js';
import {
  authHeaders,
  inboundRecord,
  resultRecord,
  statusRecord,
  TEST_TOKENS,
  trackerConfig,
  until,
} from './harness.js';

/**
 * Access to the tracker's queries and console (src/tracker/README.md, "Console and access") on two real members on the
 * suite's broker: 401 without or with a wrong credential (the forwarded mark opens nothing), the health
 * endpoints open, phone numbers masked for the read role only, queries forwarded between members
 * with the caller's credential, 403 for a read-only redrive, the tokens file reloaded live
 * (an invalid one keeps the last good set, said once), and no token in any log line.
 */
const id = randomUUID().slice(0, 8);
const dir = mkdtempSync(join(tmpdir(), 'msgbridge-tokens-'));
const tokensFile = join(dir, 'tokens.json');
const sha256 = (token: string) => createHash('sha256').update(token).digest('hex');
const FILE_TOKEN = `file-token-${id}`;
const LATER_TOKEN = `later-token-${id}`;
const logs = new PassThrough();
let logText = '';
logs.on('data', (d: Buffer) => (logText += d.toString()));

const config = trackerConfig(
  id,
  {
    tracker: { maskRecipients: true },
    kafka: { topics: { webhooksDlq: `tr-wdlq-${id}`, sendRequestsDlq: `tr-sdlq-${id}` } },
  },
  { MSGBRIDGE_TRACKER_TOKENS_FILE: tokensFile },
);
const members: Tracker[] = [];
const ids = Array.from({ length: 12 }, () => messageId());
const ALICE = '+15550007777';

async function get(base: string, path: string, headers: Record<string, string> = {}) {
  const res = await fetch(`${base}${path}`, { headers });
  return {
    status: res.status,
    headers: res.headers,
    body: (await res.json().catch(() => undefined)) as Record<string, unknown>,
  };
}

beforeAll(async () => {
  writeFileSync(tokensFile, JSON.stringify([{ name: 'from-file', role: 'read', sha256: sha256(FILE_TOKEN) }]));
  await createTopics([config.kafka.topics.webhooksDlq, config.kafka.topics.sendRequestsDlq]);
  const logger = createLogger({ level: 'info', name: 'tracker', destination: logs });
  for (let i = 0; i < 2; i++) {
    const tracker = await startTracker({ config, logger, dlq: createDlqPort(config, kafkaBrokers(), logger) });
    members.push(tracker);
  }
  await Promise.all(members.map((m) => m.ready));
  await produce(
    config.kafka.topics.sendResults,
    ids.map((m, i) => resultRecord(`acc-${i}`, m, `2026-11-20T10:00:${String(i).padStart(2, '0')}.000Z`, ALICE)),
  );
  await produce(config.kafka.topics.deliveryStatus, [statusRecord(ids[0]!, 'delivered', '1763632900')]);
  await produce(config.kafka.topics.messages, [inboundRecord(ALICE, '1763632800')]);
  // Both members own tasks (3 partitions between 2 members), and every message is answered by its owner.
  await until('every message known', async () => {
    for (const m of ids)
      if ((await get(members[0]!.address!, `/messages/${m}`, authHeaders())).status !== 200) return false;
    return (await get(members[0]!.address!, `/messages/${ids[0]}`, authHeaders())).body.status === 'delivered';
  });
}, 180_000);

afterAll(async () => {
  await Promise.all(members.map((m) => m.drain()));
});

describe('tracker access', () => {
  it('401 without a credential, with a wrong or malformed one, and with only the forwarded mark; health, readiness and metrics on the admin port only', async () => {
    const base = members[0]!.address!;
    for (const headers of [
      {},
      { authorization: 'Bearer wrong' },
      { authorization: 'Basic dXNlcjpwYXNz' },
      { 'x-msgbridge-forwarded': '1' },
      { 'x-forwarded-user': 'alice' },
    ] as Record<string, string>[]) {
      for (const path of [
        `/messages/${ids[1]}`,
        '/requests/acc-1',
        `/messages?recipient=${encodeURIComponent(ALICE)}`,
        '/me',
        '/dlq',
        `/conversations/biz_1/${encodeURIComponent(ALICE)}`,
        `/inbound?customer=${encodeURIComponent(ALICE)}`,
        `/thread?customer=${encodeURIComponent(ALICE)}`,
        `/thread?recipientOf=${ids[1]}`,
      ]) {
        const answer = await get(base, path, headers);
        expect(answer.status, `${path} ${JSON.stringify(headers)}`).toBe(401);
        expect(answer.headers.get('www-authenticate')).toMatch(/^Bearer realm="msgbridge tracker"/);
        expect(answer.body).toMatchObject({ error: 'UNAUTHENTICATED' });
        expect(JSON.stringify(answer.body)).not.toContain(ALICE);
      }
    }
    expect(
      (await get(base, '/messages/x', { authorization: 'Bearer wrong' })).headers.get('www-authenticate'),
    ).toContain('error="invalid_token"');
    // The query and console port has no health or metrics path, with or without a credential.
    for (const path of ['/healthz', '/readyz', '/metrics']) {
      for (const headers of [{}, authHeaders('operator')])
        expect((await fetch(`${base}${path}`, { headers })).status, path).toBe(404);
    }
    const admin = members[0]!.adminAddress!;
    expect(new URL(admin).port).not.toBe(new URL(base).port);
    expect((await fetch(`${admin}/healthz`)).status).toBe(200);
    expect((await fetch(`${admin}/readyz`)).status).toBe(200);
    // Nothing but those three there: no query, no console.
    expect((await fetch(`${admin}/messages/${ids[1]}`, { headers: authHeaders() })).status).toBe(404);
    expect((await fetch(`${admin}/console/`)).status).toBe(404);
    const metrics = await (await fetch(`${admin}/metrics`)).text();
    expect(metrics).toMatch(/msgbridge_tracker_access_refused_total\{reason="missing"[^}]*\} [1-9]/);
    // The console's files hold no data and open without a credential.
    const page = await fetch(`${base}/console/`);
    expect(page.status).toBe(200);
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
    expect(page.headers.get('cache-control')).toBe('no-cache');
    const script = await fetch(`${base}/console/console.js`);
    expect(script.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
    expect(
      (await fetch(`${base}/console/console.js`, { headers: { 'if-none-match': script.headers.get('etag')! } })).status,
    ).toBe(304);
    expect((await fetch(`${base}/console/../index.ts`)).status).toBe(404);
  });

  it('masks phone numbers for the read role in every answer; the operator sees them; a search by the full number works either way', async () => {
    const base = members[1]!.address!;
    const read = await get(base, `/messages/${ids[2]}`, authHeaders('read'));
    expect(read).toMatchObject({ status: 200, body: { messageId: ids[2], recipient: '+1555•••7777' } });
    expect(read.headers.get('cache-control')).toBe('no-store');
    expect((await get(base, `/messages/${ids[2]}`, authHeaders('operator'))).body.recipient).toBe(ALICE);
    const page = await get(base, `/messages?recipient=${encodeURIComponent(ALICE)}&limit=100`, authHeaders('read'));
    expect(page.status).toBe(200);
    expect(page.body.recipient).toBe('+1555•••7777');
    const messages = page.body.messages as { messageId: string; recipient: string }[];
    expect(messages.map((m) => m.messageId).sort()).toEqual([...ids].sort());
    expect(JSON.stringify(page.body)).not.toContain(ALICE);
    // The same list by a message id (what the console links to when numbers are masked).
    const of = await get(base, `/messages?recipientOf=${ids[5]}&limit=5`, authHeaders('read'));
    expect((of.body.messages as unknown[]).length).toBe(5);
    expect(of.body.next).toEqual(expect.any(String));
    const window = await get(base, `/messages/${ids[3]}/conversation`, authHeaders('read'));
    // The window names the customer in the canonical form (no +).
    expect(window).toMatchObject({
      status: 200,
      body: { businessId: 'biz_1', customer: '1555•••7777', lastInboundAt: new Date(1763632800_000).toISOString() },
    });
    expect(await get(base, '/me', authHeaders('read'))).toMatchObject({
      body: { name: 'test-reader', role: 'read', masked: true },
    });
    expect(await get(base, '/me', authHeaders('operator'))).toMatchObject({
      body: { name: 'test-operator', role: 'operator', masked: false },
    });
  });

  it('forwards to the owning member with the caller credential: every message, request and window answers on both members', async () => {
    for (const member of members) {
      for (const [i, m] of ids.entries()) {
        expect((await get(member.address!, `/messages/${m}`, authHeaders('read'))).status).toBe(200);
        expect((await get(member.address!, `/requests/acc-${i}`, authHeaders('read'))).body.messageId).toBe(m);
      }
      expect(
        await get(member.address!, `/conversations/biz_1/${encodeURIComponent(ALICE)}`, authHeaders('operator')),
      ).toMatchObject({ status: 200, body: { customer: ALICE.slice(1) } });
      expect(
        await get(member.address!, `/conversations/biz_1/${ALICE.slice(1)}`, authHeaders('operator')),
      ).toMatchObject({ status: 200, body: { customer: ALICE.slice(1) } });
      expect(
        (
          await get(
            member.address!,
            `/conversations/biz_1/${encodeURIComponent('+15550000000')}`,
            authHeaders('operator'),
          )
        ).status,
      ).toBe(404);
    }
  });

  it("a customer's inbound messages and conversation answer on both members, by either form of the number, with the same credentials and roles (forwarded to the owner)", async () => {
    const answers = [];
    for (const member of members) {
      for (const customer of [ALICE, ALICE.slice(1)]) {
        const inbound = await get(
          member.address!,
          `/inbound?customer=${encodeURIComponent(customer)}`,
          authHeaders('operator'),
        );
        expect(inbound.status).toBe(200);
        expect(inbound.body.messages).toEqual([
          expect.objectContaining({
            customer: ALICE.slice(1),
            from: ALICE,
            text: 'hi',
            at: new Date(1763632800_000).toISOString(),
          }),
        ]);
        const thread = await get(
          member.address!,
          `/thread?customer=${encodeURIComponent(customer)}&limit=100`,
          authHeaders('operator'),
        );
        expect(thread.status).toBe(200);
        answers.push(thread.body);
      }
      // The read role: the same conversation, the numbers masked.
      const masked = await get(
        member.address!,
        `/thread?customer=${encodeURIComponent(ALICE)}&limit=100`,
        authHeaders('read'),
      );
      expect(masked.status).toBe(200);
      expect(JSON.stringify(masked.body)).not.toContain(ALICE.slice(2));
      expect(
        (masked.body.items as { direction: string; inbound?: { from: string } }[]).find(
          (i) => i.direction === 'inbound',
        )?.inbound?.from,
      ).toBe('+1555•••7777');
      // By a message id too (what the console links to when numbers are masked).
      expect(
        (await get(member.address!, `/thread?recipientOf=${ids[4]}&limit=100`, authHeaders('read'))).body.items,
      ).toEqual(masked.body.items);
    }
    // Every member, either form: one answer. The customer wrote before every message went out.
    for (const answer of answers.slice(1))
      expect({ ...answer, customer: undefined }).toEqual({ ...answers[0], customer: undefined });
    const items = answers[0]!.items as { direction: string; message?: { messageId: string } }[];
    expect(items).toHaveLength(13);
    expect(items.map((i) => i.direction)).toEqual([...Array(12).fill('outbound'), 'inbound']);
    expect(items.slice(0, 12).map((i) => i.message!.messageId)).toEqual([...ids].reverse());
    expect(answers[0]!.next).toBeNull();
    // Bad input: one clear error each.
    expect(await get(members[0]!.address!, '/inbound', authHeaders('read'))).toMatchObject({
      status: 400,
      body: { error: 'INVALID_ARGUMENT', message: expect.stringMatching(/\?customer=/) },
    });
    expect(await get(members[0]!.address!, `/thread?customer=${ALICE}&limit=0`, authHeaders('read'))).toMatchObject({
      status: 400,
      body: { message: 'limit must be an integer from 1 to 100' },
    });
    expect(
      await get(members[0]!.address!, `/thread?customer=${ALICE}&before=nope!`, authHeaders('read')),
    ).toMatchObject({ status: 400, body: { message: expect.stringMatching(/not a cursor/) } });
  });

  it('a read-only caller cannot redrive (403, logged); an operator gets the dry run of the same code as msgbridge dlq', async () => {
    const base = members[0]!.address!;
    const topic = config.kafka.topics.sendRequestsDlq;
    await produce(topic, [
      {
        key: 'r1',
        value: '{"not":"a request"',
        headers: { 'error-reason': 'not valid JSON', 'error-code': 'RELAY_INVALID_JSON', 'business-id': 'biz_1' },
      },
    ]);
    const post = (headers: Record<string, string>, body: unknown) =>
      fetch(`${base}/dlq/${topic}/redrive`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: JSON.stringify(body),
      });
    const readOnly = await post(authHeaders('read'), { dryRun: true });
    expect(readOnly.status).toBe(403);
    expect(await readOnly.json()).toMatchObject({
      error: 'FORBIDDEN',
      message: expect.stringMatching(/operator role; test-reader has the read role/),
    });
    expect((await post({}, { dryRun: false })).status).toBe(401);
    expect(logText).toMatch(/"caller":"test-reader".*tracker access refused: the operator role is needed/);
    const stats = await get(base, `/dlq/${topic}/stats`, authHeaders('read'));
    expect(stats).toMatchObject({ status: 200, body: { records: 1, byCode: { RELAY_INVALID_JSON: { count: 1 } } } });
    const records = await get(base, `/dlq/${topic}/records?code=RELAY_INVALID_JSON`, authHeaders('read'));
    expect(records.body).toMatchObject({
      records: [{ code: 'RELAY_INVALID_JSON', business: 'biz_1', value: '{"not":"a request"' }],
      next: null,
    });
    const plan = await post(authHeaders('operator'), { filter: { code: 'RELAY_INVALID_JSON' }, dryRun: true });
    expect(plan.status).toBe(200);
    expect(await plan.json()).toMatchObject({
      dryRun: true,
      selected: 1,
      produced: {},
      failing: { RELAY_INVALID_JSON: 1 },
    });
    expect((await post(authHeaders('operator'), { dryRun: 'yes' })).status).toBe(400);
    expect(
      (
        await fetch(`${base}/dlq/${topic}/redrive`, {
          method: 'POST',
          headers: { ...authHeaders('operator'), 'content-type': 'text/plain' },
          body: '{}',
        })
      ).status,
    ).toBe(415);
    expect((await get(base, '/dlq/not-a-dlq/stats', authHeaders('operator'))).status).toBe(404);
  });

  it('the tokens file is reloaded live: a new token works, an invalid file keeps the last good set (said once), a removed token is refused', async () => {
    const base = members[0]!.address!;
    const bearer = (token: string) => ({ authorization: `Bearer ${token}` });
    expect((await get(base, '/me', bearer(FILE_TOKEN))).body).toMatchObject({ name: 'from-file', role: 'read' });
    expect((await get(base, '/me', bearer(LATER_TOKEN))).status).toBe(401);
    writeFileSync(tokensFile, JSON.stringify([{ name: 'later', role: 'operator', sha256: sha256(LATER_TOKEN) }]));
    await until('the new token', async () => (await get(base, '/me', bearer(LATER_TOKEN))).status === 200, 15_000);
    expect((await get(base, '/me', bearer(FILE_TOKEN))).status).toBe(401);
    // The configured tokens stay whatever the file says.
    expect((await get(base, '/me', authHeaders('read'))).status).toBe(200);

    writeFileSync(tokensFile, '[{"name": "broken", "role": "admin"');
    await until(
      'the refusal',
      async () => logText.split('\n').filter((l) => l.includes('tracker tokens file refused')).length >= members.length,
      15_000,
    );
    await new Promise((r) => setTimeout(r, 4500));
    // Once per member, not at every poll; the last good set stays in force.
    expect(logText.split('\n').filter((l) => l.includes('tracker tokens file refused'))).toHaveLength(members.length);
    expect((await get(base, '/me', bearer(LATER_TOKEN))).status).toBe(200);

    writeFileSync(tokensFile, '[]');
    await until('the token removed', async () => (await get(base, '/me', bearer(LATER_TOKEN))).status === 401, 15_000);
    expect(logText).toContain('tracker tokens file reloaded');
    for (const secret of [
      TEST_TOKENS.operator,
      TEST_TOKENS.read,
      FILE_TOKEN,
      LATER_TOKEN,
      sha256(FILE_TOKEN),
      sha256(LATER_TOKEN),
    ])
      expect(logText).not.toContain(secret);
  });
});
