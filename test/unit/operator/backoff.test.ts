import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Backoff } from '../../../src/operator/backoff';

describe('reconnect backoff', () => {
  it('property: every delay lies in [0, min(cap, base · 2^attempt)] (full jitter)', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 5_000 }),
        fc.integer({ min: 0, max: 100_000 }),
        fc.array(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), { minLength: 1, maxLength: 80 }),
        (base, extra, draws) => {
          const cap = base + extra;
          let i = 0;
          const b = new Backoff({ baseMs: base, capMs: cap }, () => draws[i++] as number);
          return draws.every((_, attempt) => {
            const d = b.next();
            return Number.isInteger(d) && d >= 0 && d <= Math.min(cap, base * 2 ** attempt);
          });
        },
      ),
    );
  });

  it('is exponential from 1 s to 30 s at the top of the jitter, and 0 at the bottom', () => {
    const top = new Backoff(undefined, () => 0.9999999);
    expect(Array.from({ length: 8 }, () => top.next())).toEqual([1000, 2000, 4000, 8000, 16000, 30000, 30000, 30000]);
    const bottom = new Backoff(undefined, () => 0);
    expect(bottom.next()).toBe(0);
  });

  it('draws uniformly: the jitter follows the random source', () => {
    const b = new Backoff({ baseMs: 1000, capMs: 30000 }, () => 0.25);
    expect(b.next()).toBe(250);
    expect(b.next()).toBe(500);
  });

  it('never grows without bound and resets', () => {
    const b = new Backoff(undefined, () => 0.9999999);
    for (let i = 0; i < 10_000; i++) b.next();
    expect(b.next()).toBe(30000);
    b.reset();
    expect(b.next()).toBe(1000);
  });

  it('saturates to the cap after a refusal', () => {
    const b = new Backoff(undefined, () => 0.9999999);
    b.saturate();
    expect(b.next()).toBe(30000);
  });

  it('a random source out of range cannot produce a delay out of range', () => {
    const b = new Backoff(undefined, () => 7);
    expect(b.next()).toBe(0);
  });
});

describe('backoff after a refusal', () => {
  it('is a full-jitter draw under the whole cap, never past it, spreading a refused fleet over all of it', () => {
    const delays = [0, 0.25, 0.5, 0.999999].map((r) => new Backoff({ baseMs: 1_000, capMs: 30_000 }, () => r).refusal());
    expect(delays).toEqual([0, 7_500, 15_000, 30_000]);
  });
});
