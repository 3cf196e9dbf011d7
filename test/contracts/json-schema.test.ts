import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { renderJsonSchemas } from '../../src/contracts/json-schema.js';

const dir = join(import.meta.dirname, '..', '..', 'schemas');

describe('committed JSON Schema files', () => {
  it('match the zod contracts (run `npm run schemas` after changing a contract)', () => {
    const rendered = renderJsonSchemas();
    expect(readdirSync(dir).filter((f) => f.endsWith('.json')).sort()).toEqual(Object.keys(rendered).sort());
    for (const [file, text] of Object.entries(rendered)) {
      expect(readFileSync(join(dir, file), 'utf8'), `schemas/${file} is stale`).toBe(text);
    }
  });
});
