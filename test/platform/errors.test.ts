import { describe, expect, it } from 'vitest';
import { errorMessage } from '../../src/platform/errors.js';

describe('errorMessage', () => {
  it("is an Error's message, an error-like object's, or the thrown value as text", () => {
    expect(errorMessage(new TypeError('bad'))).toBe('bad');
    expect(errorMessage({ message: 'like an error' })).toBe('like an error');
    expect(errorMessage('plain')).toBe('plain');
    expect(errorMessage(null)).toBe('null');
    expect(errorMessage(undefined)).toBe('undefined');
    expect(errorMessage({ message: 42 })).toBe('[object Object]');
  });
});
