import { describe, expect, it } from 'vitest';
import { assertUniqueLogKeys, repeatedKeys } from './log-lines.js';

describe('the suite-wide check that log lines carry each key once', () => {
  it('finds a key repeated at the top or inside a nested object, not across objects or in strings', () => {
    expect(repeatedKeys('{"level":30,"role":"dev","role":"tracker","msg":"x"}')).toEqual(['role']);
    expect(repeatedKeys('{"err":{"code":"A","code":"B"},"code":"C"}')).toEqual(['code']);
    expect(repeatedKeys('{"a":{"k":1},"b":{"k":2},"list":[{"k":1},{"k":2}]}')).toEqual([]);
    expect(repeatedKeys('{"msg":"a \\"msg\\": and {\\"msg\\":1}","k":"}{,"}')).toEqual([]);
    expect(repeatedKeys('msgbridge dev: starting…')).toBeUndefined();
  });

  it('fails on the first such line of an output', () => {
    expect(() => assertUniqueLogKeys('plain text\n{"role":"dev"}\n{"role":"dev","role":"sender"}\n')).toThrow(
      /"role" twice/,
    );
    expect(() => assertUniqueLogKeys('{"role":"dev","component":"sender"}\n')).not.toThrow();
  });
});
