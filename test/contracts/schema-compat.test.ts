import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { describe, expect, it } from 'vitest';
import {
  compareVersions,
  CONTRACT_TOPICS,
  contractVersions,
  CURRENT_CONTRACT_VERSION,
  FIXTURES_DIR,
  goldenFilePath,
  type ContractTopic,
  type GoldenFile,
} from '../../scripts/contract-fixtures.js';
import {
  breakingChanges,
  readSchemas,
  releasedSchemaVersions,
  schemaCompatReport,
  SCHEMAS_DIR,
} from '../../scripts/schema-compat.js';

/**
 * The JSON Schemas stay backward compatible (`npm run schema-compat`): today's schemas/ accept
 * every golden record of every earlier release, and no schema requires, removes or narrows what
 * an earlier release's copy (test/fixtures/contracts/<version>/schemas/) allowed.
 */

const SCHEMA_OF_TOPIC: Partial<Record<ContractTopic, string>> = {
  messages: 'inbound-message-event.schema.json',
  delivery_status: 'delivery-status-event.schema.json',
  'send-requests': 'send-request.schema.json',
  'send-results': 'send-result.schema.json',
  'message-state': 'message-state.schema.json',
  conversations: 'conversation-window.schema.json',
};

const earlier = contractVersions().filter((v) => compareVersions(v, CURRENT_CONTRACT_VERSION) < 0);

function validator(dir: string, file: string) {
  const ajv = new Ajv2020({ strict: true, allErrors: true, formats: { 'date-time': true } });
  return ajv.compile(JSON.parse(readFileSync(join(dir, file), 'utf8')));
}

function goldenValues(version: string, topic: ContractTopic): { note: string; value: unknown }[] {
  const path = goldenFilePath(version, topic);
  if (!existsSync(path)) return [];
  return (JSON.parse(readFileSync(path, 'utf8')) as GoldenFile).records.map((r) => ({
    note: r.note,
    value: JSON.parse(r.value),
  }));
}

const clone = <T>(v: T): T => structuredClone(v);
type S = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- schema trees edited in place

describe('JSON Schema backward compatibility', () => {
  it('every release before this one keeps its schemas and golden records', () => {
    expect(earlier).toContain('0.1.0');
    expect(releasedSchemaVersions()).toEqual(earlier);
    for (const version of earlier)
      expect(existsSync(join(FIXTURES_DIR, version, 'send-results.json')), version).toBe(true);
  });

  it("today's schemas/ neither require, remove nor narrow anything an earlier release allowed", () => {
    expect(schemaCompatReport()).toEqual([]);
  });

  describe.each(earlier)('the golden records of %s', (version) => {
    it.each(CONTRACT_TOPICS.filter((t) => SCHEMA_OF_TOPIC[t] !== undefined && goldenValues(version, t).length > 0))(
      "on %s are valid under today's schema, as under their own",
      (topic) => {
        const file = SCHEMA_OF_TOPIC[topic]!;
        const today = validator(SCHEMAS_DIR, file);
        const theirs = existsSync(join(FIXTURES_DIR, version, 'schemas', file))
          ? validator(join(FIXTURES_DIR, version, 'schemas'), file)
          : undefined;
        for (const { note, value } of goldenValues(version, topic)) {
          expect(today(value), `${note}: ${JSON.stringify(today.errors)}`).toBe(true);
          if (theirs)
            expect(theirs(value), `${version}'s own schema, ${note}: ${JSON.stringify(theirs.errors)}`).toBe(true);
        }
      },
    );
  });
});

describe('breakingChanges', () => {
  const base = readSchemas(join(FIXTURES_DIR, '0.1.0', 'schemas'));
  const sendResult = base['send-result.schema.json']!;
  const status = base['delivery-status-event.schema.json']!;
  const request = base['send-request.schema.json']!;

  it('finds nothing between a schema and itself, or in what only adds (an optional field, an enum value, a variant)', () => {
    for (const schema of Object.values(base)) expect(breakingChanges(schema, schema)).toEqual([]);
    const added: S = clone(sendResult);
    added.oneOf[0].properties.maybeSent = { default: false, type: 'boolean' };
    added.oneOf.push({
      type: 'object',
      properties: { outcome: { type: 'string', const: 'expired' } },
      required: ['outcome'],
    });
    expect(breakingChanges(sendResult, added)).toEqual([]);
    const more: S = clone(status);
    more.properties.statusUpdate.properties.status.enum.push('deleted');
    expect(breakingChanges(status, more)).toEqual([]);
  });

  it('finds a field newly required: what the issue found (maybeSent required on results written before it existed)', () => {
    const required: S = clone(sendResult);
    required.oneOf[0].properties.maybeSent = { type: 'boolean' };
    required.oneOf[0].required.push('maybeSent');
    expect(breakingChanges(sendResult, required)).toEqual([
      '/oneOf[outcome="accepted"]: property maybeSent newly required',
    ]);
  });

  it('finds a removed enum value, property or variant, a narrowed type, closed properties and tightened bounds', () => {
    const s: S = clone(status);
    s.properties.statusUpdate.properties.status.enum = ['sent', 'delivered', 'delivery_failed'];
    delete s.properties.sender;
    s.properties.timestamp.type = 'integer';
    s.additionalProperties = false;
    expect(breakingChanges(status, s)).toEqual([
      '/properties/timestamp: type string no longer accepted',
      '/: property sender removed',
      '/properties/statusUpdate/properties/status: enum value "read" removed',
      '/: additionalProperties closed',
    ]);
    const r: S = clone(request);
    r.oneOf[0].properties.requestId.maxLength = 64;
    r.oneOf.pop();
    expect(breakingChanges(request, r)).toEqual([
      '/oneOf[type="text"]/properties/requestId: maxLength lowered from 256 to 64',
      '/: oneOf branch type="template" removed',
    ]);
    const t: S = clone(request);
    t.oneOf[1].properties.parameters.maxItems = 10;
    t.oneOf[1].properties.number.pattern = '^\\+[0-9]{8,15}$';
    expect(breakingChanges(request, t)).toEqual([
      '/oneOf[type="template"]/properties/number: pattern changed',
      '/oneOf[type="template"]/properties/parameters: maxItems lowered from 100 to 10',
    ]);
  });
});
