import { describe, expect, it } from 'vitest';
import { ReceivingSet, type ReceivingLimits } from '../../src/ingress/receiving.js';

/** Receivers named by strings, each with the address the test gives it; counts address reads. */
function receivers(limits: ReceivingLimits) {
  const addresses = new Map<string, string>();
  let reads = 0;
  const set = new ReceivingSet<string>(limits, (item) => {
    reads += 1;
    return addresses.get(item)!;
  });
  return {
    set,
    reads: () => reads,
    add(item: string, address: string, now: number) {
      addresses.set(item, address);
      set.add(item, now);
    },
    /** Room for a new receiver `item` from `address`. */
    makeRoom(item: string, address: string, now: number) {
      addresses.set(item, address);
      return set.makeRoom(item, now);
    },
  };
}

describe('ReceivingSet (bodies in progress: bytes received, bounds per address and in total)', () => {
  it('charges bytes as they arrive and releases them when the body completes', () => {
    const r = receivers({ maxTotal: 10, maxPerAddress: 5, graceMs: 1000 });
    const set = r.set;
    r.add('a', '10.0.0.1', 0);
    r.add('b', '10.0.0.1', 0);
    expect(set.bytes).toBe(0);
    set.charge('a', 300);
    set.charge('b', 200);
    set.charge('unknown', 999);
    expect(set.bytes).toBe(500);
    expect(set.delete('a')).toBe(true);
    expect(set.delete('a')).toBe(false);
    expect(set.bytes).toBe(200);
    expect(set.size).toBe(1);
    // Far from any per-address bound, no address is read (it costs a call into uWS).
    expect(r.reads()).toBe(0);
  });

  it("at the per-address bound, closes that address's slowest receiver past its grace period, never another address's", () => {
    const r = receivers({ maxTotal: 100, maxPerAddress: 3, graceMs: 1000 });
    const set = r.set;
    r.add('idle', 'attacker', 0);
    r.add('trickle', 'attacker', 0);
    r.add('fast', 'attacker', 0);
    r.add('provider', 'provider', 0);
    set.charge('trickle', 10);
    set.charge('fast', 5000);
    // Within the grace period nothing is closed: no room.
    expect(r.makeRoom('n1', 'attacker', 500)).toBeUndefined();
    expect(r.makeRoom('n1', 'attacker', 2000)).toEqual(['idle']);
    r.add('next', 'attacker', 2000);
    set.charge('next', 100);
    expect(r.makeRoom('n2', 'attacker', 3000)).toEqual(['trickle']);
    // Another address is below its bound: nothing to close.
    expect(r.makeRoom('n3', 'provider', 3000)).toEqual([]);
    expect(set.has('provider')).toBe(true);
  });

  it('at the total bound, closes the slowest receiver overall; all or nothing', () => {
    const r = receivers({ maxTotal: 3, maxPerAddress: 2, graceMs: 100 });
    const set = r.set;
    r.add('a1', 'a', 0);
    r.add('b1', 'b', 0);
    r.add('c1', 'c', 0);
    set.charge('a1', 50);
    set.charge('c1', 10);
    expect(r.makeRoom('d1', 'd', 50)).toBeUndefined();
    expect(r.makeRoom('d1', 'd', 1000)).toEqual(['b1']);
    expect(set.size).toBe(2);
    // Address bound and total bound together: one eviction of the address frees both.
    r.add('a2', 'a', 1000);
    expect(r.makeRoom('a3', 'a', 5000)).toEqual(['a2']);
    // When the total cannot be met, nothing is closed for the address either.
    const t = receivers({ maxTotal: 2, maxPerAddress: 1, graceMs: 100 });
    t.add('x', 'a', 0);
    t.add('y', 'b', 900);
    expect(t.makeRoom('c1', 'c', 950)).toEqual(['x']);
    t.add('z', 'c', 950);
    expect(t.makeRoom('d1', 'd', 960)).toBeUndefined();
    expect(t.set.size).toBe(2);
  });
});
