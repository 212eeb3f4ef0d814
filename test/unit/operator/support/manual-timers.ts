import type { Timers } from '../../../../src/operator/timers';

/**
 * Time that moves only when a test says so. Callbacks run in due order, synchronously. The wall
 * clock (`now`) can also be stepped on its own (`stepWallClock`), as NTP steps a drifted node's:
 * timers and `elapsed` keep counting from where they were.
 */
export class ManualTimers implements Timers {
  /** Monotonic time: what `schedule` and `elapsed` count on. */
  private t: number;
  /** How far the wall clock was stepped from the monotonic one. */
  private wallStep = 0;
  private nextId = 0;
  private readonly tasks = new Map<number, { at: number; fn: () => void }>();

  constructor(start = Date.parse('2026-08-19T14:00:00.000Z')) {
    this.t = start;
  }

  now(): number {
    return this.t + this.wallStep;
  }

  elapsed(): number {
    return this.t;
  }

  /** Step the wall clock by `ms` (negative: backwards); nothing scheduled runs or moves. */
  stepWallClock(ms: number): void {
    this.wallStep += ms;
  }

  schedule(fn: () => void, ms: number): () => void {
    const id = this.nextId++;
    this.tasks.set(id, { at: this.t + Math.max(0, ms), fn });
    return () => {
      this.tasks.delete(id);
    };
  }

  /** Move time forward, running every callback that falls due on the way. */
  advance(ms: number): void {
    const end = this.t + ms;
    for (;;) {
      let best: [number, { at: number; fn: () => void }] | null = null;
      for (const entry of this.tasks) {
        if (entry[1].at <= end && (!best || entry[1].at < best[1].at || (entry[1].at === best[1].at && entry[0] < best[0]))) {
          best = entry;
        }
      }
      if (!best) break;
      this.tasks.delete(best[0]);
      this.t = Math.max(this.t, best[1].at);
      best[1].fn();
    }
    this.t = end;
  }

  /** When the earliest pending callback is due, relative to now (null: none). */
  nextDueIn(): number | null {
    let min: number | null = null;
    for (const { at } of this.tasks.values()) if (min === null || at < min) min = at;
    return min === null ? null : min - this.t;
  }

  get pending(): number {
    return this.tasks.size;
  }
}
