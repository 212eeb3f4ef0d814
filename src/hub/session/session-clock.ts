import type { HubConfig } from '../config';
import { handshakeDeadline, nextDeadline, type ClockState } from './clock';

export interface ClockHost {
  storage: DurableObjectStorage;
  cfg: HubConfig;
  state(): ClockState<WebSocket>;
  /** Whether the object holds a session (anything durable to keep a clock for). */
  hasSession(): boolean;
  /** Just before the alarm is written: whatever else is due a write joins its commit. */
  writing(): void;
  /** The in-memory clock came due: do what the alarm would. */
  due(): void;
}

/**
 * When the session object next needs to run: the alarm, read once and then known (only this
 * object sets it). Handshake deadlines are kept in memory instead, so an upgrade writes nothing
 * before its 101: a fresh object holds nothing else, and at a resume the alarm would otherwise be
 * moved up to the new connection's deadline (a commit the 101 waited for: a disk sync locally, a
 * replicated write in a deployment) only to be moved back by the hello a few milliseconds later.
 * A pending timer keeps the object from hibernating until the hello, and an object that goes
 * anyway takes its connections with it.
 */
export class SessionClock {
  /** The alarm as last set (null: none; undefined: not read yet since construction). */
  private alarmAt: number | null | undefined;
  private timer: ReturnType<typeof setTimeout> | null = null;

  constructor(
    private readonly host: ClockHost,
    fresh: boolean,
  ) {
    // A brand-new object has no alarm; an object with a session may (read it when first needed).
    this.alarmAt = fresh ? null : undefined;
  }

  /** The alarm fired, or was deleted with the storage. */
  lapsed(): void {
    this.alarmAt = null;
  }

  /**
   * A deadline that may have come up sooner than the alarm as set (a frame left unapplied: the
   * hole's): set the alarm again only if it would come later, or none is set, or it is not known.
   * An in-memory comparison otherwise, so it can run at every frame.
   */
  dueBy(deadline: number): void {
    if (typeof this.alarmAt === 'number' && this.alarmAt <= deadline) return;
    void this.schedule();
  }

  /**
   * Set the alarm for the next deadline. `notBefore`: after a run that failed, no sooner than
   * this, or a deadline already past (the one whose action threw) would re-arm the alarm a
   * millisecond ahead, again and again, a storage write and an error line each time.
   */
  async schedule(notBefore?: number): Promise<void> {
    const now = Date.now();
    const state = this.host.state();
    const notSooner = (due: number | null) => (due === null || notBefore === undefined ? due : Math.max(due, notBefore));
    if (!this.host.hasSession()) return this.arm(notSooner(nextDeadline(state, this.host.cfg, now)));
    this.arm(notSooner(handshakeDeadline(state, this.host.cfg)));
    const next = notSooner(nextDeadline(state, this.host.cfg, now, false));
    if (next === null) return;
    if (this.alarmAt === undefined) this.alarmAt = await this.host.storage.getAlarm();
    // Moved later too: an alarm that finds nothing due wakes a sleeping object for nothing,
    // which costs more than the write.
    const target = Math.max(next, now + 1);
    if (this.alarmAt !== target) {
      // Cached before the write, so that calls meanwhile do not write it again.
      this.alarmAt = target;
      try {
        this.host.writing();
        await this.host.storage.setAlarm(target);
      } catch (err) {
        // Not known to be set: a cache of an alarm storage never took would skip every later
        // write of it (`dueBy`, `schedule`), and a deadline no alarm covers is never acted on.
        this.alarmAt = undefined;
        throw err;
      }
    }
  }

  private arm(at: number | null): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    if (at === null) return;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.host.due();
      },
      Math.max(1, at - Date.now()),
    );
  }
}
