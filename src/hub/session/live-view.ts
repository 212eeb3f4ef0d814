import { ZERO_COUNTERS, type SessionCounters, type SessionMeta } from './store';
import type { WakeStats } from './wakes';

/** What the admin API shows for a session (the session object's own view, or its last check). */
export interface LiveView {
  /** Changes whenever the object is constructed again (after an eviction or a restart). */
  instance: string;
  connected: boolean;
  session_id: string | null;
  generation: number | null;
  opened_at: string | null;
  /** The hub's contiguous cursor of the operator's stream (applied in Postgres). */
  hub_cursor: number;
  hub_expected: number;
  /** Frames accepted and not yet applied. */
  pending_apply: number;
  /** Subjects (a node, a GPU, …) whose frames are set aside after a transient failure; later frames still apply. */
  held_subjects: number;
  /** Batch statements sent to Postgres and not yet answered: up to two (the second queued behind the first). */
  apply_statements_in_flight: number;
  /** The hub's last sent seq and the operator's cursor of it. */
  last_sent_seq: number;
  operator_cursor: number;
  replay_buffer_frames: number;
  replay_buffer_bytes: number;
  send_queue_frames: number;
  /** The last sign of life: a frame, or a ping the runtime answered. */
  last_frame_at: string | null;
  /** The highest desired revision written into the session's stream (sent, or queued to be). */
  desired_watermark: number;
  resync_in_progress: boolean;
  /**
   * The operator's own resync streams open (a `resync.begin` no `stream.end` has closed yet), and
   * since when the oldest is: a stream never ended is never pruned against, and nothing but more
   * streams (past 16) or a fresh session ends it, while every other frame keeps flowing.
   */
  operator_resyncs_open: number;
  operator_resync_open_since: string | null;
  counters: SessionCounters;
  /** How often the object has been woken (events delivered) and brought into memory. */
  wakes: { total: number; constructions: number; by_kind: Record<string, number> };
}

export interface LiveViewInput {
  instance: string;
  connected: boolean;
  meta: SessionMeta | null;
  inbound: { cursor: number; expected: number };
  outbound: { lastSent: number; peerAck: number; unacked: number; bytes: number };
  pendingApply: number;
  heldSubjects: number;
  applyInFlight: number;
  /** Frames waiting to be numbered: the queue and the answers owed to the operator. */
  sendQueue: number;
  lastSeen: number;
  wakes: WakeStats;
}

export function buildLiveView(i: LiveViewInput): LiveView {
  const m = i.meta;
  return {
    instance: i.instance,
    connected: i.connected,
    session_id: m?.sessionId ?? null,
    generation: m?.generation ?? null,
    opened_at: m ? new Date(m.openedAt).toISOString() : null,
    hub_cursor: i.inbound.cursor,
    hub_expected: i.inbound.expected,
    pending_apply: i.pendingApply,
    held_subjects: i.heldSubjects,
    apply_statements_in_flight: i.applyInFlight,
    last_sent_seq: i.outbound.lastSent,
    operator_cursor: i.outbound.peerAck,
    replay_buffer_frames: i.outbound.unacked,
    replay_buffer_bytes: i.outbound.bytes,
    send_queue_frames: i.sendQueue,
    last_frame_at: i.lastSeen ? new Date(i.lastSeen).toISOString() : null,
    desired_watermark: m?.desiredWatermark ?? 0,
    resync_in_progress: m?.hubResync !== null && m?.hubResync !== undefined,
    ...openResyncs(m),
    counters: m?.counters ?? { ...ZERO_COUNTERS },
    wakes: { total: i.wakes.wakes, constructions: i.wakes.constructions, by_kind: i.wakes.byKind },
  };
}

function openResyncs(m: SessionMeta | null): Pick<LiveView, 'operator_resyncs_open' | 'operator_resync_open_since'> {
  const open = Object.values(m?.opResyncs ?? {});
  let since: number | null = null;
  for (const r of open) if (r.beganAt !== undefined && (since === null || r.beganAt < since)) since = r.beganAt;
  return { operator_resyncs_open: open.length, operator_resync_open_since: since === null ? null : new Date(since).toISOString() };
}
