/**
 * The session's clock, pure: from its state, its configuration and `now`, the next deadline (the
 * one alarm the object sets) and what is due when the alarm fires. Only real deadlines: a
 * handshake, silence, a hole, a replay window the operator does not release, frames whose ack
 * stands still, retention. Nothing periodic: an idle session sleeps until one comes due.
 */
import type { HubConfig } from '../config';
import { fnv1a } from '../fnv';

export type ClockConfig = Pick<HubConfig, 'HANDSHAKE_TIMEOUT_MS' | 'IDLE_TIMEOUT_MS' | 'HOLE_TIMEOUT_MS' | 'RETENTION_MS'>;

export interface ClockState<K> {
  /** Open connections that have not completed the handshake. */
  handshakes: { key: K; acceptedAt: number }[];
  /**
   * The connection carrying the session, if any, and its last sign of life (frame or answered
   * ping); `phaseCheckAt`: the one extra look after it opened (see `phaseCheckOffset`), or null.
   * Derived from what survives an eviction (the connection's acceptance time and the session id),
   * and a deadline only while it is still ahead: once passed it is spent.
   */
  active: { lastSeen: number; phaseCheckAt?: number | null } | null;
  /** When the oldest frame still unapplied arrived (a hole), or null. */
  oldestUnapplied: number | null;
  /** Since when frames have waited for the operator to release its replay window, or null. */
  windowFullSince: number | null;
  /** Since when frames sent have waited for the operator's ack to move, or null. */
  ackWaitSince: number | null;
  /** The session this object holds, if any (its last connection's end, null while connected). */
  session: { disconnectedAt: number | null } | null;
  /** Any connection still open (a handshake in progress keeps a disconnected session). */
  anyOpen: boolean;
  /**
   * Since when the oldest connection the hub closed has waited for the peer's answer to the close
   * (still CLOSING), or null. Omitted: none.
   */
  closingSince?: number | null;
}

export type Due<K> =
  | { t: 'handshake'; key: K }
  | { t: 'silence' }
  | { t: 'window' }
  | { t: 'hole' }
  /** Re-send what the operator has not acknowledged (it drops what it already has). */
  | { t: 'resend' }
  | { t: 'retention' };

/**
 * How long frames may wait with the operator's ack standing still before they are sent again:
 * twice the silence limit. A frame lost on a connection that stayed up (an intermediary dropped
 * it) is never acknowledged, and the operator sees no gap until another frame follows; a resend
 * on the same connection costs an operator that has them nothing (a duplicate is dropped) and
 * interrupts no handler that is slow to ack, as a close would. The whole window the first time, then
 * only its first frame while the ack stands (send-path.ts `resendUnacked`).
 */
export const resendAfterMs = (cfg: Pick<ClockConfig, 'IDLE_TIMEOUT_MS'>): number => 2 * cfg.IDLE_TIMEOUT_MS;

/**
 * How long a peer has to answer the hub's close before its connection is released anyway: as long
 * as it has to say hello. Local workerd ends the TCP connection of a socket the hub closed only
 * once the peer answers; a peer that never does (gone silent, hence the 4408, or one that ignores
 * close frames) otherwise keeps it open for good (measured: still open 140 s after a 4400, a
 * handshake 4408 and a silence 4408).
 */
export const closeGraceMs = (cfg: Pick<ClockConfig, 'HANDSHAKE_TIMEOUT_MS'>): number => cfg.HANDSHAKE_TIMEOUT_MS;

/**
 * Whether the object should release the connections still waiting on their peer's answer to the
 * hub's close. Only when no connection is open: releasing one means resetting the whole object
 * (session-object.ts), which would cut an open one too.
 */
export function releaseDue<K>(s: ClockState<K>, cfg: ClockConfig, now: number): boolean {
  return s.closingSince != null && !s.anyOpen && now - s.closingSince >= closeGraceMs(cfg);
}

/** The earliest deadline of a connection still in its handshake, or null. */
export function handshakeDeadline<K>(s: Pick<ClockState<K>, 'handshakes'>, cfg: Pick<ClockConfig, 'HANDSHAKE_TIMEOUT_MS'>): number | null {
  let next = Number.POSITIVE_INFINITY;
  for (const h of s.handshakes) next = Math.min(next, h.acceptedAt + cfg.HANDSHAKE_TIMEOUT_MS);
  return Number.isFinite(next) ? next : null;
}

/**
 * When the alarm must next fire, or null when nothing is pending. `handshakes: false`: without the
 * handshake deadlines (kept by a timer instead, session-clock.ts); a handshake in progress still
 * holds retention back.
 */
