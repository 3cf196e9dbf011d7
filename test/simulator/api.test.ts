import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodeTime, isValid } from 'ulid';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { providerErrorSchema } from '../../src/contracts/index.js';
import { isMsgbridgeError } from '../../src/platform/errors.js';
import { startSimulator, type RunningSimulator } from '../../src/simulator/index.js';
import { apiHeaders, BIZ, call, fastOptions, OTHER, register, sendTemplate, withSimulator } from './helpers.js';

const TEXT_PATH = `/v1/businesses/${BIZ.id}/send/messages`;
const TEMPLATE_PATH = `/v1/businesses/${BIZ.id}/send/whatsapp_templated_messages`;
const textBody = { recipient: { channelType: 'whatsapp', id: '+15550002222' }, message: { text: 'hello' } };

/** The provider's error shape, every field present. */
function expectProviderError(body: unknown, code: string) {
  const parsed = providerErrorSchema.parse(body);
  expect(parsed.code).toBe(code);
  expect(Object.keys(body as object).sort()).toEqual([
    'cntTraceId',
    'code',
    'details',
    'message',
    'type',
    'userMessage',
    'userTitle',
  ]);
  expect(parsed.cntTraceId).toMatch(/^\d{10,}$/);
  expect(parsed.userMessage).toContain(parsed.cntTraceId);
  return parsed;
}

