import { describe, expect, it } from 'vitest';
import { ReceivingSet } from '../../src/ingress/receiving.js';

describe('ReceivingSet (bodies in progress: bytes received, bounds per address and in total)', () => {
  it('charges bytes as they arrive and releases them when the body completes', () => {
    const set = new ReceivingSet<string>({ maxTotal: 10, maxPerAddress: 5, graceMs: 1000 });
    set.add('a', '10.0.0.1', 0);
    set.add('b', '10.0.0.1', 0);
    expect(set.bytes).toBe(0);
    set.charge('a', 300);
    set.charge('b', 200);
    set.charge('unknown', 999);
    expect(set.bytes).toBe(500);
    expect(set.delete('a')).toBe(true);
    expect(set.delete('a')).toBe(false);
    expect(set.bytes).toBe(200);
    expect(set.size).toBe(1);
  });

  it("at the per-address bound, closes that address's slowest receiver past its grace period, never another address's", () => {
    const set = new ReceivingSet<string>({ maxTotal: 100, maxPerAddress: 3, graceMs: 1000 });
    set.add('idle', 'attacker', 0);
    set.add('trickle', 'attacker', 0);
    set.add('fast', 'attacker', 0);
    set.add('provider', 'provider', 0);
    set.charge('trickle', 10);
    set.charge('fast', 5000);
    // Within the grace period nothing is closed: no room.
    expect(set.makeRoom('attacker', 500)).toBeUndefined();
    expect(set.makeRoom('attacker', 2000)).toEqual(['idle']);
    set.add('next', 'attacker', 2000);
    set.charge('next', 100);
    expect(set.makeRoom('attacker', 3000)).toEqual(['trickle']);
    // Another address is below its bound: nothing to close.
    expect(set.makeRoom('provider', 3000)).toEqual([]);
    expect(set.has('provider')).toBe(true);
  });

  it('at the total bound, closes the slowest receiver overall; all or nothing', () => {
    const set = new ReceivingSet<string>({ maxTotal: 3, maxPerAddress: 2, graceMs: 100 });
    set.add('a1', 'a', 0);
    set.add('b1', 'b', 0);
    set.add('c1', 'c', 0);
    set.charge('a1', 50);
    set.charge('c1', 10);
    expect(set.makeRoom('d', 50)).toBeUndefined();
    expect(set.makeRoom('d', 1000)).toEqual(['b1']);
    expect(set.size).toBe(2);
    // Address bound and total bound together: one eviction of the address frees both.
    set.add('a2', 'a', 1000);
    expect(set.makeRoom('a', 5000)).toEqual(['a2']);
    // When the total cannot be met, nothing is closed for the address either.
    const tight = new ReceivingSet<string>({ maxTotal: 2, maxPerAddress: 1, graceMs: 100 });
    tight.add('x', 'a', 0);
    tight.add('y', 'b', 900);
    expect(tight.makeRoom('c', 950)).toEqual(['x']);
    tight.add('z', 'c', 950);
    expect(tight.makeRoom('d', 960)).toBeUndefined();
    expect(tight.size).toBe(2);
  });
});
