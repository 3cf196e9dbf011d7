import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { deliveryStatusEventSchema, inboundMessageEventSchema } from '../../src/contracts/index.js';
import type { MessageRecord, RunningSimulator } from '../../src/simulator/index.js';
import { hmacBase64 } from '../helpers/signing.js';
import {
  BIZ,
  call,
  eventually,
  inbound,
  register,
  sendTemplate,
  sendText,
  sleep,
  startReceiver,
  withSimulator,
  type Receiver,
} from './helpers.js';

interface StatusEvent {
  topic: string;
  timestamp: string;
  sender: { channelType: string; id: string };
  recipient: { channelType: string; id: string };
  statusUpdate: { id: string; status: string; error: Record<string, unknown> | null };
}

const CUSTOMER = '+15550002222';

describe('simulator: delivery status lifecycle', () => {
  let sim: RunningSimulator;
  let receiver: Receiver;
  // The simulator's clock: real time plus a jump the window test makes, so that no test races
  // the conversation window on a slow machine (the status delays stay real: settle waits on them).
  let jumpedMs = 0;
  const WINDOW_MS = 60_000;

  beforeAll(async () => {
    receiver = await startReceiver();
    sim = await withSimulator({
      lifecycle: { sentDelayMs: 10, deliveredDelayMs: 20, readDelayMs: 30, conversationWindowMs: WINDOW_MS },
      now: () => Date.now() + jumpedMs,
      recipients: {
        notOnWhatsapp: ['+15550000404'],
        optedOut: ['+15550000403'],
        neverReads: ['+15550000202'],
        blocked: ['+15550000410'],
      },
      templates: { order_update: { variables: ['order'] }, appointment: { variables: ['name', 'date'] } },
    });
    await register(sim, 'delivery_status', `${receiver.url}/hooks/status`);
    await register(sim, 'messages', `${receiver.url}/hooks/messages`);
  });
  afterAll(async () => {
    await sim.close();
    await receiver.close();
  });
  afterEach(() => {
    receiver.requests.length = 0;
  });

  /** Status events received for one message, in arrival order, each checked against the contract. */
  const statusEvents = (messageId: string): StatusEvent[] =>
    receiver.requests
      .filter((r) => r.url === '/hooks/status')
      .map((r) => JSON.parse(r.body.toString('utf8')) as StatusEvent)
      .filter((e) => e.statusUpdate.id === messageId)
      .map((e) => {
        deliveryStatusEventSchema.parse(e);
        return e;
      });

  const settle = () => sim.idle(5000);

  it('reports sent → delivered → read for a text in an open window, each event signed and shaped as in the spec', async () => {
    await inbound(sim, CUSTOMER, 'hello, I need help');
    const created = await sendText(sim, CUSTOMER, 'how can we help?');
    expect(created.status).toBe(200);
    const id = (created.body as { id: string }).id;
    await settle();

    const events = statusEvents(id);
    expect(events.map((e) => e.statusUpdate.status)).toEqual(['sent', 'delivered', 'read']);
    for (const event of events) {
      expect(Object.keys(event)).toEqual(['topic', 'timestamp', 'sender', 'recipient', 'statusUpdate']);
      expect(event.topic).toBe('delivery_status');
      expect(event.timestamp).toMatch(/^\d+$/);
      expect(Math.abs(Number(event.timestamp) - Date.now() / 1000)).toBeLessThan(5);
      expect(event.sender).toEqual({ channelType: 'whatsapp', id: BIZ.number });
      expect(event.recipient).toEqual({ channelType: 'whatsapp', id: CUSTOMER });
      expect(event.statusUpdate).toEqual({ id, status: event.statusUpdate.status, error: null });
    }
    for (const request of receiver.requests) {
      expect(request.method).toBe('POST');
      expect(request.headers['content-type']).toBe('text/plain; charset=utf-8');
      expect(request.headers['content-length']).toBe(String(request.body.length));
      expect(request.headers['accept-encoding']).toBe('gzip');
      expect(request.headers['x-service-hmac-sha256']).toBe(hmacBase64(BIZ.signingSecret, request.body));
    }

    const message = (await call<MessageRecord>(`${sim.url}/sim/messages/${id}`)).body;
    expect(message).toMatchObject({
      id,
      businessId: BIZ.id,
      operation: 'text',
      recipient: CUSTOMER,
      plan: 'read',
      status: 'read',
    });
    expect(message.history.map((h) => h.status)).toEqual(['sent', 'delivered', 'read']);
    const times = message.history.map((h) => Date.parse(h.at));
    expect(times[1]! - times[0]!).toBeGreaterThanOrEqual(15);
    expect(times[2]! - times[1]!).toBeGreaterThanOrEqual(25);
  });

  it('delivers the inbound message itself: no topic field, the customer as sender, signed', async () => {
    const answer = await call<{ eventId: string; deliveries: number }>(`${sim.url}/sim/businesses/${BIZ.id}/inbound`, {
      body: { from: '+15550007777', text: 'Is the store open?', name: 'Ana' },
    });
    expect(answer.status).toBe(200);
    expect(answer.body.deliveries).toBe(1);
    const [request] = await receiver.waitFor(1);
    expect(request!.url).toBe('/hooks/messages');
    const event = JSON.parse(request!.body.toString('utf8')) as Record<string, unknown>;
    inboundMessageEventSchema.parse(event);
    expect(event).toEqual({
      timestamp: expect.stringMatching(/^\d+$/),
      sender: { channelType: 'whatsapp', id: '+15550007777', name: 'Ana' },
      recipient: { channelType: 'whatsapp', id: BIZ.number },
      message: { text: 'Is the store open?' },
    });
    expect('topic' in event).toBe(false);
    expect(request!.headers['x-service-hmac-sha256']).toBe(hmacBase64(BIZ.signingSecret, request!.body));
    const { createHash } = await import('node:crypto');
    expect(answer.body.eventId).toBe(createHash('sha256').update(request!.body).digest('hex'));
  });

  it('a customer who wrote as 1555… may be sent a text as +1555… (and the other way round): one customer, two forms', async () => {
    await inbound(sim, '15550005551');
    await inbound(sim, '+15550005552');
    const plus = ((await sendText(sim, '+15550005551')).body as { id: string }).id;
    const bare = ((await sendText(sim, '15550005552')).body as { id: string }).id;
    const other = ((await sendText(sim, '+15550005553')).body as { id: string }).id;
    await settle();
    expect(statusEvents(plus).map((e) => e.statusUpdate.status)).toEqual(['sent', 'delivered', 'read']);
    expect(statusEvents(bare).map((e) => e.statusUpdate.status)).toEqual(['sent', 'delivered', 'read']);
    expect(statusEvents(other).map((e) => e.statusUpdate.error?.code)).toEqual([
      'ERROR_CODE_MESSAGE_CUSTOMER_NO_CONVERSATION_INITIATION',
    ]);
    // The recipient behaviours too: +15550000404 is not on WhatsApp, written either way.
    const template = (
      (await sendTemplate(sim, '15550000404', 'order_update', [{ name: 'order', value: '1' }])).body as { id: string }
    ).id;
    await settle();
    expect(statusEvents(template).map((e) => e.statusUpdate.error?.code)).toEqual([
      'ERROR_CODE_PHONE_NUMBER_NOT_ON_WHATSAPP',
    ]);
  });

  it('sends a button reply: isButtonResponse, the button text, its payload in callbackData; it opens the window like a text', async () => {
    const customer = '+15550006661';
    const answer = await call<{ eventId: string; deliveries: number }>(`${sim.url}/sim/businesses/${BIZ.id}/inbound`, {
      body: { from: customer, text: 'Yes, confirm', button: { payload: 'confirm-order-42' } },
    });
    expect(answer.status).toBe(200);
    const [request] = await receiver.waitFor(1);
    const event = JSON.parse(request!.body.toString('utf8')) as Record<string, unknown>;
    inboundMessageEventSchema.parse(event);
    expect(event).toEqual({
      timestamp: expect.stringMatching(/^\d+$/),
      sender: { channelType: 'whatsapp', id: customer },
      recipient: { channelType: 'whatsapp', id: BIZ.number },
      message: { text: 'Yes, confirm' },
      isButtonResponse: true,
      callbackData: 'confirm-order-42',
    });
    const id = ((await sendText(sim, customer)).body as { id: string }).id;
    await settle();
    expect(statusEvents(id).map((e) => e.statusUpdate.status)).toEqual(['sent', 'delivered', 'read']);
    // Without a payload: the flag alone.
    receiver.requests.length = 0;
    await call(`${sim.url}/sim/businesses/${BIZ.id}/inbound`, { body: { from: customer, text: 'No', button: {} } });
    const [second] = await receiver.waitFor(1);
    const plain = JSON.parse(second!.body.toString('utf8')) as Record<string, unknown>;
    expect(plain.isButtonResponse).toBe(true);
    expect('callbackData' in plain).toBe(false);
    const bad = await call<{ message: string }>(`${sim.url}/sim/businesses/${BIZ.id}/inbound`, {
      body: { from: customer, text: 'x', button: { payload: '' } },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.message).toBe('invalid inbound message: button.payload: a button payload must not be empty');
  });

  it('fails a text to a customer who never wrote: NO_CONVERSATION_INITIATION, with the full error object', async () => {
    const id = ((await sendText(sim, '+15550003333')).body as { id: string }).id;
    await settle();
    const events = statusEvents(id);
    expect(events.map((e) => e.statusUpdate.status)).toEqual(['delivery_failed']);
    const error = events[0]!.statusUpdate.error!;
    expect(Object.keys(error).sort()).toEqual([
      'cntTraceId',
      'code',
      'details',
      'message',
      'type',
      'userMessage',
      'userTitle',
    ]);
    expect(error).toMatchObject({
      code: 'ERROR_CODE_MESSAGE_CUSTOMER_NO_CONVERSATION_INITIATION',
      type: 'ERROR_TYPE_INVALID_REQUEST',
    });
    expect(sim.message(id)).toMatchObject({ plan: 'failed', status: 'delivery_failed' });
  });

  it('fails a text once the window has closed (OUTSIDE_OF_ELIGIBILITY_WINDOW); a new inbound message reopens it', async () => {
    const customer = '+15550004444';
    await inbound(sim, customer);
    jumpedMs = WINDOW_MS + 1;
    const late = ((await sendText(sim, customer)).body as { id: string }).id;
    jumpedMs = 0;
    await inbound(sim, customer);
    const reopened = ((await sendText(sim, customer)).body as { id: string }).id;
    await settle();
    expect(statusEvents(late).map((e) => [e.statusUpdate.status, e.statusUpdate.error?.code])).toEqual([
      ['delivery_failed', 'ERROR_CODE_MESSAGE_OUTSIDE_OF_ELIGIBILITY_WINDOW'],
    ]);
    expect(statusEvents(reopened).map((e) => e.statusUpdate.status)).toEqual(['sent', 'delivered', 'read']);
  });

  it('lets a template reach a customer without a window, and does not open one', async () => {
    const customer = '+15550005555';
    const template = (
      (await sendTemplate(sim, customer, 'order_update', [{ name: 'order', value: '42' }])).body as { id: string }
    ).id;
    const text = ((await sendText(sim, customer)).body as { id: string }).id;
    await settle();
    expect(statusEvents(template).map((e) => e.statusUpdate.status)).toEqual(['sent', 'delivered', 'read']);
    expect(statusEvents(text).map((e) => e.statusUpdate.error?.code)).toEqual([
      'ERROR_CODE_MESSAGE_CUSTOMER_NO_CONVERSATION_INITIATION',
    ]);
  });

  it('fails an unknown template (TEMPLATE_NOT_FOUND)', async () => {
    const id = ((await sendTemplate(sim, CUSTOMER, 'no_such_template', [])).body as { id: string }).id;
    await settle();
    const events = statusEvents(id);
    expect(events.map((e) => [e.statusUpdate.status, e.statusUpdate.error?.code])).toEqual([
      ['delivery_failed', 'ERROR_CODE_MESSAGE_TEMPLATE_NOT_FOUND'],
    ]);
    expect(events[0]!.statusUpdate.error!.message).toContain('no_such_template');
  });

  it.each([
    ['a missing variable', [{ name: 'name', value: 'Ana' }], 'missing "date"'],
    [
      'an unknown variable',
      [
        { name: 'name', value: 'Ana' },
        { name: 'date', value: 'Mon' },
        { name: 'room', value: '3' },
      ],
      'unknown "room"',
    ],
    [
      'a variable given twice',
      [
        { name: 'name', value: 'Ana' },
        { name: 'name', value: 'Ben' },
        { name: 'date', value: 'Mon' },
      ],
      'given twice',
    ],
    [
      'an empty value',
      [
        { name: 'name', value: '' },
        { name: 'date', value: 'Mon' },
      ],
      '"name" is empty',
    ],
  ])('fails template parameters with %s (TEMPLATE_INPUT_INVALID)', async (_, parameters, reason) => {
    const id = ((await sendTemplate(sim, CUSTOMER, 'appointment', parameters)).body as { id: string }).id;
    await settle();
    const events = statusEvents(id);
    expect(events.map((e) => [e.statusUpdate.status, e.statusUpdate.error?.code])).toEqual([
      ['delivery_failed', 'ERROR_CODE_MESSAGE_TEMPLATE_INPUT_INVALID'],
    ]);
    expect(events[0]!.statusUpdate.error!.message).toContain(reason);
  });

  it('accepts matching parameters in any order', async () => {
    const id = (
      (
        await sendTemplate(sim, CUSTOMER, 'appointment', [
          { name: 'date', value: 'Mon' },
          { name: 'name', value: 'Ana' },
        ])
      ).body as { id: string }
    ).id;
    await settle();
    expect(statusEvents(id).map((e) => e.statusUpdate.status)).toEqual(['sent', 'delivered', 'read']);
  });

  it('applies the recipient behaviours: not on WhatsApp, opted out, never reads, blocked', async () => {
    const send = async (to: string) =>
      ((await sendTemplate(sim, to, 'order_update', [{ name: 'order', value: '1' }])).body as { id: string }).id;
    const notOnWhatsapp = await send('+15550000404');
    const optedOut = await send('+15550000403');
    const neverReads = await send('+15550000202');
    const blocked = await send('+15550000410');
    await settle();
    await sleep(60); // longer than every remaining delay: nothing more may come
    expect(statusEvents(notOnWhatsapp).map((e) => [e.statusUpdate.status, e.statusUpdate.error?.code])).toEqual([
      ['delivery_failed', 'ERROR_CODE_PHONE_NUMBER_NOT_ON_WHATSAPP'],
    ]);
    expect(statusEvents(optedOut).map((e) => e.statusUpdate.error?.code)).toEqual([
      'ERROR_CODE_MESSAGE_CUSTOMER_OPTED_OUT',
    ]);
    expect(statusEvents(neverReads).map((e) => e.statusUpdate.status)).toEqual(['sent', 'delivered']);
    expect(statusEvents(blocked).map((e) => e.statusUpdate.status)).toEqual(['sent']);
    expect(sim.message(neverReads)).toMatchObject({ plan: 'delivered_never_read', status: 'delivered' });
    expect(sim.message(blocked)).toMatchObject({ plan: 'stays_sent', status: 'sent' });
  });

  it('echoes callbackData of the send on its status events', async () => {
    await inbound(sim, CUSTOMER);
    const id = ((await sendText(sim, CUSTOMER, 'with callback', { callbackData: 'order-42' })).body as { id: string })
      .id;
    await settle();
    const events = statusEvents(id);
    expect(events).toHaveLength(3);
    for (const event of events) expect((event as unknown as { callbackData: string }).callbackData).toBe('order-42');
  });

  it('produces no webhook events for channels other than WhatsApp', async () => {
    const answer = await call<{ id: string }>(`${sim.url}/v1/businesses/${BIZ.id}/send/messages`, {
      headers: { 'content-type': 'application/json', 'x-api-key': BIZ.apiKey },
      body: { recipient: { channelType: 'sms', id: CUSTOMER }, message: { text: 'sms' } },
    });
    expect(answer.status).toBe(200);
    await settle();
    await sleep(50);
    expect(statusEvents(answer.body.id)).toEqual([]);
    expect(sim.message(answer.body.id)).toMatchObject({ plan: 'no_events', history: [] });
  });

  it('sends each topic only to the addresses registered for it, and to every one of them', async () => {
    const second = await startReceiver();
    try {
      await register(sim, 'delivery_status', `${second.url}/other`);
      await inbound(sim, '+15550008888');
      const id = ((await sendText(sim, '+15550008888')).body as { id: string }).id;
      await settle();
      await eventually(() => (second.requests.length >= 3 ? true : undefined));
      expect(second.events().map((e) => (e.statusUpdate as { id: string }).id)).toEqual([id, id, id]);
      expect(statusEvents(id)).toHaveLength(3);
      expect(receiver.requests.filter((r) => r.url === '/hooks/messages')).toHaveLength(1);
    } finally {
      const other = sim.webhooks(BIZ.id).find((w) => w.address.startsWith(second.url));
      await call(`${sim.url}/v1/businesses/${BIZ.id}/webhooks/${other!.id}`, {
        method: 'DELETE',
        headers: { 'x-api-key': BIZ.apiKey },
      });
      await second.close();
    }
  });

  it('refuses an inbound message for an unknown business or with bad fields', async () => {
    expect((await call(`${sim.url}/sim/businesses/nope/inbound`, { body: { from: CUSTOMER, text: 'x' } })).status).toBe(
      404,
    );
    const bad = await call<{ message: string }>(`${sim.url}/sim/businesses/${BIZ.id}/inbound`, {
      body: { from: 'abc', text: '' },
    });
    expect(bad.status).toBe(400);
    expect(bad.body.message).toContain('from');
    expect(bad.body.message).toContain('text');
    expect((await call(`${sim.url}/sim/messages/01ARZ3NDEKTSV4RRFFQ69G5FAV`)).status).toBe(404);
  });
});
