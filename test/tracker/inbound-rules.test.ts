import { describe, expect, it } from 'vitest';
import { INBOUND_LIMITS, inboundMessageEventSchema, inboundMessageRecordSchema } from '../../src/contracts/index.js';
import { inboundRecordFrom } from '../../src/tracker/inbound-rules.js';

const NOW = new Date('2026-11-27T10:00:00.000Z');
const meta = { eventId: 'e1', businessId: 'biz_1' };
const event = (
  extra: Record<string, unknown> = {},
  message: Record<string, unknown> = { text: 'Where is my order?' },
  sender: Record<string, unknown> = { channelType: 'whatsapp', id: '15550002222' },
) =>
  inboundMessageEventSchema.parse({
    timestamp: '1795168680',
    sender,
    recipient: { channelType: 'whatsapp', id: '+15550001111' },
    message,
    ...extra,
  });

describe('what the tracker keeps of an inbound message', () => {
  it("a text: who (the provider's form and the canonical one), when, what; the value parses back", () => {
    const record = inboundRecordFrom(
      event({}, { text: 'Where is my order?' }, { channelType: 'whatsapp', id: '+15550002222', name: 'Ada' }),
      meta,
      NOW,
    );
    expect(record).toEqual({
      eventId: 'e1',
      businessId: 'biz_1',
      customer: '15550002222',
      from: '+15550002222',
      name: 'Ada',
      channel: 'whatsapp',
      at: '2026-11-20T09:58:00.000Z',
      text: 'Where is my order?',
      button: null,
      attachments: [],
      truncated: false,
      recordedAt: '2026-11-27T10:00:00.000Z',
    });
    expect(inboundMessageRecordSchema.parse(JSON.parse(JSON.stringify(record)))).toEqual(record);
  });

  it.each([
    [
      'isButtonResponse and callbackData (the simulator)',
      event({ isButtonResponse: true, callbackData: 'confirm-42' }, { text: 'Yes' }),
      'Yes',
      'confirm-42',
    ],
    [
      'a message.button with its payload',
      event({}, { text: 'Yes', button: { payload: 'confirm-42' } }),
      'Yes',
      'confirm-42',
    ],
    ['a message.button with its text only', event({}, { button: { text: 'Yes', payload: 'p' } }), 'Yes', 'p'],
    [
      'isButtonResponse in message, payload in context',
      event({ context: { id: 'm0', payload: 'ctx-1' } }, { text: 'Yes', isButtonResponse: true }),
      'Yes',
      'ctx-1',
    ],
    ['isButtonResponse without a payload', event({ isButtonResponse: true }, { text: 'No' }), 'No', null],
  ])('a button reply: %s', (_, input, text, payload) => {
    const record = inboundRecordFrom(input, meta, NOW);
    expect(record.text).toBe(text);
    expect(record.button).toEqual({ payload });
  });

  it('callbackData or context alone do not make a text a button reply', () => {
    expect(inboundRecordFrom(event({ callbackData: 'cb-1', context: { payload: 'x' } }), meta, NOW).button).toBeNull();
  });

  it('an attachment or a location without text: their kinds, no text', () => {
    const record = inboundRecordFrom(
      event({ location: { lat: 1, lng: 2 } }, { attachment: { type: 'image', url: 'https://cdn.example/1.jpg' } }),
      meta,
      NOW,
    );
    expect(record.text).toBeNull();
    expect(record.attachments).toEqual(['image', 'location']);
    const many = inboundRecordFrom(
      event({ attachments: Array.from({ length: 9 }, () => ({ type: 'x'.repeat(40) })) }),
      meta,
      NOW,
    );
    expect(many.attachments).toHaveLength(INBOUND_LIMITS.attachments);
    expect(many.attachments[0]).toHaveLength(INBOUND_LIMITS.attachmentChars);
  });

  it('is bounded whatever the provider sent, and says when it cut', () => {
    const record = inboundRecordFrom(
      event(
        { isButtonResponse: true, callbackData: 'p'.repeat(5000) },
        { text: 't'.repeat(50_000) },
        { channelType: 'whatsapp', id: '1'.repeat(400), name: 'n'.repeat(500) },
      ),
      meta,
      NOW,
    );
    expect(record.text).toHaveLength(INBOUND_LIMITS.textChars);
    expect(record.text!.endsWith('…')).toBe(true);
    expect(record.button!.payload).toHaveLength(INBOUND_LIMITS.payloadChars);
    expect(record.name).toHaveLength(INBOUND_LIMITS.nameChars);
    expect(record.from).toHaveLength(INBOUND_LIMITS.fromChars);
    expect(record.truncated).toBe(true);
    expect(JSON.stringify(record).length).toBeLessThan(3000);
  });

  it('refuses an event without its ids, or with an unreadable time', () => {
    expect(() => inboundRecordFrom(event(), { eventId: '', businessId: 'biz_1' }, NOW)).toThrow(/eventId/);
    expect(() => inboundRecordFrom(event(), { eventId: 'e1', businessId: '' }, NOW)).toThrow(/businessId/);
    expect(() => inboundRecordFrom({ ...event(), timestamp: '99999999999999' }, meta, NOW)).toThrow(/timestamp/);
  });
});
