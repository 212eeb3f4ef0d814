/**
 * The clock and timer the SDK schedules its policy delays with (ping cadence, idle limit, ack
 * delay, reconnect backoff, handler retries, operation deadlines, the drain bound). Injected so
 * tests can drive time by hand instead of sleeping; I/O itself is never faked.
 */
export interface Timers {
  /** Wall-clock milliseconds (operation deadlines are wall-clock timestamps). */
  now(): number;
  /**
   * Monotonic milliseconds, from any origin: what durations are measured on (the silence and ack
   * limits). The wall clock steps (NTP correcting a drifted node, a VM resumed): measured on it,
   * a step back by an hour would stretch a 30 s limit by that hour and a step forward would end
   * it at once. Optional for timers written before it; those measure on `now()`.
   */
  elapsed?(): number;
  /** Run `fn` after `ms`; returns a function that cancels it (idempotent). */
  schedule(fn: () => void, ms: number): () => void;
}

/** Node's own timers, clamped to what setTimeout can express (about 24.8 days). */
export const systemTimers: Timers = {
  now: () => Date.now(),
  elapsed: () => performance.now(),
  schedule(fn, ms) {
    const t = setTimeout(fn, Math.min(Math.max(0, ms), MAX_TIMEOUT_MS));
    return () => clearTimeout(t);
  },
};

/** `timers.elapsed()`, or the wall clock for timers that have no monotonic one. */
export function elapsed(timers: Timers): number {
  return timers.elapsed ? timers.elapsed() : timers.now();
}

export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/**
 * Run `fn` at the wall-clock time `at`, however far off: one timer cannot wait longer than
 * MAX_TIMEOUT_MS, and one clamped to it would fire early. Returns a cancel (idempotent).
 */
export function scheduleAt(timers: Timers, at: number, fn: () => void): () => void {
  let cancel = () => {};
  const arm = () => {
    const left = at - timers.now();
    cancel = left > MAX_TIMEOUT_MS ? timers.schedule(arm, MAX_TIMEOUT_MS) : timers.schedule(fn, left);
  };
  arm();
  return () => cancel();
}