export function nextDeadline<K>(s: ClockState<K>, cfg: ClockConfig, now: number, handshakes = true): number | null {
  let next = handshakes ? (handshakeDeadline(s, cfg) ?? Number.POSITIVE_INFINITY) : Number.POSITIVE_INFINITY;
  if (s.active) {
    next = Math.min(next, s.active.lastSeen + cfg.IDLE_TIMEOUT_MS);
    const phase = s.active.phaseCheckAt;
    if (phase != null && phase > now) next = Math.min(next, phase);
    if (s.oldestUnapplied !== null) next = Math.min(next, s.oldestUnapplied + cfg.HOLE_TIMEOUT_MS);
    if (s.windowFullSince !== null) next = Math.min(next, s.windowFullSince + cfg.IDLE_TIMEOUT_MS);
    if (s.ackWaitSince !== null) next = Math.min(next, s.ackWaitSince + resendAfterMs(cfg));
  } else if (s.session && s.handshakes.length === 0 && !s.anyOpen) {
    // Not while a connection is in its handshake or open: retention waits for it (`dueNow`), and
    // a deadline already past would re-arm the alarm a millisecond ahead, again and again, until
    // the hello, the handshake deadline (armed above) or the close ends it.
    next = Math.min(next, (s.session.disconnectedAt ?? now) + cfg.RETENTION_MS);
  }
  // Not while one is open (`releaseDue`): the deadline, once past, would re-arm in a loop.
  if (s.closingSince != null && !s.anyOpen) next = Math.min(next, s.closingSince + closeGraceMs(cfg));
  return Number.isFinite(next) ? next : null;
}

/**
 * What is due at `now`, in the order to act on it. On the active connection at most one close:
 * silence first (a dead peer), then a window it never releases (4429), then a hole too old (1013);
 * with none of them, frames whose ack stood still too long are sent again.
 */
export function dueNow<K>(s: ClockState<K>, cfg: ClockConfig, now: number): Due<K>[] {
  const due: Due<K>[] = [];
  for (const h of s.handshakes) if (now - h.acceptedAt >= cfg.HANDSHAKE_TIMEOUT_MS) due.push({ t: 'handshake', key: h.key });
  if (s.active) {
    if (now - s.active.lastSeen >= cfg.IDLE_TIMEOUT_MS) due.push({ t: 'silence' });
    else if (s.windowFullSince !== null && now - s.windowFullSince >= cfg.IDLE_TIMEOUT_MS) due.push({ t: 'window' });
    else if (s.oldestUnapplied !== null && now - s.oldestUnapplied >= cfg.HOLE_TIMEOUT_MS) due.push({ t: 'hole' });
    else if (s.ackWaitSince !== null && now - s.ackWaitSince >= resendAfterMs(cfg)) due.push({ t: 'resend' });
  } else if (s.session && !s.anyOpen && now - (s.session.disconnectedAt ?? now) >= cfg.RETENTION_MS) {
    due.push({ t: 'retention' });
  }
  return due;
}

/**
 * When, after a session opens, its one extra silence check comes: between one silence limit and
 * two (30–60 s at the spec's 30 s), fixed by the session id.
 *
 * An idle session is woken only by its silence check, which re-arms for the limit after the last
 * ping the runtime answered; the ping due at that very moment is already in (an alarm runs a few
 * ms late), so the deadline moves a whole limit and the session keeps the phase it opened with. A
 * fleet that opened together (a hub restart, a reconnect storm) would then wake in crests for as
 * long as it lives, and at a crest most of its objects are in memory at once (a 1,000-session
 * fleet opened within 16 s: never fewer than 36% out of memory, against a mean of 67%). The extra
 * check takes the next deadline from whichever ping came last by then, and so picks which of the
 * limit's ping slots (three at 10 s pings) the session's phase falls in. The check's time must
 * span a whole limit for every slot to be equally likely: over 20 s (30–50 s, as it was) one slot
 * got half the fleet, and a fleet opened within 5 s still woke in crests (45% out of memory at
 * the lowest, bench/RESULTS.md, where the same model gives 64% now). A check after the second
 * silence check (when it falls late in the span) changes nothing, but every session pays one
 * such wake either way. It comes after the first silence check, not before, so that a storm of
 * connections is not also a storm of these wakes.
 */
export function phaseCheckOffset(sessionId: string, idleTimeoutMs: number): number {
  const span = Math.max(1, idleTimeoutMs);
  // The same session always gets the same offset.
  return idleTimeoutMs + (fnv1a(sessionId) % span);
}
