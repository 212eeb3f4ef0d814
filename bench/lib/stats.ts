/** Order statistics for benchmark samples. Pure; no clocks. */

export interface Summary {
  n: number;
  min: number;
  max: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
}

/** The q-quantile (0..1) of already sorted values, linearly interpolated. */
export function quantileSorted(sorted: readonly number[], q: number): number {
  if (sorted.length === 0) return Number.NaN;
  if (sorted.length === 1) return sorted[0] as number;
  const pos = (sorted.length - 1) * Math.min(1, Math.max(0, q));
  const lo = Math.floor(pos);
  const hi = Math.ceil(pos);
  const a = sorted[lo] as number;
  const b = sorted[hi] as number;
  return a + (b - a) * (pos - lo);
}

export function sortedCopy(values: readonly number[]): number[] {
  // Typed-array sort is numeric (Array#sort would compare as strings).
  return Array.from(Float64Array.from(values).sort());
}

export function median(values: readonly number[]): number {
  return quantileSorted(sortedCopy(values), 0.5);
}

export function percentile(values: readonly number[], p: number): number {
  return quantileSorted(sortedCopy(values), p / 100);
}

export function summarize(values: readonly number[]): Summary {
  const s = sortedCopy(values);
  let sum = 0;
  for (const v of s) sum += v;
  return {
    n: s.length,
    min: s.length ? (s[0] as number) : Number.NaN,
    max: s.length ? (s[s.length - 1] as number) : Number.NaN,
    mean: s.length ? sum / s.length : Number.NaN,
    p50: quantileSorted(s, 0.5),
    p90: quantileSorted(s, 0.9),
    p99: quantileSorted(s, 0.99),
  };
}

/**
 * A figure measured once per repetition: the median across repetitions and the min–max range.
 * This is what RESULTS.md reports for every headline number.
 */
export interface Repeated {
  median: number;
  min: number;
  max: number;
  runs: number[];
}

export function repeated(runs: readonly number[]): Repeated {
  const finite = runs.filter((v) => Number.isFinite(v));
  const s = sortedCopy(finite);
  return {
    median: quantileSorted(s, 0.5),
    min: s.length ? (s[0] as number) : Number.NaN,
    max: s.length ? (s[s.length - 1] as number) : Number.NaN,
    runs: [...runs],
  };
}

/** Median of each field across per-repetition summaries (e.g. the median p99 over 3 runs). */
export function repeatedField<T>(items: readonly T[], pick: (t: T) => number): Repeated {
  return repeated(items.map(pick));
}
