// Writes the contracts as JSON Schema files: `npm run schemas`.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { buildAsyncApiDocument } from '../src/contracts/asyncapi.js';
import { renderJsonSchemas } from '../src/contracts/json-schema.js';
import pkg from '../package.json' with { type: 'json' };

const dir = join(import.meta.dirname, '..', 'schemas');
mkdirSync(dir, { recursive: true });
for (const [file, text] of Object.entries(renderJsonSchemas())) {
  writeFileSync(join(dir, file), text);
  console.log(`wrote schemas/${file}`);
}

const asyncapi = join(import.meta.dirname, '..', 'docs', 'asyncapi.json');
writeFileSync(asyncapi, `${JSON.stringify(buildAsyncApiDocument(pkg.version), null, 2)}\n`);
console.log('wrote docs/asyncapi.json');
