import { describe, expect, it } from 'vitest';
import {
  ascending,
  countBetween,
  estimateEvictionDelay,
  instantsBetween,
  outOfMemoryShare,
  predictedConstructions,
  residentAt,
  spanBelow,
} from '../../bench/lib/residency';

const D = 10_000;

describe('bench residency model', () => {
  it('an object is resident from each event until the eviction delay has passed without another', () => {
    const ev = [0, 4_000, 30_000];
    expect(residentAt(ev, -1, D)).toBe(false);
    expect(residentAt(ev, 0, D)).toBe(true);
    expect(residentAt(ev, 13_999, D)).toBe(true);
    expect(residentAt(ev, 14_000, D)).toBe(false);
    expect(residentAt(ev, 29_999, D)).toBe(false);
    expect(residentAt(ev, 30_000, D)).toBe(true);
    expect(residentAt(ev, 40_000, D)).toBe(false);
  });

  it('predicts a construction for each event that comes at least the delay after the one before it', () => {
    // A read at 0 (object resident), wakes at 5 s (still resident), 25 s and 60 s (each rebuilt),
    // then a final read at 65 s (resident again).
    const ev = [0, 5_000, 25_000, 60_000, 65_000];
    expect(predictedConstructions(ev, 0, 65_000, D)).toBe(2);
    // The span's first event is judged against the one before the span.
    expect(predictedConstructions(ev, 5_000, 65_000, D)).toBe(2);
    expect(predictedConstructions(ev, 25_000, 65_000, D)).toBe(1);
    // A longer delay keeps it in memory across the 20 s gap but not the 35 s one.
    expect(predictedConstructions(ev, 0, 65_000, 30_000)).toBe(1);
  });

  it('counts events in a closed span', () => {
    const ev = ascending([30, 10, 20, 20, 40]);
    expect(countBetween(ev, 20, 30)).toBe(3);
    expect(countBetween(ev, 21, 29)).toBe(0);
    expect(countBetween(ev, 0, 100)).toBe(5);
    expect(countBetween([], 0, 100)).toBe(0);
  });

  it('gives the share of objects out of memory at each instant, and its mean and minimum', () => {
    const a = [0]; // resident 0..10 s
    const b = [5_000]; // resident 5..15 s
    const instants = instantsBetween(0, 20_000, 5_000); // 0, 5, 10, 15, 20 s
    expect(instants).toEqual([0, 5_000, 10_000, 15_000, 20_000]);
    const s = outOfMemoryShare([a, b], instants, D);
    // 0 s: a in, b out (0.5); 5 s: both in (0); 10 s: b in (0.5); 15 s, 20 s: both out (1).
    expect(s.min).toBe(0);
    expect(s.max).toBe(1);
    expect(s.mean).toBeCloseTo((0.5 + 0 + 0.5 + 1 + 1) / 5, 10);
  });

  it('brackets the eviction delay between the longest idle time still resident and the shortest evicted', () => {
    const d = estimateEvictionDelay([
      { idleMs: 8_000, evicted: false },
      { idleMs: 9_500, evicted: false },
      { idleMs: 10_500, evicted: true },
      { idleMs: 14_000, evicted: true },
    ]);
    expect(d).toMatchObject({ lastResidentMs: 9_500, firstEvictedMs: 10_500, delayMs: 10_000, consistent: true, misclassified: 0 });
  });

  it('picks the threshold that misclassifies the fewest probes when they disagree, and says so', () => {
    const d = estimateEvictionDelay([
      { idleMs: 9_000, evicted: false },
      { idleMs: 10_000, evicted: true },
      { idleMs: 11_000, evicted: false },
      { idleMs: 12_000, evicted: true },
      { idleMs: 13_000, evicted: true },
    ]);
    expect(d.consistent).toBe(false);
    expect(d.misclassified).toBe(1);
    expect([9_500, 11_500]).toContain(d.delayMs);
  });

  it('has no delay to offer when nothing was evicted', () => {
    const d = estimateEvictionDelay([{ idleMs: 20_000, evicted: false }]);
    expect(d.delayMs).toBeNaN();
    expect(d.firstEvictedMs).toBe(Number.POSITIVE_INFINITY);
  });
});

describe('bench residency series', () => {
  it('finds the span of instants below a share, and how many there are', () => {
    expect(spanBelow([0, 1, 2, 3, 4], [0.9, 0.4, 0.6, 0.3, 0.8], 0.5)).toEqual({ from: 1, to: 3, count: 2 });
    expect(spanBelow([0, 1], [0.9, 0.8], 0.5)).toBeNull();
  });
});
