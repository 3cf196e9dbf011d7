// Backward compatibility of the JSON Schemas: today's schemas/ against the copy each earlier
// release keeps under test/fixtures/contracts/<version>/schemas/. `npm run schema-compat`
// prints every breaking change and exits 1 when there is one; test/contracts/schema-compat.test.ts
// runs the same check, and also validates every golden record of every earlier release.
//
// Breaking (a record an earlier release wrote, or a value a producer sent, could be refused or
// lose its meaning): a schema file removed; a property newly required or removed; an enum value
// removed; a const changed; a type narrowed; additionalProperties closed; a bound tightened
// (minimum, maximum, lengths, item counts); a pattern or format changed; a oneOf/anyOf branch removed.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { compareVersions, contractVersions, CURRENT_CONTRACT_VERSION, FIXTURES_DIR } from './contract-fixtures.js';

export const SCHEMAS_DIR = join(import.meta.dirname, '..', 'schemas');

type Schema = Record<string, unknown>;

const isObject = (v: unknown): v is Schema => typeof v === 'object' && v !== null && !Array.isArray(v);
const types = (s: Schema): Set<string> | undefined =>
  s.type === undefined ? undefined : new Set(Array.isArray(s.type) ? (s.type as string[]) : [s.type as string]);
const same = (a: unknown, b: unknown) => JSON.stringify(a) === JSON.stringify(b);

/** Bounds whose larger value accepts less, and whose smaller value accepts less. */
const LOWER_BOUNDS = ['minimum', 'exclusiveMinimum', 'minLength', 'minItems', 'minProperties'];
const UPPER_BOUNDS = ['maximum', 'exclusiveMaximum', 'maxLength', 'maxItems', 'maxProperties'];

/**
 * What identifies a branch of a oneOf/anyOf across versions: its const properties (`outcome: "accepted"`), else its
 * position.
 */
function branchId(branch: Schema, index: number): string {
  const props = isObject(branch.properties) ? branch.properties : {};
  const consts = Object.entries(props)
    .filter(([, p]) => isObject(p) && p.const !== undefined)
    .map(([name, p]) => `${name}=${JSON.stringify((p as Schema).const)}`);
  return consts.length > 0 ? consts.sort().join(',') : `#${index}`;
}

/** Every change from `previous` to `current` that can refuse what `previous` accepted, with where it is. */
export function breakingChanges(previous: unknown, current: unknown, path = ''): string[] {
  if (!isObject(previous)) return [];
  if (!isObject(current)) return [`${path || '/'}: the schema is gone`];
  const out: string[] = [];
  const at = path || '/';

  const prevTypes = types(previous);
  const currTypes = types(current);
  if (currTypes) {
    if (!prevTypes) out.push(`${at}: type narrowed from any to ${[...currTypes].join('|')}`);
    else
      for (const t of prevTypes) {
        if (!currTypes.has(t) && !(t === 'integer' && currTypes.has('number')))
          out.push(`${at}: type ${t} no longer accepted`);
      }
  }
  if (Array.isArray(previous.enum)) {
    const now = Array.isArray(current.enum) ? current.enum : undefined;
    if (now)
      for (const v of previous.enum)
        if (!now.some((n) => same(n, v))) out.push(`${at}: enum value ${JSON.stringify(v)} removed`);
  } else if (Array.isArray(current.enum)) out.push(`${at}: now limited to ${JSON.stringify(current.enum)}`);
  if (current.const !== undefined && !same(current.const, previous.const))
    out.push(`${at}: const ${JSON.stringify(previous.const)} became ${JSON.stringify(current.const)}`);
  for (const key of ['pattern', 'format']) {
    if (current[key] !== undefined && !same(current[key], previous[key])) out.push(`${at}: ${key} changed`);
  }
  for (const key of LOWER_BOUNDS) {
    const p = previous[key] as number | undefined;
    const c = current[key] as number | undefined;
    if (c !== undefined && (p === undefined || c > p)) out.push(`${at}: ${key} raised from ${p ?? 'none'} to ${c}`);
  }
  for (const key of UPPER_BOUNDS) {
    const p = previous[key] as number | undefined;
    const c = current[key] as number | undefined;
    if (c !== undefined && (p === undefined || c < p)) out.push(`${at}: ${key} lowered from ${p ?? 'none'} to ${c}`);
  }

  const prevRequired = new Set(Array.isArray(previous.required) ? (previous.required as string[]) : []);
  for (const name of Array.isArray(current.required) ? (current.required as string[]) : []) {
    if (!prevRequired.has(name)) out.push(`${at}: property ${name} newly required`);
  }
  const prevProps = isObject(previous.properties) ? previous.properties : {};
  const currProps = isObject(current.properties) ? current.properties : {};
  for (const [name, schema] of Object.entries(prevProps)) {
    if (!(name in currProps)) out.push(`${at}: property ${name} removed`);
    else out.push(...breakingChanges(schema, currProps[name], `${path}/properties/${name}`));
  }
  if (current.additionalProperties === false && previous.additionalProperties !== false)
    out.push(`${at}: additionalProperties closed`);
  else if (isObject(previous.additionalProperties))
    out.push(
      ...breakingChanges(
        previous.additionalProperties,
        current.additionalProperties ?? {},
        `${path}/additionalProperties`,
      ),
    );
  if (isObject(previous.items)) out.push(...breakingChanges(previous.items, current.items ?? {}, `${path}/items`));

  for (const key of ['oneOf', 'anyOf']) {
    const prev = previous[key];
    if (!Array.isArray(prev)) continue;
    const curr = Array.isArray(current[key]) ? (current[key] as Schema[]) : [];
    const byId = new Map(curr.map((b, i) => [branchId(b, i), b]));
    prev.forEach((branch: Schema, i) => {
      const id = branchId(branch, i);
      const match = byId.get(id);
      if (!match) out.push(`${at}: ${key} branch ${id} removed`);
      else out.push(...breakingChanges(branch, match, `${path}/${key}[${id}]`));
    });
  }
  return out;
}

/** Released versions that keep a copy of their schemas (every version before the current one should). */
export function releasedSchemaVersions(): string[] {
  return contractVersions().filter(
    (v) => compareVersions(v, CURRENT_CONTRACT_VERSION) < 0 && existsSync(join(FIXTURES_DIR, v, 'schemas')),
  );
}

export function readSchemas(dir: string): Record<string, Schema> {
  const out: Record<string, Schema> = {};
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.schema.json')))
    out[file] = JSON.parse(readFileSync(join(dir, file), 'utf8')) as Schema;
  return out;
}

/** Every breaking change of today's schemas/ against each released version's copy. */
export function schemaCompatReport(): string[] {
  const today = readSchemas(SCHEMAS_DIR);
  const out: string[] = [];
  for (const version of releasedSchemaVersions()) {
    for (const [file, schema] of Object.entries(readSchemas(join(FIXTURES_DIR, version, 'schemas')))) {
      const now = today[file];
      if (!now) out.push(`${file} (against ${version}): the schema file is gone`);
      else out.push(...breakingChanges(schema, now).map((change) => `${file} (against ${version}): ${change}`));
    }
  }
  return out;
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const versions = releasedSchemaVersions();
  const report = schemaCompatReport();
  if (report.length > 0) {
    console.error(
      `schemas/ breaks what earlier releases wrote (a breaking change needs a new schema version, e.g. send-result/v2, said first in the release notes):\n  ${report.join('\n  ')}`,
    );
    process.exitCode = 1;
  } else console.log(`schemas/ is backward compatible with ${versions.join(', ') || '(no released schemas)'}`);
}
