import { z } from 'zod';
import { partySchema, providerErrorSchema } from './common.js';
import { deliveryStatusEventSchema, inboundMessageEventSchema } from './webhook-events.js';
import { sendRequestSchema, sendResultSchema } from './send.js';
import { webhookRegistrationSchema } from './provider-api.js';
// The tracker's output values are defined next to the pure rules that produce them (src/tracker);
// both modules are pure and import only from contracts, so this import adds no cycle.
import { conversationWindowSchema } from './conversation-window.js';
import { messageStateSchema } from './message-state.js';
import { requestOutcomeSchema } from './request-outcome.js';
import { inboundMessageRecordSchema } from './inbound-message.js';

/** The contracts published as JSON Schema files under schemas/ (committed, checked for staleness by a test). */
export const PUBLISHED_SCHEMAS = {
  'party.schema.json': { schema: partySchema, title: 'Party on a channel' },
  'provider-error.schema.json': { schema: providerErrorSchema, title: 'Provider error object' },
  'inbound-message-event.schema.json': {
    schema: inboundMessageEventSchema,
    title: 'Inbound message event (topic messages)',
  },
  'delivery-status-event.schema.json': {
    schema: deliveryStatusEventSchema,
    title: 'Delivery status event (topic delivery_status)',
  },
  'send-request.schema.json': { schema: sendRequestSchema, title: 'Send request (topic send-requests)' },
  'send-result.schema.json': { schema: sendResultSchema, title: 'Send result (topic send-results)' },
  'webhook-registration.schema.json': { schema: webhookRegistrationSchema, title: 'Webhook registration' },
  'message-state.schema.json': {
    schema: messageStateSchema,
    title: 'Message state (compacted topic message-state, key = message id)',
  },
  'conversation-window.schema.json': {
    schema: conversationWindowSchema,
    title: 'Conversation window (compacted topic conversations, key = <businessId>:<customer>)',
  },
  'request-outcome.schema.json': {
    schema: requestOutcomeSchema,
    title: 'Request outcome (compacted topic request-outcomes, key = request id)',
  },
  'inbound-message-record.schema.json': {
    schema: inboundMessageRecordSchema,
    title: 'Inbound message record (compacted topic inbound-messages, key = the event-id of the messages record)',
  },
} as const;

export function renderJsonSchemas(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [file, { schema, title }] of Object.entries(PUBLISHED_SCHEMAS)) {
    const json = z.toJSONSchema(schema, { io: 'input', unrepresentable: 'any' });
    out[file] = `${JSON.stringify({ $id: `https://msgbridge.dev/schemas/${file}`, title, ...json }, null, 2)}\n`;
  }
  return out;
}