describe('simulator: the provider operations', () => {
  let sim: RunningSimulator;
  beforeAll(async () => {
    sim = await withSimulator({ maxBodyBytes: 4096 });
  });
  afterAll(() => sim.close());

  it('listens on a free port and says where', () => {
    expect(sim.port).toBeGreaterThan(0);
    expect(sim.url).toBe(`http://127.0.0.1:${sim.port}`);
  });

  it('creates a text message: 200 with a ULID id, recorded as a send', async () => {
    const before = Date.now();
    const answer = await call<{ id: string }>(`${sim.url}${TEXT_PATH}`, { headers: apiHeaders(), body: textBody });
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toBe('application/json');
    expect(Object.keys(answer.body)).toEqual(['id']);
    expect(answer.body.id).toHaveLength(26);
    expect(isValid(answer.body.id)).toBe(true);
    expect(decodeTime(answer.body.id)).toBeGreaterThanOrEqual(before - 1);
    const sends = await call<Record<string, unknown>[]>(`${sim.url}/sim/sends`);
    expect(sends.body.at(-1)).toMatchObject({
      businessId: BIZ.id,
      operation: 'text',
      status: 200,
      messageId: answer.body.id,
      body: textBody,
      errorCode: null,
    });
  });

  it('creates a template message and gives every message its own sortable id', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 5; i += 1) {
      const answer = await sendTemplate(sim, '+15550002222', 'order_update', [{ name: 'order', value: String(i) }]);
      expect(answer.status).toBe(200);
      ids.push((answer.body as { id: string }).id);
    }
    expect(new Set(ids).size).toBe(5);
    expect([...ids].sort()).toEqual(ids);
    const sends = (await call<{ operation: string; messageId: string }[]>(`${sim.url}/sim/sends`)).body;
    expect(sends.slice(-5).map((s) => [s.operation, s.messageId])).toEqual(ids.map((id) => ['template', id]));
  });

  it('passes unknown optional fields through (callbackData, campaignName, language)', async () => {
    const answer = await call(`${sim.url}${TEMPLATE_PATH}`, {
      headers: apiHeaders(),
      body: {
        parameters: [{ name: 'name', value: 'Ana' }],
        number: '+15550002222',
        templateName: 'welcome',
        language: 'en',
        campaignName: 'spring',
        callbackData: 'x',
      },
    });
    expect(answer.status).toBe(200);
  });

  it.each([
    ['missing', {}, 'ERROR_CODE_API_KEY_MISSING'],
    ['wrong', { 'x-api-key': 'not-the-key' }, 'ERROR_CODE_API_KEY_INVALID'],
    ["another business's", { 'x-api-key': OTHER.apiKey }, 'ERROR_CODE_API_KEY_INVALID'],
  ])('answers 401 in the error shape to a %s API key', async (_, key, code) => {
    const answer = await call(`${sim.url}${TEXT_PATH}`, {
      headers: { 'content-type': 'application/json', ...key },
      body: textBody,
    });
    expect(answer.status).toBe(401);
    expect(expectProviderError(answer.body, code).type).toBe('ERROR_TYPE_UNAUTHENTICATED');
  });

  it('answers 401 (not 404) for an unknown business, without revealing which ids exist', async () => {
    const answer = await call(`${sim.url}/v1/businesses/biz_unknown/send/messages`, {
      headers: apiHeaders(),
      body: textBody,
    });
    expect(answer.status).toBe(401);
    expectProviderError(answer.body, 'ERROR_CODE_API_KEY_INVALID');
    const sends = (await call<{ businessId: string; status: number }[]>(`${sim.url}/sim/sends`)).body;
    expect(sends.at(-1)).toMatchObject({ businessId: 'biz_unknown', status: 401 });
  });

  it('answers 400 naming the field when the body does not match', async () => {
    const cases: [unknown, string, string, string][] = [
      [
        { ...textBody, recipient: { channelType: 'whatsapp', id: '555-CALL-ME' } },
        TEXT_PATH,
        'recipient.id',
        'ERROR_CODE_PHONE_NUMBER_BAD_FORMAT',
      ],
      [{ recipient: textBody.recipient }, TEXT_PATH, 'message', 'ERROR_CODE_REQUEST_FIELD_INVALID'],
      [{ ...textBody, message: { text: 42 } }, TEXT_PATH, 'message.text', 'ERROR_CODE_REQUEST_FIELD_INVALID'],
      [{ ...textBody, message: { text: '   ' } }, TEXT_PATH, 'message.text', 'ERROR_CODE_MESSAGE_TEXT_EMPTY'],
      [
        { number: '+15550002222', templateName: 'welcome' },
        TEMPLATE_PATH,
        'parameters',
        'ERROR_CODE_REQUEST_FIELD_INVALID',
      ],
      [
        { parameters: [], number: 'abc', templateName: 'welcome' },
        TEMPLATE_PATH,
        'number',
        'ERROR_CODE_PHONE_NUMBER_BAD_FORMAT',
      ],
      [
        { parameters: [{ name: 'name' }], number: '+15550002222', templateName: 'welcome' },
        TEMPLATE_PATH,
        'parameters.0.value',
        'ERROR_CODE_REQUEST_FIELD_INVALID',
      ],
      [
        { parameters: [], number: '+15550002222', templateName: '' },
        TEMPLATE_PATH,
        'templateName',
        'ERROR_CODE_REQUEST_FIELD_INVALID',
      ],
    ];
    for (const [body, path, field, code] of cases) {
      const answer = await call(`${sim.url}${path}`, { headers: apiHeaders(), body });
      expect(answer.status, field).toBe(400);
      const error = expectProviderError(answer.body, code);
      expect(error.type).toBe('ERROR_TYPE_INVALID_REQUEST');
      expect(error.message.startsWith(`${field}: `), error.message).toBe(true);
      expect(error.details).toMatchObject({ field });
    }
  });

  it('answers 400 to a body that is not JSON, or not an object', async () => {
    for (const rawBody of ['{"recipient":', 'null', '[1,2]', '']) {
      const answer = await call(`${sim.url}${TEXT_PATH}`, { headers: apiHeaders(), rawBody });
      expect(answer.status, rawBody).toBe(400);
      expectProviderError(answer.body, 'ERROR_CODE_REQUEST_BODY_INVALID');
    }
    const sends = (await call<{ body: unknown; status: number }[]>(`${sim.url}/sim/sends`)).body;
    expect(sends.at(-1)).toMatchObject({ status: 400, body: null });
  });

  it('answers 415 to a body that is not declared as JSON', async () => {
    for (const contentType of ['text/plain', 'application/x-www-form-urlencoded', undefined]) {
      const headers = { 'x-api-key': BIZ.apiKey, ...(contentType ? { 'content-type': contentType } : {}) };
      const answer = await fetch(`${sim.url}${TEXT_PATH}`, {
        method: 'POST',
        headers,
        body: Buffer.from(JSON.stringify(textBody)),
      });
      expect(answer.status, String(contentType)).toBe(415);
      expectProviderError(await answer.json(), 'ERROR_CODE_CONTENT_TYPE_UNSUPPORTED');
    }
    const ok = await call(`${sim.url}${TEXT_PATH}`, {
      headers: { ...apiHeaders(), 'content-type': 'application/json; charset=utf-8' },
      body: textBody,
    });
    expect(ok.status).toBe(200);
  });

  it('answers 413 to a body over the limit, declared or streamed', async () => {
    const big = JSON.stringify({ ...textBody, message: { text: 'x'.repeat(5000) } });
    const declared = await fetch(`${sim.url}${TEXT_PATH}`, { method: 'POST', headers: apiHeaders(), body: big });
    expect(declared.status).toBe(413);
    expectProviderError(await declared.json(), 'ERROR_CODE_REQUEST_TOO_LARGE');
    const chunks = [Buffer.from(big.slice(0, 3000)), Buffer.from(big.slice(3000))];
    const streamed = await fetch(`${sim.url}${TEXT_PATH}`, {
      method: 'POST',
      headers: apiHeaders(),
      body: new ReadableStream({
        start(controller) {
          for (const chunk of chunks) controller.enqueue(chunk);
          controller.close();
        },
      }),
      duplex: 'half',
    } as RequestInit);
    expect(streamed.status).toBe(413);
  });

  it('answers 404 to other paths and 405 (with Allow) to other methods, in the error shape', async () => {
    const notFound = await call(`${sim.url}/v1/businesses/${BIZ.id}/send/sms`, {
      headers: apiHeaders(),
      body: textBody,
    });
    expect(notFound.status).toBe(404);
    expectProviderError(notFound.body, 'ERROR_CODE_NOT_FOUND');
    const wrongMethod = await call(`${sim.url}${TEXT_PATH}`, { headers: apiHeaders() });
    expect(wrongMethod.status).toBe(405);
    expect(wrongMethod.headers.get('allow')).toBe('POST');
    expectProviderError(wrongMethod.body, 'ERROR_CODE_METHOD_NOT_ALLOWED');
    expect((await call(`${sim.url}/healthz`)).status).toBe(200);
  });
});

