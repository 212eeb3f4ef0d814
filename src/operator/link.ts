/**
 * One WebSocket link to the hub, from its dial to its close, with its own clocks: the silence
 * limit, the ping cadence and the handshake deadline. Nothing on a link outlives it; the session
 * (cursors, numbering, replay buffer) belongs to the client and continues on the next link.
 */
import type { ReplayEntry } from '../protocol';
import type { RefusalError } from './refusal';
import type { Timers } from './timers';
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
  private cancelPing = NOOP;
  private cancelIdle = NOOP;
  private cancelHandshake = NOOP;

  constructor(private readonly timers: Timers) {
    this.lastFrameAt = timers.now();
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
    this.lastFrameAt = this.timers.now();
  }

  /** Call `onSilent` once no frame came for `idleMs()` (read at every look: a welcome changes it). */
  watchSilence(idleMs: () => number, onSilent: (silentMs: number) => void): void {
    const look = () => {
      if (this.ended) return;
      const s = silence(this.timers.now(), this.lastFrameAt, idleMs());
      if (s.expired) return onSilent(s.silentMs);
      this.cancelIdle = this.timers.schedule(look, s.checkInMs);
    };
    this.cancelIdle();
    this.cancelIdle = this.timers.schedule(look, idleMs());
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
    this.welcomedAt = this.timers.now();
    this.cancelHandshake();
  }

  /** The link is over: stop its clocks. False when it already was. */
  end(): boolean {
    if (this.ended) return false;
    this.ended = true;
    this.cancelPing();
    this.cancelIdle();
    this.cancelHandshake();
    return true;
  }
}
