import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Parser } from '@asyncapi/parser';
import { describe, expect, it } from 'vitest';
import pkg from '../../package.json' with { type: 'json' };
import { buildAsyncApiDocument } from '../../src/contracts/asyncapi.js';

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
    const addresses = document!.channels().all().map((c) => c.address());
    expect(addresses.sort()).toEqual(
      ['/webhooks/{businessId}', '/webhooks/{businessId}/delivery_status', '/webhooks/{businessId}/messages', 'delivery_status', 'messages', 'send-requests', 'send-requests-dlq', 'send-results', 'webhooks-dlq'].sort(),
    );
  });

  it('the parser reports a broken document', async () => {
    const broken = buildAsyncApiDocument(pkg.version);
    (broken.operations as Record<string, unknown>).dangling = { action: 'publish', channel: { $ref: '#/channels/nowhere' } };
    const { diagnostics } = await new Parser().parse(JSON.stringify(broken));
    expect(diagnostics.filter((d) => d.severity === 0).length).toBeGreaterThan(0);
  });
});
