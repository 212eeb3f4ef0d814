import { InboundSequencer, OutboundSequencer, type AckOutcome } from '../../protocol';
import type { HubConfig } from '../config';
import type { SessionFence } from '../db/ingest';
import type { Logger } from '../log';
import { addCounters, type Settled } from './inbound';
import { forgetCountedThrough, inRanges } from './ingest-streams';
import type { SessionSql } from './schema';
import type { OpResync } from './store';
import { SessionStore, type SessionMeta } from './store';

const LAST_FRAME_PERSIST_MS = 1_000;

/**
 * The last frame's time as a rebuilt object must assume it. Stored at most once a second, the
 * stored time may be up to that second older than the last frame (one that came within the second
 * and committed nothing, a bare ack, is only in memory): read as it is, the silence deadline would
 * close a connection before it had been silent for IDLE_TIMEOUT_MS. So the latest time it can have
 * been, never later than now: a close may come up to a second late, never early.
 */
export function lastFrameAfterReload(stored: number, now: number): number {
  return Math.max(stored, Math.min(stored + LAST_FRAME_PERSIST_MS, now));
}

/**
 * The session this object holds, as it lives in the object's SQLite: the record (meta), both
 * sequencers over the stored replay buffer, and the logger that names it. Memory is only a cache
 * of storage; every transition here writes before it returns.
 */
export class SessionState {
  readonly store: SessionStore;
  meta: SessionMeta | null;
  outbound: OutboundSequencer;
  inbound: InboundSequencer;
  /** The last frame's arrival (persisted at most once a second). */
  lastFrameAt: number;
  log: Logger;
  private lastFramePersistedAt = 0;

  constructor(
    storage: DurableObjectStorage,
    sql: SessionSql,
    private readonly cfg: HubConfig,
    private readonly baseLog: Logger,
  ) {
    this.store = new SessionStore(storage, sql, cfg.REPLAY_BUFFER_FRAMES);
    this.meta = this.store.loadMeta();
    this.outbound = new OutboundSequencer(this.store.replay, this.limits(), this.meta?.out);
    this.inbound = new InboundSequencer(this.meta?.inCursor ?? 0);
    // Only a connected session's stored time can lag (a disconnected one's was written exactly at
    // its disconnect), and only its silence deadline needs the bound.
    this.lastFrameAt = !this.meta ? 0 : this.meta.disconnectedAt === null ? lastFrameAfterReload(this.meta.lastFrameAt, Date.now()) : this.meta.lastFrameAt;
    this.log = this.logFor(this.meta);
  }

  /** A fresh session: numbering restarts at 1 both ways and both buffers are dropped. */
  openFresh(build: (out: SessionMeta['out']) => SessionMeta): SessionMeta {
    this.outbound.reset();
    this.inbound.reset();
    // Answers owed under the old numbering go with its replay buffer: the resync supersedes them.
    this.store.owed.clear();
    return this.install(build(this.outbound.snapshot()));
  }

  /** A resumed session: the arrival expectation rewinds to cursor + 1, for the peer's replay. */
  resume(meta: SessionMeta, generation: number, now: number): SessionMeta {
    this.inbound.rewind();
    // The operator replays from the cursor on: a frame past it is answered again when it comes
    // back, so its earlier answer would only repeat, unless it was committed past a hole (never
    // answered again). (Nothing is in flight: the ingest was quiesced.)
    this.store.owed.dropAfter(this.inbound.cursor, (seq) => inRanges(meta.countedAhead, seq));
    // What is still unacknowledged is re-sent right after the welcome: its wait starts now.
    const ackWaitSince = this.outbound.unacked > 0 ? now : null;
    Object.assign(meta, { generation, out: this.outbound.snapshot(), disconnectedAt: null, lastFrameAt: now, ackWaitSince, windowWait: null });
    delete meta.ackResent;
    return this.install(meta);
  }

  /**
   * The claim kept this session and bumped its generation: record it at once. Whatever happens to
   * the connection next (a cut during the handshake), the next hello must present the generation
   * Postgres now holds, or it would read as a lost claim and force a needless resync.
   */
  adoptGeneration(generation: number): void {
    const m = this.meta;
    if (!m || m.generation === generation) return;
    m.generation = generation;
    this.store.saveMeta(m);
  }