describe('simulator: webhook registrations', () => {
  let sim: RunningSimulator;
  beforeAll(async () => {
    sim = await withSimulator({ maxRegistrationsPerBusiness: 3 });
  });
  afterAll(() => sim.close());

  it('creates, is idempotent for the same topic and address, lists and deletes', async () => {
    const first = await register(sim, 'delivery_status', 'http://127.0.0.1:9/a');
    expect(first.status).toBe(200);
    expect(first.body).toMatchObject({ businessId: BIZ.id, topic: 'delivery_status', address: 'http://127.0.0.1:9/a' });
    const again = await register(sim, 'delivery_status', 'http://127.0.0.1:9/a');
    expect(again.body).toEqual(first.body);
    const otherTopic = await register(sim, 'messages', 'http://127.0.0.1:9/a');
    expect((otherTopic.body as { id: string }).id).not.toBe((first.body as { id: string }).id);
    await register(sim, 'messages', 'http://127.0.0.1:9/b', OTHER);

    const list = await call<{ webhooks: { id: string; topic: string }[] }>(
      `${sim.url}/v1/businesses/${BIZ.id}/webhooks`,
      { headers: apiHeaders() },
    );
    expect(list.status).toBe(200);
    expect(list.body.webhooks.map((w) => w.topic)).toEqual(['delivery_status', 'messages']);

    const id = (first.body as { id: string }).id;
    const removed = await call(`${sim.url}/v1/businesses/${BIZ.id}/webhooks/${id}`, {
      method: 'DELETE',
      headers: apiHeaders(),
    });
    expect(removed.status).toBe(200);
    expect(removed.body).toEqual(first.body);
    const gone = await call(`${sim.url}/v1/businesses/${BIZ.id}/webhooks/${id}`, {
      method: 'DELETE',
      headers: apiHeaders(),
    });
    expect(gone.status).toBe(404);
    expectProviderError(gone.body, 'ERROR_CODE_NOT_FOUND');
    const after = await call<{ webhooks: { id: string }[] }>(`${sim.url}/v1/businesses/${BIZ.id}/webhooks`, {
      headers: apiHeaders(),
    });
    expect(after.body.webhooks.map((w) => w.id)).toEqual([(otherTopic.body as { id: string }).id]);
    // A business cannot delete another business's registration.
    const foreign = sim.webhooks(OTHER.id)[0]!;
    expect(
      (
        await call(`${sim.url}/v1/businesses/${BIZ.id}/webhooks/${foreign.id}`, {
          method: 'DELETE',
          headers: apiHeaders(),
        })
      ).status,
    ).toBe(404);
    expect(sim.webhooks(OTHER.id)).toHaveLength(1);
  });

  it('requires the API key for create, list and delete', async () => {
    const noKey = { 'content-type': 'application/json' };
    expect(
      (
        await call(`${sim.url}/v1/businesses/${BIZ.id}/create/webhooks`, {
          headers: noKey,
          body: { topic: 'messages', address: 'http://x.test/' },
        })
      ).status,
    ).toBe(401);
    expect((await call(`${sim.url}/v1/businesses/${BIZ.id}/webhooks`, { headers: apiHeaders('nope') })).status).toBe(
      401,
    );
    expect(
      (await call(`${sim.url}/v1/businesses/${BIZ.id}/webhooks/whatever`, { method: 'DELETE', headers: noKey })).status,
    ).toBe(401);
  });

  it('validates the registration, naming the field', async () => {
    for (const [body, field] of [
      [{ topic: 'status', address: 'http://127.0.0.1:9/' }, 'topic'],
      [{ topic: 'messages', address: 'not a url' }, 'address'],
      [{ topic: 'messages', address: 'ftp://127.0.0.1/x' }, 'address'],
      [{ topic: 'messages' }, 'address'],
    ] as const) {
      const answer = await call(`${sim.url}/v1/businesses/${BIZ.id}/create/webhooks`, { headers: apiHeaders(), body });
      expect(answer.status, field).toBe(400);
      expect(expectProviderError(answer.body, 'ERROR_CODE_REQUEST_FIELD_INVALID').details).toMatchObject({ field });
    }
  });

  it('bounds the registrations per business', async () => {
    await register(sim, 'messages', 'http://127.0.0.1:9/c');
    await register(sim, 'messages', 'http://127.0.0.1:9/d');
    const over = await register(sim, 'messages', 'http://127.0.0.1:9/e');
    expect(over.status).toBe(400);
    expectProviderError(over.body, 'ERROR_CODE_WEBHOOK_LIMIT_REACHED');
  });
});

