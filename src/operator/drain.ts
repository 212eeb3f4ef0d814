/**
 * When a graceful stop is done waiting, and whether it may call itself clean, pure.
 */
export interface DrainView {
  /** A welcomed link is up (without one nothing more can drain). */
  linkOpen: boolean;
  outboxEmpty: boolean;
  /** Frames written and not acknowledged by the hub. */
  unacked: number;
  /** Hub frames read and not yet settled. */
  inboundPending: number;
  runningOperations: number;
  lastAckSent: number;
  cursor: number;
}

/**
 * Everything sent is acknowledged, everything read is settled and its cursor acked. Without a
 * link nothing more can drain, but the operations asked to stop still settle: the conclusion they
 * reach must be in the final record, not replaced by "interrupted" in the next process. So do
 * the hub frames whose handlers are running: a revision one applies behind a hole must be in the
 * final record, or the next process renders the older frame the hub replays over it.
 */
export function isDrained(v: DrainView): boolean {
  if (!v.linkOpen) return v.runningOperations === 0 && v.inboundPending === 0;
  return v.outboxEmpty && v.unacked === 0 && v.inboundPending === 0 && v.runningOperations === 0 && v.lastAckSent >= v.cursor;
}

/**
 * A stop is clean (the record may say so, and the restart resume without a resync even with an
 * in-memory buffer) only when it was graceful and left nothing unsent, unacknowledged, unsettled
 * or running.
 */
export function isCleanStop(graceful: boolean, v: Omit<DrainView, 'linkOpen' | 'lastAckSent' | 'cursor'>): boolean {
  return graceful && v.outboxEmpty && v.unacked === 0 && v.inboundPending === 0 && v.runningOperations === 0;
}