  noteFrame(now: number): void {
    this.lastFrameAt = now;
    if (this.meta && now - this.lastFramePersistedAt >= LAST_FRAME_PERSIST_MS) {
      this.lastFramePersistedAt = now;
      this.meta.lastFrameAt = now;
      this.store.saveMeta(this.meta);
    }
  }

  /**
   * A frame below the arrival expectation, dropped. Written at once: nothing else need follow it
   * before an eviction (an idle operator's pings never wake the object), and the admin view's
   * count is rebuilt from storage.
   */
  countDuplicate(): void {
    if (!this.meta) return;
    this.meta.counters.duplicates++;
    this.meta.lastFrameAt = this.lastFrameAt;
    this.store.saveMeta(this.meta);
  }

  /** The operator's ack of the hub's stream. */
  acknowledge(ack: number): AckOutcome {
    const verdict = this.outbound.acknowledge(ack);
    if (verdict === 'advanced' && this.meta) {
      this.meta.out = this.outbound.snapshot();
      this.meta.lastFrameAt = this.lastFrameAt;
      this.meta.ackWaitSince = this.outbound.unacked > 0 ? Date.now() : null;
      delete this.meta.ackResent;
      this.store.saveMeta(this.meta);
    }
    return verdict;
  }

  /** A committed batch: the cursor moves over what it settled, and the counters add up. */
  settle(settled: Settled, resyncs: Record<string, OpResync>): void {
    const meta = this.meta;
    if (!meta) return;
    for (const [seq, outcome] of settled.outcomes) this.inbound.settle(seq, outcome);
    meta.inCursor = this.inbound.cursor;
    forgetCountedThrough(resyncs, meta.inCursor);
    if (meta.countedAhead) meta.countedAhead = meta.countedAhead.filter(([, last]) => last > meta.inCursor);
    meta.opResyncs = resyncs;
    addCounters(meta.counters, settled.counters);
    meta.lastFrameAt = this.lastFrameAt;
    this.store.saveMeta(meta);
  }

  disconnected(now: number): void {
    if (!this.meta) return;
    this.meta.disconnectedAt = now;
    // Exact from here on: nothing comes after the disconnect, and the views show it.
    this.meta.lastFrameAt = this.lastFrameAt;
    this.store.saveMeta(this.meta);
  }

  /** The fence every write of this session carries. */
  fence(): SessionFence | null {
    const m = this.meta;
    return m ? { clusterUid: m.clusterUid, sessionId: m.sessionId, generation: m.generation, tokenHash: m.tokenHash, ingestCommits: m.ingestCommits ?? 0 } : null;
  }

  /**
   * Memory is only a cache of storage: rebuild the record and the outbound stream from what is
   * stored, after a pass that moved memory and failed to store it (send-path.ts). The arrival side
   * stays: its cursor is stored by every settle, which no such pass touches.
   */
  reload(): void {
    this.store.dropCaches();
    const stored = this.store.loadMeta();
    if (this.meta && stored) {
      // In place: a hello in progress holds this object across its awaits and installs it.
      for (const k of Object.keys(this.meta)) Reflect.deleteProperty(this.meta, k);
      Object.assign(this.meta, stored);
    } else this.meta = stored;
    this.outbound = new OutboundSequencer(this.store.replay, this.limits(), this.meta?.out);
    this.log = this.logFor(this.meta);
  }

  /** Retention expired: delete everything. */
  async forget(): Promise<void> {
    await this.store.destroy();
    this.store.reinit();
    this.meta = null;
    this.outbound = new OutboundSequencer(this.store.replay, this.limits());
    this.inbound = new InboundSequencer();
    this.log = this.logFor(null);
  }

  /** The pair the runtime may answer pings with: only while nothing sent is unacknowledged. */
  autoPair(connected: boolean): { lastSent: number; cursor: number } | null {
    return this.meta && connected && this.outbound.unacked === 0 ? { lastSent: this.outbound.lastSent, cursor: this.inbound.cursor } : null;
  }

  private install(meta: SessionMeta): SessionMeta {
    this.meta = meta;
    this.store.saveMeta(meta);
    this.log = this.logFor(meta);
    return meta;
  }

  private limits(): { frames: number; bytes: number } {
    return { frames: this.cfg.REPLAY_BUFFER_FRAMES, bytes: this.cfg.REPLAY_BUFFER_BYTES };
  }

  private logFor(meta: SessionMeta | null): Logger {
    return meta ? this.baseLog.child({ cluster: meta.clusterUid, session: meta.sessionId }) : this.baseLog;
  }
}