describe('simulator: registrations file', () => {
  it('keeps registrations across a restart, and refuses a corrupt file with its name', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'msgbridge-sim-'));
    const file = join(dir, 'nested', 'registrations.json');
    const first = await startSimulator(fastOptions({ registrationsFile: file }));
    const created = (await register(first, 'delivery_status', 'http://127.0.0.1:9/hook')).body as { id: string };
    const deleted = (await register(first, 'messages', 'http://127.0.0.1:9/gone')).body as { id: string };
    await call(`${first.url}/v1/businesses/${BIZ.id}/webhooks/${deleted.id}`, {
      method: 'DELETE',
      headers: apiHeaders(),
    });
    await first.close();
    expect(JSON.parse(readFileSync(file, 'utf8'))).toMatchObject({ version: 1, registrations: [{ id: created.id }] });

    const second = await startSimulator(fastOptions({ registrationsFile: file }));
    try {
      const list = await call<{ webhooks: unknown[] }>(`${second.url}/v1/businesses/${BIZ.id}/webhooks`, {
        headers: apiHeaders(),
      });
      expect(list.body.webhooks).toEqual([created]);
    } finally {
      await second.close();
    }

    writeFileSync(file, '{"version":1,"registrations":[{"id":"x"}]}');
    const error = await startSimulator(fastOptions({ registrationsFile: file })).catch((e: unknown) => e);
    expect(isMsgbridgeError(error, 'CONFIG_INVALID')).toBe(true);
    expect((error as Error).message).toContain(file);
  });
});

describe('simulator: options', () => {
  it('refuses bad options with a message naming the field', async () => {
    const cases: [Parameters<typeof startSimulator>[0], string][] = [
      [{ ...fastOptions(), businesses: [] }, 'businesses'],
      [{ ...fastOptions(), businesses: [{ id: 'b', apiKey: '', signingSecret: 's' }] }, 'businesses.0.apiKey'],
      [fastOptions({ lifecycle: { sentDelayMs: -1 } }), 'simulator.lifecycle.sentDelayMs'],
      [fastOptions({ faults: { send429Rate: 3 } }), 'simulator.faults.send429Rate'],
    ];
    for (const [options, field] of cases) {
      const error = await startSimulator(options).catch((e: unknown) => e);
      expect(isMsgbridgeError(error, 'CONFIG_INVALID'), field).toBe(true);
      expect((error as Error).message).toContain(field);
    }
  });
});
