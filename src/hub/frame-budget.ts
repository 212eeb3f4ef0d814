import type { HubConfig } from './config';

/**
 * Durable Object SQLite refuses a string, blob or row over 2 MB (SQLITE_TOOBIG): a replay-buffer
 * row holds one frame, so no frame larger than this can be made durable, hence sent.
 */
export const REPLAY_ROW_MAX_BYTES = 1_900_000;

/**
 * The largest frame the hub sends: what it tells operators a frame may be (welcome's
 * max_frame_bytes, which the hub itself enforces on what it receives), and never more than a
 * replay-buffer row holds. The admin API refuses desired state over it; the send path replaces
 * anything over it with an error frame (send-path.ts) instead of failing on it forever.
 */
export function sendableFrameBytes(cfg: HubConfig): number {
  return Math.min(cfg.MAX_FRAME_BYTES, REPLAY_ROW_MAX_BYTES);
}

/** Room kept in the send queue for what follows a page (resync.begin, stream.end, error replies). */
export const QUEUE_RESERVE_BYTES = 64 << 10;

/**
 * How many bytes of desired state the next page may fetch with `queuedBytes` already waiting in
 * the send queue. A page always holds its first row and then stops before the budget is spent
 * (db/desired.ts), so it can overshoot by at most one frame: that frame's worth stays free.
 * Bounded by DESIRED_PAGE_BYTES too, which keeps a page well inside the 32 MiB the gateway's
 * RPC carries. Zero or less: wait for the queue to drain.
 */
export function desiredPageBytes(cfg: HubConfig, queuedBytes: number): number {
  return Math.min(cfg.DESIRED_PAGE_BYTES, cfg.SEND_QUEUE_BYTES - queuedBytes - sendableFrameBytes(cfg) - QUEUE_RESERVE_BYTES);
}

/**
 * The bytes of a fresh session's first snapshot page, read with its claim and returned through
 * the gateway's RPC: queued at once into the empty send queue, so it must fit there too.
 */
export function claimPageBytes(cfg: HubConfig): number {
  return Math.max(0, Math.min(cfg.CLAIM_SNAPSHOT_BYTES, desiredPageBytes(cfg, 0)));
}

/** The send queue holds a page's worth besides the largest frame (checked at startup, config.ts). */
export function minSendQueueBytes(cfg: Pick<HubConfig, 'MAX_FRAME_BYTES'>): number {
  return 2 * Math.min(cfg.MAX_FRAME_BYTES, REPLAY_ROW_MAX_BYTES) + QUEUE_RESERVE_BYTES;
}
