// Writes the contracts as JSON Schema files: `npm run schemas`.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { renderJsonSchemas } from '../src/contracts/json-schema.js';

const dir = join(import.meta.dirname, '..', 'schemas');
mkdirSync(dir, { recursive: true });
for (const [file, text] of Object.entries(renderJsonSchemas())) {
  writeFileSync(join(dir, file), text);
  console.log(`wrote schemas/${file}`);
}
