import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import { renderJsonSchemas } from '../../src/contracts/json-schema.js';
import { applyInbound, inboundFrom } from '../../src/tracker/window-rules.js';
import { type ConversationWindow } from '../../src/contracts/conversation-window.js';
import { applyEvent, type TrackerEvent } from '../../src/tracker/state-rules.js';
import { messageStateOf, type TrackedMessage } from '../../src/contracts/message-state.js';

const dir = join(import.meta.dirname, '..', '..', 'schemas');

describe('committed JSON Schema files', () => {
  it('match the zod contracts (run `npm run schemas` after changing a contract)', () => {
    const rendered = renderJsonSchemas();
    expect(
      readdirSync(dir)
        .filter((f) => f.endsWith('.json'))
        .sort(),
    ).toEqual(Object.keys(rendered).sort());
    for (const [file, text] of Object.entries(rendered)) {
      expect(readFileSync(join(dir, file), 'utf8'), `schemas/${file} is stale`).toBe(text);
    }
  });
});

/** The committed file compiled by a JSON Schema validator other than zod (draft 2020-12, as zod emits). */
function validatorOf(file: string) {
  // Ajv has no format validators of its own; the pattern zod emits carries the date-time rule.
  const ajv = new Ajv2020({ strict: true, allErrors: true, formats: { 'date-time': true } });
  return ajv.compile(JSON.parse(readFileSync(join(dir, file), 'utf8')));
}

describe('the tracker values on message-state and conversations match their published schemas', () => {
  const NOW = new Date('2026-03-01T12:00:00.000Z');
  const error = {
    message: 'not on WhatsApp',
    type: 'ERROR_TYPE_INVALID_REQUEST',
    code: 'ERROR_CODE_PHONE_NUMBER_BAD_FORMAT',
    cntTraceId: '123',
  };
  const result: TrackerEvent = {
    kind: 'result',
    eventId: 'e-result',
    result: {
      requestId: 'order-42',
      businessId: 'biz_1',
      messageId: 'm1',
      type: 'text',
      recipient: '+15550002222',
      acceptedAt: '2026-03-01T10:00:00+01:00',
    },
  };
  const status = (s: 'sent' | 'delivered' | 'read' | 'delivery_failed', at: string): TrackerEvent => ({
    kind: 'status',
    eventId: `e-${s}`,
    businessId: 'biz_1',
    messageId: 'm1',
    status: s,
    at,
    error: s === 'delivery_failed' ? error : null,
    recipient: '15550002222',
  });

  function fold(events: TrackerEvent[]): TrackedMessage[] {
    const states: TrackedMessage[] = [];
    let state: TrackedMessage | undefined;
    for (const event of events) {
      state = applyEvent(state, event, NOW).state;
      states.push(state);
    }
    return states;
  }

  it('message-state.schema.json accepts every state applyEvent publishes, and the public state without eventIds', () => {
    const validate = validatorOf('message-state.schema.json');
    const states = [
      ...fold([
        result,
        status('sent', '2026-03-01T09:00:01Z'),
        status('delivered', '2026-03-01T09:00:02Z'),
        status('read', '2026-03-01T09:00:03Z'),
      ]),
      // A status before its result (no requestId, type or acceptedAt yet), then a failure.
      ...fold([status('delivered', '2026-03-01T09:00:02Z'), status('delivery_failed', '2026-03-01T09:00:04Z'), result]),
    ];
    expect(states.map((s) => s.status)).toEqual([
      'accepted',
      'sent',
      'delivered',
      'read',
      'delivered',
      'delivery_failed',
      'delivery_failed',
    ]);
    expect(states[4]!.requestId).toBeNull();
    for (const state of states) {
      // What is published: the JSON text of the state.
      const value = JSON.parse(JSON.stringify(state));
      expect(validate(value), JSON.stringify(validate.errors)).toBe(true);
      expect(validate(messageStateOf(state)), JSON.stringify(validate.errors)).toBe(true);
    }
  });

  it('message-state.schema.json refuses a state that breaks the contract', () => {
    const validate = validatorOf('message-state.schema.json');
    const [state] = fold([result]);
    expect(validate({ ...state, status: 'unknown' })).toBe(false);
    expect(validate({ ...state, updatedAt: 'yesterday' })).toBe(false);
    expect(validate({ ...state, events: -1 })).toBe(false);
    const { messageId: _messageId, ...withoutId } = state!;
    expect(validate(withoutId)).toBe(false);
  });

  it('conversation-window.schema.json accepts the windows applyInbound publishes, and refuses a broken one', () => {
    const validate = validatorOf('conversation-window.schema.json');
    const body = {
      timestamp: '1772359200',
      sender: { channelType: 'whatsapp', id: '+15550002222' },
      recipient: { channelType: 'whatsapp', id: '+15550001111' },
      message: { text: 'hi' },
    };
    let window: ConversationWindow | undefined;
    for (const timestamp of ['1772359200', '1772362800']) {
      window = applyInbound(window, inboundFrom({ ...body, timestamp }, 'biz_1')).window;
      expect(validate(JSON.parse(JSON.stringify(window))), JSON.stringify(validate.errors)).toBe(true);
    }
    expect(window!.windowOpenUntil).toBe('2026-03-02T11:00:00.000Z');
    expect(validate({ ...window, windowOpenUntil: null })).toBe(false);
    expect(validate({ ...window, customer: '' })).toBe(false);
  });
});
