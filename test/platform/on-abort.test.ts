import { describe, expect, it } from 'vitest';
import { onAbort } from '../../src/platform/on-abort.js';

describe('onAbort', () => {
  it('runs every registered callback once, in order, when the signal aborts', () => {
    const controller = new AbortController();
    const calls: string[] = [];
    onAbort(controller.signal, () => calls.push('a'));
    onAbort(controller.signal, () => calls.push('b'));
    controller.abort();
    controller.abort();
    expect(calls).toEqual(['a', 'b']);
  });

  it('does not run a callback that was unregistered, and keeps the others', () => {
    const controller = new AbortController();
    const calls: string[] = [];
    const unregisterA = onAbort(controller.signal, () => calls.push('a'));
    onAbort(controller.signal, () => calls.push('b'));
    unregisterA();
    unregisterA();
    controller.abort();
    expect(calls).toEqual(['b']);
  });

  it('adds one abort listener per signal however many callbacks wait on it', () => {
    const controller = new AbortController();
    let added = 0;
    const original = controller.signal.addEventListener.bind(controller.signal);
    controller.signal.addEventListener = ((...args: Parameters<AbortSignal['addEventListener']>) => {
      added += 1;
      original(...args);
    }) as AbortSignal['addEventListener'];
    const unregisters = Array.from({ length: 5_000 }, () => onAbort(controller.signal, () => undefined));
    for (const unregister of unregisters.slice(0, 4_000)) unregister();
    let ran = 0;
    onAbort(controller.signal, () => (ran += 1));
    controller.abort();
    expect(added).toBe(1);
    expect(ran).toBe(1);
  });

  it('keeps signals apart', () => {
    const first = new AbortController();
    const second = new AbortController();
    const calls: string[] = [];
    onAbort(first.signal, () => calls.push('first'));
    onAbort(second.signal, () => calls.push('second'));
    second.abort();
    expect(calls).toEqual(['second']);
    first.abort();
    expect(calls).toEqual(['second', 'first']);
  });
});
