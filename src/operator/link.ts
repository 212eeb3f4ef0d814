/**
 * One WebSocket link to the hub, from its dial to its close, with its own clocks: the silence
 * limit, the ping cadence and the handshake deadline. Nothing on a link outlives it; the session
 * (cursors, numbering, replay buffer) belongs to the client and continues on the next link.
 */
import type { ReplayEntry } from '../protocol';
import type { RefusalError } from './refusal';
import { elapsed, type Timers } from './timers';
import type { Transport } from './transport';

const NOOP = () => {};

export type Silence = { expired: true; silentMs: number } | { expired: false; checkInMs: number };

/** The silence rule, pure: has `idleMs` passed without a frame, and if not, when to look again. */
export function silence(now: number, lastFrameAt: number, idleMs: number): Silence {
  const silentMs = now - lastFrameAt;
  return silentMs >= idleMs ? { expired: true, silentMs } : { expired: false, checkInMs: idleMs - silentMs };
}

export class Link {
  transport: Transport | null = null;
  welcomed = false;
  welcomedAt = 0;
  ended = false;
  closing = false;
  /** Highest cursor written as `ack` on this link. */
  lastAckSent = 0;
  lastFrameAt: number;
  /** Frames to re-send first after a resumed welcome (their original text). */
  replay: ReplayEntry[] | null = null;
  /** The connection-level error (`seq: null`) the hub sent on this link: why it is closing it. */
  connectionError: RefusalError | null = null;
  /**
   * Since when sequenced frames written on this link have waited for the hub's ack to move (the
   * later of the first write nothing acked yet covers and the last ack that moved), or null.
   */
  private ackWaitSince: number | null = null;
  private ackLimit: { limitMs: () => number; onStalled: (waitedMs: number) => void } | null = null;
  private cancelPing = NOOP;
  private cancelIdle = NOOP;
  /** What `watchSilence` watches with, to look again when the limits change. */
  private silence: { idleMs: () => number; look: () => void } | null = null;
  private cancelAckWait = NOOP;
  private ackLookPending = false;
  private cancelHandshake = NOOP;

  constructor(private readonly timers: Timers) {
    this.lastFrameAt = elapsed(timers);
  }

  /** Monotonic ms: what the link's times (`lastFrameAt`, `welcomedAt`, the ack wait) are read on. */
  clock(): number {
    return elapsed(this.timers);
  }

  /** Welcomed, not closing, not ended: sequenced frames may be written. */
  get open(): boolean {
    return this.welcomed && !this.closing && !this.ended;
  }

  /** Write one text frame; false when the link cannot carry it. */
  write(text: string): boolean {
    if (!this.transport || this.ended) return false;
    this.transport.send(text);
    return true;
  }

  /** A frame of any kind arrived. */
  heard(): void {
    this.lastFrameAt = this.clock();
  }

  /** Call `onSilent` once no frame came for `idleMs()` (read at every look: a welcome changes it). */
  watchSilence(idleMs: () => number, onSilent: (silentMs: number) => void): void {
    const look = () => {
      if (this.ended) return;
      const s = silence(this.clock(), this.lastFrameAt, idleMs());
      if (s.expired) return onSilent(s.silentMs);
      this.cancelIdle = this.timers.schedule(look, s.checkInMs);
    };
    this.silence = { idleMs, look };
    this.cancelIdle();
    this.cancelIdle = this.timers.schedule(look, idleMs());
  }

  /**
   * The limits changed (the welcome's): the look scheduled under the old idle limit may come too
   * late for a lower one (a first link watches by the spec's 30 s until the welcome says 3 s).
   */
  limitsChanged(): void {
    if (!this.silence || this.ended) return;
    const { idleMs, look } = this.silence;
    this.cancelIdle();
    this.cancelIdle = this.timers.schedule(look, Math.max(0, idleMs() - (this.clock() - this.lastFrameAt)));
  }

  /** Sequenced frames went out on this link. */
  wroteSequenced(): void {
    if (this.ackWaitSince !== null) return;
    this.ackWaitSince = this.clock();
    this.lookAtAckWait();
  }

  /**
   * The hub's ack moved; `allAcked`: nothing sent is waiting for it any more. Called per ack, so
   * it only moves the start: a look already scheduled finds it and looks again when it is due.
   */
  ackAdvanced(allAcked: boolean): void {
    // Progress: the wait starts again from now (frames written on an earlier link included).
    this.ackWaitSince = allAcked ? null : this.clock();
    if (!allAcked) this.lookAtAckWait();
  }

  /**
   * Call `onStalled` once sequenced frames have waited `limitMs()` with the hub's ack not moving.
   * A frame lost on a link that stayed up (a proxy that dropped it) would otherwise never be
   * acked: the hub never saw it, so it has no hole to close the link over, and while nothing
   * sequenced follows it no gap shows either. Closing makes the resume replay it. No timer runs
   * once nothing waits; the limit is read at every look (frames go out only after the welcome,
   * which may change it).
   */
  watchAckWait(limitMs: () => number, onStalled: (waitedMs: number) => void): void {
    this.ackLimit = { limitMs, onStalled };
  }

  /** Schedule a look unless one is pending; each look re-arms from the current start. */
  private lookAtAckWait(): void {
    const watch = this.ackLimit;
    if (!watch || this.ended || this.ackLookPending) return;
    const look = () => {
      this.ackLookPending = false;
      if (this.ended || this.ackWaitSince === null) return;
      // The silence rule's arithmetic: has the limit passed since the wait started.
      const w = silence(this.clock(), this.ackWaitSince, watch.limitMs());
      if (w.expired) return watch.onStalled(w.silentMs);
      this.ackLookPending = true;
      this.cancelAckWait = this.timers.schedule(look, w.checkInMs);
    };
    this.ackLookPending = true;
    this.cancelAckWait = this.timers.schedule(look, watch.limitMs());
  }

  /** `ping()` every `intervalMs` while the link lives. */
  startPinging(intervalMs: number, ping: () => void): void {
    this.cancelPing = this.timers.schedule(() => {
      if (this.ended) return;
      ping();
      this.startPinging(intervalMs, ping);
    }, intervalMs);
  }

  /** Call `onTimeout` unless a welcome arrives within `ms`. */
  expectWelcome(ms: number, onTimeout: () => void): void {
    this.cancelHandshake = this.timers.schedule(() => {
      if (!this.welcomed && !this.ended) onTimeout();
    }, ms);
  }

  welcome(): void {
    this.welcomed = true;
    this.welcomedAt = this.clock();
    this.cancelHandshake();
  }

  /** The link is over: stop its clocks. False when it already was. */
  end(): boolean {
    if (this.ended) return false;
    this.ended = true;
    this.cancelPing();
    this.cancelIdle();
    this.cancelAckWait();
    this.cancelHandshake();
    return true;
  }
}
