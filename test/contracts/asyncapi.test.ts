import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Parser } from '@asyncapi/parser';
import { describe, expect, it } from 'vitest';
import pkg from '../../package.json' with { type: 'json' };
import { z } from 'zod';
import { buildAsyncApiDocument } from '../../src/contracts/asyncapi.js';
import { HEADER, SCHEMA_ID } from '../../src/contracts/headers.js';
import { conversationWindowSchema } from '../../src/contracts/conversation-window.js';
import { messageStateSchema } from '../../src/contracts/message-state.js';
import { requestOutcomeSchema } from '../../src/contracts/request-outcome.js';
import { inboundMessageRecordSchema } from '../../src/contracts/inbound-message.js';

const file = join(import.meta.dirname, '..', '..', 'docs', 'asyncapi.json');

describe('AsyncAPI document', () => {
  it('is generated from the contracts (run `npm run schemas` after changing one)', () => {
    expect(readFileSync(file, 'utf8')).toBe(`${JSON.stringify(buildAsyncApiDocument(pkg.version), null, 2)}\n`);
  });

  it('is a valid AsyncAPI 3 document for the official parser, with every topic and endpoint', async () => {
    const { document, diagnostics } = await new Parser().parse(readFileSync(file, 'utf8'));
    const errors = diagnostics.filter((d) => d.severity === 0);
    expect(errors.map((d) => `${d.path.join('.')}: ${d.message}`)).toEqual([]);
    expect(document).toBeDefined();
    expect(document!.version()).toBe('3.0.0');
    const addresses = document!
      .channels()
      .all()
      .map((c) => c.address());
    expect(addresses.sort()).toEqual(
      [
        '/webhooks/{businessId}',
        '/webhooks/{businessId}/delivery_status',
        '/webhooks/{businessId}/messages',
        'conversations',
        'delivery_status',
        'inbound-messages',
        'message-state',
        'messages',
        'request-outcomes',
        'send-requests',
        'send-requests-dlq',
        'send-results',
        'webhooks-dlq',
      ].sort(),
    );
  });

  it('documents the tracker topics: compacted, keyed, with their headers and payloads, read with read_committed', async () => {
    const { document } = await new Parser().parse(readFileSync(file, 'utf8'));
    const cases = [
      { address: 'message-state', schema: SCHEMA_ID.messageState, key: /message id/, zod: messageStateSchema },
      {
        address: 'conversations',
        schema: SCHEMA_ID.conversations,
        key: /<businessId>:<customer>/,
        zod: conversationWindowSchema,
      },
      // A dead letter's result may name no business: its outcome then has no business-id header.
      {
        address: 'request-outcomes',
        schema: SCHEMA_ID.requestOutcomes,
        key: /request id/,
        zod: requestOutcomeSchema,
        businessOptional: true,
      },
      {
        address: 'inbound-messages',
        schema: SCHEMA_ID.inboundMessages,
        key: /event-id/,
        zod: inboundMessageRecordSchema,
      },
    ];
    for (const c of cases) {
      const channel = document!
        .channels()
        .all()
        .find((ch) => ch.address() === c.address)!;
      expect(channel, c.address).toBeDefined();
      expect(channel.description()).toMatch(/compacted/i);
      expect(channel.description()).toContain('isolation.level=read_committed');
      expect(channel.bindings().get('kafka')!.value()).toMatchObject({
        topicConfiguration: { 'cleanup.policy': ['compact'] },
      });
      const message = channel.messages().all()[0]!;
      expect(message.name()).toBe(c.schema);
      expect(message.contentType()).toBe('application/json');
      expect(message.headers()!.required()).toEqual(
        c.businessOptional
          ? [HEADER.eventId, HEADER.contentType, HEADER.schema]
          : [HEADER.eventId, HEADER.businessId, HEADER.contentType, HEADER.schema],
      );
      expect((message.bindings().get('kafka')!.value() as { key: { description: string } }).key.description).toMatch(
        c.key,
      );
      // The payload is the zod contract's JSON Schema: every field, the same required ones.
      const payload = message.payload()!;
      const json = z.toJSONSchema(c.zod, { target: 'draft-7', io: 'input' }) as {
        properties: object;
        required: string[];
      };
      expect(Object.keys(payload.properties() ?? {}).sort()).toEqual(Object.keys(json.properties).sort());
      expect([...(payload.required() ?? [])].sort()).toEqual([...json.required].sort());
      const writers = channel
        .operations()
        .all()
        .filter((o) => o.action() === 'send');
      expect(writers.map((o) => o.id())).toHaveLength(1);
    }
    const stateProps = document!.components().schemas().get('MessageState')!.properties()!;
    expect(stateProps.eventIds!.description()).toMatch(/bookkeeping/i);
    for (const input of ['send-results', 'delivery_status', 'messages']) {
      const ops = document!
        .channels()
        .all()
        .find((ch) => ch.address() === input)!
        .operations()
        .all();
      expect(
        ops.some((o) => o.action() === 'receive' && o.id()!.startsWith('track')),
        input,
      ).toBe(true);
    }
  });

  it('the parser reports a broken document', async () => {
    const broken = buildAsyncApiDocument(pkg.version);
    (broken.operations as Record<string, unknown>).dangling = {
      action: 'publish',
      channel: { $ref: '#/channels/nowhere' },
    };
    const { diagnostics } = await new Parser().parse(JSON.stringify(broken));
    expect(diagnostics.filter((d) => d.severity === 0).length).toBeGreaterThan(0);
  });
});
