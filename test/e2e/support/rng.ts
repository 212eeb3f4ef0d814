/**
 * The suites' seeded randomness: every random choice a test makes (when to cut, what to change)
 * comes from one of these, so a failing run is reproduced by its seed. Mulberry32, as the
 * simulated cluster uses.
 */
import { Rng } from '../../../src/operator/sim/rng';

export class SeededRandom extends Rng {
  constructor(readonly seed: number) {
    super(seed);
  }

  /** An integer in [lo, hi]. */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new RangeError('pick from an empty list');
    return items[Math.floor(this.next() * items.length)] as T;
  }

  chance(p: number): boolean {
    return this.next() < p;
  }

  /** A function of the same stream, for APIs that want `() => number` (the SDK's backoff jitter). */
  fn(): () => number {
    return () => this.next();
  }
}

/** The seed for a suite: E2E_SEED when set (to replay a failure), else the suite's own constant. */
export function suiteSeed(fallback: number): number {
  const env = process.env.E2E_SEED;
  const n = env === undefined ? NaN : Number(env);
  return Number.isInteger(n) ? n >>> 0 : fallback;
}
