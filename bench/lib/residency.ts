/**
 * Whether a session object is in workerd's memory, inferred from when things reached it. Pure.
 *
 * The model: local workerd keeps an object in memory while it handles an event and evicts it a
 * fixed delay after its last one (measured per run, see `estimateEvictionDelay`); the next event
 * brings it back (a construction). So an object is resident at `t` when some event `e ≤ t` has
 * `t − e < delay`, and each event that comes `≥ delay` after the one before it is a construction.
 * Events are the wakes the object counts itself (frames, closes, alarms, pokes: its `recent`
 * times) and the benchmark's own reads of those counters, which reach it but are not counted as
 * wakes. The benchmark checks the model against the object's own construction counter.
 */

/** Ascending copy of `xs` (numeric). */
export function ascending(xs: readonly number[]): number[] {
  return Array.from(Float64Array.from(xs).sort());
}

/** Index of the last element `≤ t` in ascending `xs`, or -1. */
function lastAtOrBefore(xs: readonly number[], t: number): number {
  let lo = 0;
  let hi = xs.length - 1;
  let found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if ((xs[mid] as number) <= t) {
      found = mid;
      lo = mid + 1;
    } else hi = mid - 1;
  }
  return found;
}

/** Resident at `t`: an event at or before `t` less than `delayMs` earlier. `events` ascending. */
export function residentAt(events: readonly number[], t: number, delayMs: number): boolean {
  const i = lastAtOrBefore(events, t);
  return i >= 0 && t - (events[i] as number) < delayMs;
}

/**
 * Constructions the model predicts in `(from, to]`: events in that span that arrive `≥ delayMs`
 * after the event before them (wherever that one is). `events` ascending and complete back to at
 * least one event before `from` (else the first one in the span is counted as a construction).
 */
export function predictedConstructions(events: readonly number[], from: number, to: number, delayMs: number): number {
  let n = 0;
  for (let i = 0; i < events.length; i++) {
    const e = events[i] as number;
    if (e <= from || e > to) continue;
    const prev = i > 0 ? (events[i - 1] as number) : Number.NEGATIVE_INFINITY;
    if (e - prev >= delayMs) n++;
  }
  return n;
}

/** Number of elements `< t` in ascending `xs`. */
function countBefore(xs: readonly number[], t: number): number {
  let lo = 0;
  let hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((xs[mid] as number) < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Events in `[from, to]` of ascending `events`. */
export function countBetween(events: readonly number[], from: number, to: number): number {
  return Math.max(0, lastAtOrBefore(events, to) + 1 - countBefore(events, from));
}

export interface OutOfMemory {
  /** Share of objects not resident, averaged over the instants. */
  mean: number;
  /** The lowest share at any sampled instant. */
  min: number;
  max: number;
  instants: number;
}

/** At each instant, the share of the objects that are not resident. */
export function outOfMemorySeries(timelines: readonly (readonly number[])[], instants: readonly number[], delayMs: number): number[] {
  return instants.map((t) => {
    let out = 0;
    for (const ev of timelines) if (!residentAt(ev, t, delayMs)) out++;
    return timelines.length ? out / timelines.length : Number.NaN;
  });
}

/** The share out of memory at each instant, summarised over the instants. */
export function outOfMemoryShare(timelines: readonly (readonly number[])[], instants: readonly number[], delayMs: number): OutOfMemory {
  if (timelines.length === 0 || instants.length === 0) return { mean: Number.NaN, min: Number.NaN, max: Number.NaN, instants: instants.length };
  const series = outOfMemorySeries(timelines, instants, delayMs);
  let sum = 0;
  for (const x of series) sum += x;
  return { mean: sum / series.length, min: Math.min(...series), max: Math.max(...series), instants: series.length };
}

/** The first and last instants whose share is below `threshold`, or null when none is. */
export function spanBelow(instants: readonly number[], series: readonly number[], threshold: number): { from: number; to: number; count: number } | null {
  let from = Number.NaN;
  let to = Number.NaN;
  let count = 0;
  series.forEach((x, i) => {
    if (x >= threshold) return;
    count++;
    if (Number.isNaN(from)) from = instants[i] as number;
    to = instants[i] as number;
  });
  return count ? { from, to, count } : null;
}

/** Evenly spaced instants from `from` to `to` (inclusive of `from`), `stepMs` apart. */
export function instantsBetween(from: number, to: number, stepMs: number): number[] {
  const out: number[] = [];
  for (let t = from; t <= to; t += stepMs) out.push(t);
  return out;
}

/** One probe: an object left alone `idleMs` after an event it handled; was it rebuilt by the next read? */
export interface EvictionProbe {
  idleMs: number;
  evicted: boolean;
}

export interface EvictionDelay {
  /** Longest idle time after which an object was still resident (0 when none was). */
  lastResidentMs: number;
  /** Shortest idle time after which an object had been evicted (Infinity when none had). */
  firstEvictedMs: number;
  /**
   * The delay the model uses: the threshold that classifies the most probes right (resident
   * below it, evicted at or above it), midway between neighbouring idle times; NaN when no probe
   * was evicted.
   */
  delayMs: number;
  /** Every probe idle longer than the shortest eviction was evicted, and every shorter one resident. */
  consistent: boolean;
  /** Probes the chosen threshold classifies wrongly (0 when consistent). */
  misclassified: number;
}

/** The eviction delay bracketed by probes at several idle times. */
export function estimateEvictionDelay(probes: readonly EvictionProbe[]): EvictionDelay {
  const resident = probes.filter((p) => !p.evicted).map((p) => p.idleMs);
  const evicted = probes.filter((p) => p.evicted).map((p) => p.idleMs);
  const lastResidentMs = resident.length ? Math.max(...resident) : 0;
  const firstEvictedMs = evicted.length ? Math.min(...evicted) : Number.POSITIVE_INFINITY;
  const consistent = lastResidentMs < firstEvictedMs;
  if (evicted.length === 0) return { lastResidentMs, firstEvictedMs, delayMs: Number.NaN, consistent, misclassified: 0 };
  const idle = ascending([...new Set(probes.map((p) => p.idleMs))]);
  const candidates = [(idle[0] as number) / 2, ...idle.slice(1).map((v, i) => ((idle[i] as number) + v) / 2)];
  let best = { delayMs: Number.NaN, misclassified: Number.POSITIVE_INFINITY };
  for (const c of candidates) {
    const wrong = probes.filter((p) => (p.idleMs >= c) !== p.evicted).length;
    if (wrong < best.misclassified) best = { delayMs: c, misclassified: wrong };
  }
  return { lastResidentMs, firstEvictedMs, ...best, consistent };
}
