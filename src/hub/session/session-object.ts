import { DurableObject } from 'cloudflare:workers';
import {
  buildFrame,
  canonicalPing,
  canonicalPong,
  checkOperatorVersion,
  CloseCode,
  HubSendQueue,
  InboundSequencer,
  newId,
  OutboundSequencer,
  readFrame,
  ULID_RE,
  utf8Length,
  type ErrorCode,
  type MessageType,
  type Payload,
} from '../../protocol';
import { INTERNAL_HEADERS, pollerStub, pollShardOf, routeKeyOf, sessionStub } from '../address';
import { hubConfig, type HubConfig } from '../config';
import {
  type DesiredChange,
  fetchDesiredChanges,
  fetchDesiredSnapshotPage,
  fetchOpenOperations,
  markOperationsSent,
} from '../db/desired';
import { describeError } from '../db/errors';
import { gatewaySql } from '../db/gateway';
import type { Sql } from '../db/sql';
import type { IngestResult, SessionFence } from '../db/ingest';
import { checkSession, claimCluster, leaveFleetPoll, type Displacement, type Refusal } from '../db/ownership';
import type { PokeReason } from '../db/fleet-poll';
import type { HubEnv } from '../env';
import { createLogger, type Logger } from '../log';
import { Pg } from '../pg';
import { residencyRefusal, welcomeRegion } from '../region';
import { CoalescedRun } from './coalesced-run';
import type { BuiltBatch, InboundItem } from './ingest-batch';
import { IngestPipeline } from './ingest-pipeline';
import { estimateBytes, type Effect, type Outgoing } from './outgoing';
import { SessionStore, ZERO_COUNTERS, type SessionMeta } from './store';
import { WakeCounter, type WakeStats } from './wakes';

interface Attachment {
  cid: string;
  phase: 'handshake' | 'open';
  acceptedAt: number;
  clusterUid: string;
  clusterName: string;
  tokenHash: string;
  routeKey: string;
  remoteAddr: string | null;
  sessionId: string | null;
}

/** What the admin API shows for a session. */
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
  /** The hub's last sent seq and the operator's cursor of it. */
  last_sent_seq: number;
  operator_cursor: number;
  replay_buffer_frames: number;
  replay_buffer_bytes: number;
  send_queue_frames: number;
  last_frame_at: string | null;
  desired_watermark: number;
  resync_in_progress: boolean;
  counters: SessionMeta['counters'];
  /** How often the object has been woken (events delivered) and brought into memory. */
  wakes: { total: number; constructions: number; by_kind: Record<string, number> };
}

const REFUSAL_ERRORS: Record<Refusal, { code: ErrorCode; message: string }> = {
  not_registered: { code: 'not_found', message: 'cluster is not registered' },
  disabled: { code: 'conflict', message: 'cluster is disabled' },
  token_rotated: { code: 'invalid', message: 'enrollment token was rotated' },
};

const LAST_FRAME_PERSIST_MS = 1_000;

/**
 * One operator session: handshake, resume or fresh session, strict inbound order with batched
 * apply, the replay buffer and desired-state stream, ownership polling and liveness. Uses the
 * hibernation API; everything a session needs after eviction is in the object's SQLite.
 */
export class SessionObject extends DurableObject<HubEnv> {
  private readonly cfg: HubConfig;
  private readonly store: SessionStore;
  private readonly wakes: WakeCounter;
  private readonly pg: Pg;
  private readonly shared: Sql;
  private readonly baseLog: Logger;
  private log: Logger;
  private meta: SessionMeta | null;
  private outbound: OutboundSequencer;
  private inbound: InboundSequencer;
  private readonly ingest: IngestPipeline;
  private readonly queue: HubSendQueue<Outgoing>;
  private readonly attachments = new WeakMap<WebSocket, Attachment>();
  private active: WebSocket | null | undefined = undefined;
  private helloInProgress: Promise<void> | null = null;
  private deferred: [WebSocket, string | ArrayBuffer][] = [];
  private lastFrameAt: number;
  private lastFramePersistedAt = 0;
  /** Latest desired revision known to exist in Postgres. */
  private knownRevision = 0;
  /** In-memory fetch progress; the persisted watermark/resync progress only move when frames are written. */
  private progress: FetchState;
  private pumping = false;
  private pumpAgain = false;
  private readonly drainer = new CoalescedRun(
    () => this.drainOnce(),
    (err) => {
      // Frames may be numbered and not sent: only a resume can make that right.
      this.log.error('send path failed; closing so the operator resumes', { error: describeError(err) });
      this.closeActive(CloseCode.INTERNAL, 'internal error');
    },
  );
  private readonly instance = newId();
  /** The alarm as last set (null: none; undefined: not read yet since construction). */
  private alarmAt: number | null | undefined = undefined;
  /** Since when frames have been waiting for the operator to release its replay window. */
  private windowFullSince: number | null = null;
  /** The auto-answered ping/pong pair as installed (`lastSent/cursor`; null: none; undefined: unknown since construction). */
  private autoPong: string | null | undefined = undefined;

  constructor(ctx: DurableObjectState, env: HubEnv) {
    super(ctx, env);
    this.cfg = hubConfig(env);
    this.store = new SessionStore(ctx.storage);
    this.wakes = new WakeCounter(ctx.storage.sql);
    // Its own connection for ingest only (large fenced batches, while frames flow); everything
    // else goes through the shared gateway, so an idle session holds no connection.
    this.pg = new Pg(env, {
      idleCloseMs: this.cfg.PG_IDLE_CLOSE_MS,
      queryTimeoutMs: this.cfg.PG_QUERY_TIMEOUT_MS,
      lockTimeoutMs: Math.min(this.cfg.PG_LOCK_TIMEOUT_MS, this.cfg.PG_QUERY_TIMEOUT_MS / 2),
    });
    this.shared = gatewaySql(env);
    this.baseLog = createLogger({ component: 'session' });
    this.meta = this.store.loadMeta();
    this.log = this.logFor(this.meta);
    // A brand-new object has no alarm; an object with a session may (read it when first needed).
    if (!this.meta) this.alarmAt = null;
    const limits = { frames: this.cfg.REPLAY_BUFFER_FRAMES, bytes: this.cfg.REPLAY_BUFFER_BYTES };
    this.outbound = new OutboundSequencer(this.store.replay, limits, this.meta?.out);
    this.inbound = new InboundSequencer(this.meta?.inCursor ?? 0);
    this.lastFrameAt = this.meta?.lastFrameAt ?? 0;
    this.knownRevision = this.meta?.desiredWatermark ?? 0;
    this.progress = fetchStateFrom(this.meta);
    this.queue = new HubSendQueue(this.cfg.SEND_QUEUE_FRAMES, this.cfg.SEND_QUEUE_BYTES);
    this.ingest = new IngestPipeline(
      {
        sql: this.pg,
        fence: () => this.currentFence(),
        resyncs: () => this.meta?.opResyncs ?? {},
        sentDesired: (frameId) => this.store.sentDesiredFrame(frameId),
        committed: (items, built, result) => this.onCommitted(items, built, result),
        fenceLost: () => void this.onFenceLost(),
        keepRetrying: () => this.activeSocket() !== null,
        log: this.baseLog,
      },
      this.cfg.INGEST_BATCH_FRAMES,
    );
  }

  // -------------------------------------------------------------------------------------------
  // Connect
  // -------------------------------------------------------------------------------------------

  override async fetch(request: Request): Promise<Response> {
    this.wakes.note('fetch');
    const misplaced = residencyRefusal(this.ctx.id, this.cfg, this.baseLog);
    if (misplaced) return misplaced;
    const h = request.headers;
    const clusterUid = h.get(INTERNAL_HEADERS.clusterUid);
    const clusterName = h.get(INTERNAL_HEADERS.clusterName);
    const tokenHash = h.get(INTERNAL_HEADERS.tokenHash);
    const routeKey = h.get(INTERNAL_HEADERS.routeKey);
    if (!clusterUid || !clusterName || !tokenHash || !routeKey) {
      return Response.json({ error: { code: 'invalid', message: 'not an admitted connect' } }, { status: 400 });
    }
    if (h.get('upgrade')?.toLowerCase() !== 'websocket') {
      return Response.json({ error: { code: 'invalid', message: 'expected a WebSocket upgrade' } }, { status: 426 });
    }
    // Defence in depth: routing is keyed by the token's cluster, so this never differs.
    if (this.meta && this.meta.clusterUid !== clusterUid) {
      this.baseLog.error('connect routed to another cluster\'s session object; refusing', { cluster: clusterUid });
      return Response.json({ error: { code: 'internal', message: 'session routing mismatch' } }, { status: 500 });
    }
    const pair = new WebSocketPair();
    const client = pair[0];
    const server = pair[1];
    const now = Date.now();
    const att: Attachment = {
      cid: newId(now),
      phase: 'handshake',
      acceptedAt: now,
      clusterUid,
      clusterName,
      tokenHash,
      routeKey,
      remoteAddr: h.get(INTERNAL_HEADERS.remoteAddr),
      sessionId: null,
    };
    this.ctx.acceptWebSocket(server);
    this.setAttachment(server, att);
    await this.scheduleAlarm();
    return new Response(null, { status: 101, webSocket: client });
  }

  // -------------------------------------------------------------------------------------------
  // Hibernation handlers
  // -------------------------------------------------------------------------------------------

  override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    this.wakes.note('message');
    this.noteFrame();
    if (this.helloInProgress) {
      this.deferred.push([ws, message]);
      return;
    }
    this.dispatch(ws, message);
  }

  override async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    this.wakes.note('close');
    const neverSpoke = this.attachment(ws)?.phase === 'handshake' && !this.helloInProgress;
    // Echoing 1005/1006 back hangs some clients' close for seconds.
    try {
      ws.close(CloseCode.NORMAL, 'closing');
    } catch {
      // already closed
    }
    this.onSocketGone(ws, `closed by peer (${code}${reason ? `: ${reason}` : ''})`);
    if (neverSpoke && this.ctx.getWebSockets().every((w) => w === ws)) this.releaseSilentConnection();
  }

  /**
   * The close handshake of a connection that never delivered a message (no hello within the
   * handshake timeout) is complete, but local workerd keeps its TCP connection until this object
   * is evicted (measured: the close frame at 10.0 s, the TCP end at 20.0 s on a quiet hub; a
   * connection that delivered any message ends at once). With nothing else alive here, reset the
   * object so the connection ends now: memory is only a cache of storage, and the alarm survives.
   */
  private releaseSilentConnection(): void {
    this.baseLog.debug('resetting an idle object to release a connection that never spoke');
    this.ctx.abort('released a connection that closed without a message');
  }

  override async webSocketError(ws: WebSocket, error: unknown): Promise<void> {
    this.wakes.note('error');
    this.onSocketGone(ws, `socket error: ${describeError(error)}`);
  }

  override async alarm(): Promise<void> {
    this.wakes.note('alarm');
    this.alarmAt = null;
    let forgotten = false;
    try {
      forgotten = await this.onAlarm();
    } catch (err) {
      this.log.error('alarm failed', { error: describeError(err) });
    } finally {
      // The alarm is the session's clock (handshake, silence, hole, window, retention): never let it lapse.
      if (!forgotten) await this.scheduleAlarm();
    }
  }

  /** One tick of the session's clock; true when the session was forgotten. */
  private async onAlarm(): Promise<boolean> {
    const now = Date.now();
    for (const ws of this.ctx.getWebSockets()) {
      const att = this.attachment(ws);
      if (ws.readyState !== WebSocket.OPEN) continue;
      if (att?.phase === 'handshake' && now - att.acceptedAt >= this.cfg.HANDSHAKE_TIMEOUT_MS) {
        this.close(ws, CloseCode.TIMEOUT, `no hello within ${this.cfg.HANDSHAKE_TIMEOUT_MS} ms`);
      }
    }
    const active = this.activeSocket();
    if (active && this.meta) {
      if (now - this.lastSeen(active) >= this.cfg.IDLE_TIMEOUT_MS) {
        this.closeActive(CloseCode.TIMEOUT, `no frame for ${this.cfg.IDLE_TIMEOUT_MS} ms`);
      } else if (this.windowFullSince !== null && now - this.windowFullSince >= this.cfg.IDLE_TIMEOUT_MS) {
        // A peer that stays alive but never acknowledges would stall desired state forever.
        this.log.warn('operator has not released the replay window; closing so resume sorts it out', {
          unacked: this.outbound.unacked,
          queued: this.queue.length,
        });
        this.closeActive(CloseCode.SEND_QUEUE_FULL, 'replay window not released');
      } else if (this.holeTooOld(now)) {
        this.sendConnectionError(active, null, 'unavailable', 'frames could not be applied in time; reconnect and replay', true);
        this.closeActive(CloseCode.TRY_AGAIN_LATER, 'apply stalled; replay from the cursor');
      }
    }
    if (!this.activeSocket() && this.meta && !this.ctx.getWebSockets().some((w) => w.readyState === WebSocket.OPEN)) {
      const since = this.meta.disconnectedAt ?? now;
      if (now - since >= this.cfg.RETENTION_MS) {
        this.log.info('session retention expired; deleting its storage', { disconnected_at: new Date(since).toISOString() });
        await this.forget();
        return true;
      }
    }
    return false;
  }

  // -------------------------------------------------------------------------------------------
  // RPC from the Worker (admin API)
  // -------------------------------------------------------------------------------------------

  /** Desired state for this cluster changed in Postgres: send it now rather than at the next poll. */
  async poke(revision: number, change?: DesiredChange): Promise<void> {
    this.wakes.note('poke');
    if (revision > this.knownRevision) this.knownRevision = revision;
    // The change itself, and nothing came between it and what is already queued: send it
    // without reading it back. Anything else (a gap, a resync in progress) goes through the fetch.
    const f = this.progress;
    // (An operation takes the fetch path: its start frame's id must be recorded before it is sent.)
    if (
      change?.kind === 'deployment' &&
      change.revision === revision &&
      f.stage === 'done' &&
      !this.pumping &&
      f.changesAfter === revision - 1 &&
      this.activeSocket()
    ) {
      // Advanced first: queuing drains at once, and the drain may start a pump that must not
      // fetch this change again. (If the queue refuses it, the connection closes and the fetch
      // state is rebuilt from what was written.)
      f.changesAfter = revision;
      this.enqueue({ kind: 'frame', type: 'deployment.desired', payload: () => change.payload, replyTo: null, revision });
      return;
    }
    void this.pumpDesired();
  }

  async status(): Promise<LiveView> {
    return this.liveView();
  }

  /** How often this object has been woken (not counting this call, or `status`). */
  async wakeStats(): Promise<WakeStats> {
    return this.wakes.snapshot();
  }

  /**
   * The fleet poll (or the claim that displaced this session) says something about `sessionId`
   * changed. A session this object no longer carries, or one without a connection, leaves the
   * fleet poll; a live one runs its own check.
   */
  async check(sessionId: string, why: PokeReason): Promise<void> {
    this.wakes.note('check');
    const meta = this.meta;
    if (meta && meta.sessionId === sessionId && !this.activeSocket()) {
      // Ours, but its connection ended without the news reaching Postgres (an eviction, a restart).
      await this.publishDisconnected(meta);
      return;
    }
    if (!meta || meta.sessionId !== sessionId) {
      await this.leaveFleetPoll(sessionId, meta?.clusterUid ?? null);
      return;
    }
    this.log.debug('poked', { why });
    await this.runCheck();
  }

  // -------------------------------------------------------------------------------------------
  // Frames
  // -------------------------------------------------------------------------------------------

  private dispatch(ws: WebSocket, message: string | ArrayBuffer): void {
    const att = this.attachment(ws);
    if (!att) {
      this.close(ws, CloseCode.INTERNAL, 'unknown connection');
      return;
    }
    if (typeof message !== 'string') {
      this.protocolError(ws, null, 'binary frames are not part of the protocol');
      return;
    }
    if (message.length * 3 > this.cfg.MAX_FRAME_BYTES && utf8Length(message) > this.cfg.MAX_FRAME_BYTES) {
      this.sendConnectionError(ws, null, 'invalid', `frame exceeds max_frame_bytes ${this.cfg.MAX_FRAME_BYTES}`, false);
      this.close(ws, CloseCode.TOO_BIG, 'frame too big');
      return;
    }
    if (att.phase === 'handshake') {
      this.helloInProgress = this.handleHello(ws, att, message)
        .catch((err: unknown) => {
          this.baseLog.error('hello failed unexpectedly', { error: describeError(err) });
          this.sendConnectionError(ws, null, 'internal', 'internal error during handshake', true);
          this.close(ws, CloseCode.INTERNAL, 'internal error');
        })
        .finally(() => {
          this.helloInProgress = null;
          const queued = this.deferred;
          this.deferred = [];
          for (const [w, m] of queued) {
            if (this.helloInProgress) this.deferred.push([w, m]);
            else this.dispatch(w, m);
          }
        });
      return;
    }
    // A superseded connection's late frames are not part of the session any more.
    if (ws !== this.activeSocket()) return;
    this.onSessionFrame(ws, message);
  }

  private async handleHello(ws: WebSocket, att: Attachment, text: string): Promise<void> {
    const log = this.baseLog.child({ cluster: att.clusterUid });
    const f = readFrame(text);
    if (f.kind === 'fatal') return this.refuse(ws, CloseCode.PROTOCOL_ERROR, f.id, 'invalid', f.reason);
    const replyTo = f.envelope.id || null;
    if (f.envelope.type !== 'hello') {
      return this.refuse(ws, CloseCode.PROTOCOL_ERROR, replyTo, 'invalid', `the first frame must be hello, got ${f.envelope.type.slice(0, 64)}`);
    }
    if (f.kind !== 'message' || f.message.type !== 'hello') {
      return this.refuse(ws, CloseCode.PROTOCOL_ERROR, replyTo, 'invalid', f.kind === 'poison' ? f.reason : 'malformed hello');
    }
    const hello = f.message.payload;
    if (hello.cluster_id !== att.clusterUid && hello.cluster_id !== att.clusterName) {
      return this.refuse(ws, CloseCode.PROTOCOL_ERROR, replyTo, 'invalid', 'hello.cluster_id does not name the cluster this token belongs to');
    }
    const verdict = checkOperatorVersion(hello.operator_version, this.cfg.HUB_VERSION);
    if (!verdict.admitted) return this.refuse(ws, CloseCode.PROTOCOL_ERROR, replyTo, 'invalid', verdict.reason);
    if (!verdict.release) {
      log.info('operator built from source admitted', { operator_version: hello.operator_version });
    }

    // Resume or fresh. Three conditions force a fresh session without consulting resume_from:
    // no record of the session, lossy, or a point that has left the buffer. A fourth is decided
    // by the claim itself: a session that lost its claim to another is never resumed.
    const meta = this.meta;
    let freshReason = localFreshReason(meta, hello, att.tokenHash, this.outbound);
    const freshSessionId = `${att.routeKey}.${newId()}`;

    let claim;
    try {
      claim = await claimCluster(this.shared, {
        clusterUid: att.clusterUid,
        tokenHashHex: att.tokenHash,
        resume: freshReason === null && meta ? { sessionId: meta.sessionId, generation: meta.generation } : null,
        freshSessionId,
        live: { connected: true },
        remoteAddr: att.remoteAddr,
        operatorVersion: hello.operator_version,
        contention: {
          windowMs: this.cfg.CONTENTION_WINDOW_MS,
          threshold: this.cfg.CONTENTION_THRESHOLD,
          quietMs: this.cfg.CONTENTION_QUIET_MS,
        },
        pollShard: pollShardOf(att.clusterUid, this.cfg.DB_GATEWAY_SHARDS),
        watermark: freshReason === null && meta ? meta.desiredWatermark : 0,
      });
    } catch (err) {
      log.warn('claim failed: database unavailable', { error: describeError(err) });
      return this.refuse(ws, CloseCode.TRY_AGAIN_LATER, replyTo, 'unavailable', 'registry unavailable; retry', true);
    }
    if (claim.refusal) {
      const e = REFUSAL_ERRORS[claim.refusal];
      log.warn('session refused at hello', { reason: claim.refusal });
      return this.refuse(ws, CloseCode.REFUSED, replyTo, e.code, e.message);
    }
    if (claim.displacement) this.reportDisplacement(log, claim.displacement, claim.contentionStarted);
    this.afterClaim(att.clusterUid, att.routeKey, claim.previousSession);
    if (freshReason === null && claim.sessionId !== meta?.sessionId) {
      freshReason = 'the session lost its claim to another session; a displaced session is never resumed';
    }
    const fresh = freshReason !== null;
    const sessionId = fresh ? freshSessionId : (meta as SessionMeta).sessionId;
    if (ws.readyState !== WebSocket.OPEN) return;

    // This connection now carries the session; any older one for it is superseded.
    for (const other of this.ctx.getWebSockets()) {
      if (other !== ws && this.attachment(other)?.phase === 'open') {
        this.sendConnectionError(other, null, 'conflict', 'superseded by a newer connection for this session', false);
        this.close(other, CloseCode.DISPLACED, 'superseded by a newer connection');
      }
    }

    // Nothing unapplied may settle after the cursor is reported; what was queued but not
    // numbered is fetched again from what was written.
    await this.ingest.quiesce();
    this.resetOutgoing();
    if (ws.readyState !== WebSocket.OPEN) return;

    // Only now, with nothing left that could number a frame on the old connection, is the list of
    // frames to re-send final (taken before the claim, frames numbered meanwhile would be skipped).
    let replay: { frame: string }[] = [];
    if (!fresh) {
      const plan = this.outbound.planResume(hello.resume_from as number);
      if (!plan.ok) {
        return this.refuse(ws, CloseCode.TRY_AGAIN_LATER, replyTo, 'unavailable', `resume point changed during the handshake (${plan.reason}); reconnect`, true);
      }
      replay = plan.replay;
    }

    const now = Date.now();
    if (fresh) {
      this.outbound.reset();
      this.inbound.reset();
      this.meta = {
        sessionId,
        clusterUid: att.clusterUid,
        clusterName: att.clusterName,
        tokenHash: att.tokenHash,
        routeKey: att.routeKey,
        openedAt: now,
        generation: claim.generation as number,
        inCursor: 0,
        out: this.outbound.snapshot(),
        desiredWatermark: 0,
        opResyncs: {},
        hubResync: { beginId: newId(now), revision: claim.desiredRevision, after: null, count: 0, stage: 'begin' },
        lastFrameAt: now,
        disconnectedAt: null,
        counters: { ...ZERO_COUNTERS },
      };
    } else {
      const m = meta as SessionMeta;
      this.inbound.rewind();
      m.generation = claim.generation as number;
      m.out = this.outbound.snapshot();
      m.disconnectedAt = null;
      m.lastFrameAt = now;
    }
    const m = this.meta as SessionMeta;
    this.knownRevision = Math.max(this.knownRevision, claim.desiredRevision);
    this.progress = fetchStateFrom(m);
    this.store.saveMeta(m);
    this.log = this.logFor(m);

    att.phase = 'open';
    att.sessionId = sessionId;
    this.setAttachment(ws, att);
    this.active = ws;

    this.send(
      ws,
      buildFrame({
        type: 'welcome',
        payload: {
          session_id: sessionId,
          ack_seq: this.inbound.cursor,
          full_resync: fresh,
          hub_version: this.cfg.HUB_VERSION,
          ...welcomeRegion(this.cfg),
          limits: {
            ping_interval_s: this.cfg.PING_INTERVAL_MS / 1000,
            idle_timeout_s: this.cfg.IDLE_TIMEOUT_MS / 1000,
            max_frame_bytes: this.cfg.MAX_FRAME_BYTES,
            replay_buffer_frames: this.cfg.REPLAY_BUFFER_FRAMES,
            replay_buffer_bytes: this.cfg.REPLAY_BUFFER_BYTES,
          },
        },
        ack: this.inbound.cursor,
        reply_to: replyTo,
      }),
    );
    for (const e of replay) this.send(ws, e.frame);
    this.syncAutoPong();
    this.log.info(fresh ? 'session opened (full resync)' : 'session resumed', {
      reason: freshReason,
      asked: hello.session_id,
      resume_from: hello.resume_from,
      ack_seq: this.inbound.cursor,
      replayed: replay.length,
      remote_addr: att.remoteAddr,
      generation: m.generation,
      operator_version: hello.operator_version,
    });
    void this.pumpDesired();
    await this.scheduleAlarm();
  }

  /**
   * The claim is ours: the cluster's poller watches this session from now on, and a previous
   * owner in another object hears of it at once (the poll is the bound when this poke is lost).
   */
  private afterClaim(clusterUid: string, routeKey: string, previous: string | null): void {
    const poller = pollerStub(this.env, clusterUid);
    const shard = pollShardOf(clusterUid, this.cfg.DB_GATEWAY_SHARDS);
    poller.ensurePolling(shard).catch((err: unknown) => {
      this.baseLog.warn('could not reach the fleet poller; the next claim retries', { cluster: clusterUid, error: describeError(err) });
    });
    const prevKey = routeKeyOf(previous);
    if (!previous || !prevKey || prevKey === routeKey || !this.cfg.DISPLACEMENT_POKE) return;
    sessionStub(this.env, { clusterUid, routeKey: prevKey })
      .check(previous, 'claim')
      .catch((err: unknown) => {
        this.baseLog.warn('could not poke the displaced session; the fleet poll will', { cluster: clusterUid, error: describeError(err) });
      });
  }

  /** A claim taken from another connected session: logged, and loudly once per contention episode. */
  private reportDisplacement(log: Logger, d: Displacement, contentionStarted: boolean): void {
    const fields = {
      displaced_session: d.from.session_id,
      displaced_remote_addr: d.from.remote_addr,
      displaced_operator_version: d.from.operator_version,
      session: d.to.session_id,
      remote_addr: d.to.remote_addr,
      operator_version: d.to.operator_version,
    };
    if (contentionStarted) {
      log.warn('CONTENTION: the claim of this cluster keeps changing hands between sessions; are two operators running with one enrollment token?', fields);
    } else {
      log.info('claim taken from another connected session', fields);
    }
  }

  /** The hot path: one frame of an open session. Synchronous; applying happens in batches. */
  private onSessionFrame(ws: WebSocket, text: string): void {
    const meta = this.meta;
    if (!meta) return;
    const f = readFrame(text);
    if (f.kind === 'fatal') {
      this.protocolError(ws, f.id, f.reason);
      return;
    }
    const env = f.envelope;
    if (env.ack !== null) {
      const verdict = this.outbound.acknowledge(env.ack);
      if (verdict === 'invalid') {
        this.protocolError(ws, env.id || null, `ack ${env.ack} is beyond the last seq sent (${this.outbound.lastSent})`);
        return;
      }
      if (verdict === 'advanced') {
        meta.out = this.outbound.snapshot();
        this.store.saveMeta(meta);
        if (this.queue.length > 0) void this.drain();
        this.syncAutoPong();
      }
    }
    if (env.seq === null) {
      switch (env.type) {
        case 'ping':
          this.send(ws, canonicalPong(this.inbound.cursor));
          this.syncAutoPong();
          return;
        case 'hello':
          this.protocolError(ws, env.id || null, 'hello is never sent again on the same connection');
          return;
        case 'error':
          this.log.warn('connection error from operator', { payload: f.kind === 'message' ? f.message.payload : null });
          return;
        default:
          return;
      }
    }
    const seq = env.seq;
    const arrival = this.inbound.arrive(seq);
    if (arrival === 'duplicate') {
      meta.counters.duplicates++;
      return;
    }
    if (arrival === 'gap') {
      this.protocolError(ws, env.id || null, `gap: expected seq ${this.inbound.expected}, got ${seq}`);
      return;
    }
    meta.counters.framesIn++;
    const base = { seq, id: env.id, replyTo: env.reply_to, type: env.type, arrivedAt: Date.now() };
    let item: InboundItem;
    if (f.kind === 'unknown') {
      meta.counters.unknownTypes++;
      this.log.warn('unknown message type; dropped, acknowledged and answered', { seq, type: env.type.slice(0, 256) });
      this.enqueue({
        kind: 'frame',
        type: 'error',
        payload: () => ({
          code: 'invalid',
          message: `unknown message type ${env.type.slice(0, 200)}`,
          retryable: false,
          unknown_type: env.type.slice(0, 256),
        }),
        replyTo: ULID_RE.test(env.id) ? env.id : null,
      });
      item = { ...base, kind: 'unknown' };
    } else if (f.kind === 'poison') {
      meta.counters.rejections++;
      this.log.error('POISON FRAME: accepted, acknowledged, dropped and recorded', {
        seq,
        type: env.type,
        frame_id: env.id,
        reason: f.reason,
      });
      item = { ...base, kind: 'poison', reason: f.reason };
    } else {
      item = { ...base, kind: 'message', message: f.message };
    }
    this.ingest.push(item);
    if (this.ingest.size > this.cfg.INGEST_BATCH_FRAMES * 50) {
      this.sendConnectionError(ws, null, 'unavailable', 'too many frames waiting to be applied; reconnect and replay', true);
      this.closeActive(CloseCode.TRY_AGAIN_LATER, 'apply backlog; replay from the cursor');
    }
  }

  private onCommitted(items: InboundItem[], built: BuiltBatch, result: IngestResult): void {
    const meta = this.meta;
    if (!meta) return;
    for (const item of items) this.inbound.settle(item.seq, item.kind === 'message' ? 'applied' : 'dropped');
    meta.inCursor = this.inbound.cursor;
    meta.opResyncs = built.resyncs;
    meta.counters.pruned += result.pruned;
    for (const s of built.streams) {
      if (s.complete) meta.counters.resyncsCompleted++;
      else meta.counters.resyncsIncomplete++;
      this.log.info(s.complete ? 'operator resync complete; pruned absent rows' : 'operator resync incomplete; nothing pruned', {
        seq: s.seq,
        begin: s.beginId,
        reason: s.reason,
        pruned: s.complete ? result.pruned : 0,
      });
    }
    for (const e of built.peerErrors) {
      this.log.warn('error frame from operator', { seq: e.seq, reply_to: e.replyTo, code: e.payload.code, message: e.payload.message });
    }
    for (const r of built.batch.desiredRefusals) {
      meta.counters.desiredRefusals++;
      this.log.warn('operator refused desired state; recorded on the deployment', {
        seq: r.seq,
        deployment_id: r.deployment_id,
        revision: r.revision,
        code: r.code,
        message: r.message,
      });
    }
    // A frame that can never apply is handled exactly as an unknown type is: recorded, acked and
    // answered, so the operator hears of it, not only the plane's rejections table.
    for (const r of result.unknownOperations) {
      meta.counters.rejections++;
      this.log.error('POISON FRAME: names an operation this cluster does not have; acknowledged, dropped, recorded', {
        seq: r.seq,
        type: r.type,
        frame_id: r.frame_id,
        reason: r.reason,
      });
    }
    for (const r of [...built.batch.rejections.filter((x) => x.answer), ...result.unknownOperations]) {
      meta.counters.answeredRejections++;
      this.enqueue(rejectionAnswer(r));
    }
    meta.lastFrameAt = this.lastFrameAt;
    this.store.saveMeta(meta);
    const ws = this.activeSocket();
    if (ws) this.send(ws, buildFrame({ type: 'ack', payload: {}, ack: this.inbound.cursor }));
    this.syncAutoPong();
  }

  private async onFenceLost(): Promise<void> {
    this.log.warn('write fenced off: this session no longer owns the cluster');
    await this.runCheck();
  }

  // -------------------------------------------------------------------------------------------
  // Ownership
  // -------------------------------------------------------------------------------------------

  /**
   * The session's own check of its claim, registration, disablement, token and desired revision,
   * when something pokes it (the fleet poll, a claim that displaced it, a write that found its
   * fence gone). It acts as the answer says: 4403, 4409, or fetch what is owed.
   */
  private async runCheck(): Promise<void> {
    const meta = this.meta;
    const ws = this.activeSocket();
    if (!meta || !ws) return;
    let r;
    try {
      r = await checkSession(this.shared, {
        clusterUid: meta.clusterUid,
        tokenHashHex: meta.tokenHash,
        sessionId: meta.sessionId,
        generation: meta.generation,
        live: this.liveView(),
        connected: true,
        watermark: meta.desiredWatermark,
      });
    } catch (err) {
      this.log.warn('session check failed; the fleet poll pokes again', { error: describeError(err) });
      return;
    }
    if (this.activeSocket() !== ws) return;
    if (r.refusal) {
      const e = REFUSAL_ERRORS[r.refusal];
      this.log.warn('session refused by its check', { reason: r.refusal });
      this.sendConnectionError(ws, null, e.code, e.message, false);
      this.closeActive(CloseCode.REFUSED, e.message);
      return;
    }
    if (!r.owner) {
      this.log.warn('displaced by a newer session for the cluster');
      this.sendConnectionError(ws, null, 'conflict', 'displaced by a newer session for this cluster', false);
      this.closeActive(CloseCode.DISPLACED, 'displaced by a newer session');
      return;
    }
    if (r.desiredRevision > this.knownRevision) this.knownRevision = r.desiredRevision;
    // Always: a fetch that failed earlier (and raised nothing) is retried here (the fleet poll
    // pokes until the watermark catches up); with nothing owed the pump returns without a query.
    void this.pumpDesired();
  }

  private currentFence(): SessionFence | null {
    const m = this.meta;
    if (!m) return null;
    return { clusterUid: m.clusterUid, sessionId: m.sessionId, generation: m.generation, tokenHash: m.tokenHash };
  }

  // -------------------------------------------------------------------------------------------
  // Desired state out
  // -------------------------------------------------------------------------------------------

  /** Fetch what the session owes its operator and queue it. One pump at a time. */
  private async pumpDesired(): Promise<void> {
    if (this.pumping) {
      this.pumpAgain = true;
      return;
    }
    this.pumping = true;
    try {
      do {
        this.pumpAgain = false;
        while (await this.pumpStep()) {
          // keep going while there is work and room
        }
      } while (this.pumpAgain);
    } catch (err) {
      // Nothing of a failed step was queued (operation starts are recorded before they are), so
      // the next poll's pump picks it up whole.
      this.log.error('desired-state fetch or operation record failed; nothing of it was sent; retrying on the next poll', {
        error: describeError(err),
      });
    } finally {
      this.pumping = false;
    }
  }

  /** One fetch; true when another may follow at once. */
  private async pumpStep(): Promise<boolean> {
    const meta = this.meta;
    if (!meta || !this.activeSocket()) return false;
    // Fetch only into free queue space: desired state waits in Postgres, not in a queue that
    // would overflow. Two slots stay free for a stream.end and a marker.
    const page = Math.min(this.cfg.DESIRED_PAGE_ROWS, this.cfg.SEND_QUEUE_FRAMES - this.queue.length - 2);
    if (page < 1) return false;
    const f = this.progress;
    const resync = meta.hubResync;
    if (resync && f.stage !== 'done') {
      if (f.stage === 'begin') {
        f.stage = 'pages';
        return this.enqueue({
          kind: 'frame',
          type: 'resync.begin',
          id: resync.beginId,
          payload: () => ({ scope: ['deployment'] }),
          replyTo: null,
          effect: { t: 'resync_begin' },
        });
      }
      if (f.stage === 'pages') {
        const rows = await fetchDesiredSnapshotPage(this.shared, meta.clusterUid, f.snapshotAfter, page);
        if (this.progress !== f) return false;
        for (const r of rows) {
          if (
            !this.enqueue({
              kind: 'frame',
              type: 'deployment.desired',
              payload: () => r.payload,
              replyTo: resync.beginId,
              effect: { t: 'resync_item', deploymentId: r.payload.deployment_id },
            })
          )
            return false;
          f.snapshotAfter = r.payload.deployment_id;
        }
        if (rows.length < page) {
          f.stage = 'ops';
          return this.enqueue({
            kind: 'frame',
            type: 'stream.end',
            payload: () => ({ complete: true, count: this.meta?.hubResync?.count ?? 0 }),
            replyTo: resync.beginId,
            effect: { t: 'resync_end' },
          });
        }
        return true;
      }
      if (f.stage === 'ops') {
        const ops = await fetchOpenOperations(this.shared, meta.clusterUid, f.opsAfter, resync.revision, page);
        if (this.progress !== f) return false;
        const ids = await this.recordOperationStarts(ops.map((o) => o.payload));
        if (!ids || this.progress !== f) return false;
        for (const o of ops) {
          const id = ids.get(o.payload.operation_id) as string;
          if (!this.enqueue(operationFrame(o.payload, id, { t: 'resync_op', revision: o.revision }))) return false;
          f.opsAfter = o.revision;
        }
        if (ops.length === page) return true;
        f.stage = 'done';
        f.changesAfter = Math.max(f.changesAfter, resync.revision);
        return this.enqueue({ kind: 'marker', effect: { t: 'resync_done' } });
      }
    }
    if (f.changesAfter >= this.knownRevision) return false;
    const target = this.knownRevision;
    const changes = await fetchDesiredChanges(this.shared, meta.clusterUid, f.changesAfter, page);
    if (this.progress !== f) return false;
    const ids = await this.recordOperationStarts(changes.flatMap((c) => (c.kind === 'operation' ? [c.payload] : [])));
    if (!ids || this.progress !== f) return false;
    for (const c of changes) {
      const ok =
        c.kind === 'deployment'
          ? this.enqueue({
              kind: 'frame',
              type: 'deployment.desired',
              payload: () => c.payload,
              replyTo: null,
              revision: c.revision,
            })
          : this.enqueue(operationFrame(c.payload, ids.get(c.payload.operation_id) as string, { t: 'watermark', revision: c.revision }, c.revision));
      if (!ok) return false;
      f.changesAfter = c.revision;
    }
    if (changes.length < page) {
      // Everything up to the revision known before the fetch is now queued (skipped rows included).
      f.changesAfter = Math.max(f.changesAfter, target);
      return this.enqueue({ kind: 'marker', effect: { t: 'watermark', revision: target } });
    }
    return true;
  }

  /**
   * Record the ids of the operation.start frames about to be queued, before any is sent: an
   * operator's error replying to one correlates on that id alone, in whichever session it comes
   * back. A failure throws (the pump logs it and the poll retries; nothing unrecorded is sent).
   * Null when this session no longer owns the cluster.
   */
  private async recordOperationStarts(ops: Payload<'operation.start'>[]): Promise<Map<string, string> | null> {
    const ids = new Map<string, string>();
    if (ops.length === 0) return ids;
    for (const o of ops) ids.set(o.operation_id, newId());
    const fence = this.currentFence();
    if (!fence) return null;
    const fenced = await markOperationsSent(this.shared, fence, [...ids].map(([operation_id, frame_id]) => ({ operation_id, frame_id })));
    return fenced ? ids : null;
  }

  /** Queue a frame; a full queue closes the connection (4429) and resume sorts it out. */
  private enqueue(o: Outgoing): boolean {
    const ws = this.activeSocket();
    if (!ws) return false;
    if (!this.queue.push(o, estimateBytes(o))) {
      this.log.warn('hub send queue full; closing', { queued: this.queue.length, unacked: this.outbound.unacked });
      this.closeActive(CloseCode.SEND_QUEUE_FULL, 'hub send queue full');
      return false;
    }
    void this.drain();
    return true;
  }

  /** Number and write queued frames while the operator's window allows. Serialized: frames leave in seq order. */
  private drain(): Promise<void> {
    return this.drainer.request();
  }

  private async drainOnce(): Promise<void> {
    const meta = this.meta;
    const ws = this.activeSocket();
    if (!meta || !ws) return;
    const frames: string[] = [];
    const desiredSent: [string, string, number][] = [];
    let effects = 0;
    this.windowFullSince = null;
    while (this.queue.peek() !== undefined) {
      const o = this.queue.peek() as Outgoing;
      if (o.kind === 'frame' && (this.outbound.unacked >= this.cfg.REPLAY_BUFFER_FRAMES || this.outbound.store.bytes >= this.cfg.REPLAY_BUFFER_BYTES)) {
        // The operator has not released the replay window; frames wait in the queue.
        this.windowFullSince = Date.now();
        break;
      }
      this.queue.shift();
      if (o.kind === 'marker') {
        this.applyEffect(meta, o.effect);
        effects++;
        continue;
      }
      const id = o.id ?? newId();
      const payload = o.payload();
      const { frame } = this.outbound.stamp((seq) =>
        buildFrame({ type: o.type, payload, seq, ack: this.inbound.cursor, reply_to: o.replyTo, id }),
      );
      frames.push(frame);
      if (o.type === 'deployment.desired') {
        const d = payload as Payload<'deployment.desired'>;
        desiredSent.push([id, d.deployment_id, d.revision]);
      }
      if (o.revision !== undefined) meta.desiredWatermark = Math.max(meta.desiredWatermark, o.revision);
      if (o.effect) this.applyEffect(meta, o.effect);
    }
    if (frames.length === 0) {
      if (effects > 0) this.store.saveMeta(meta);
      return;
    }
    // Durable before it is sent: the replay buffer and the numbers that describe it.
    this.store.replay.flush();
    this.store.recordSentDesired(desiredSent);
    meta.out = this.outbound.snapshot();
    meta.counters.framesOut += frames.length;
    this.store.saveMeta(meta);
    if (this.activeSocket() !== ws) return;
    this.syncAutoPong();
    for (const frame of frames) this.send(ws, frame);
    if (this.queue.length < this.cfg.DESIRED_PAGE_ROWS) void this.pumpDesired();
  }

  private applyEffect(meta: SessionMeta, e: Effect): void {
    const r = meta.hubResync;
    switch (e.t) {
      case 'watermark':
        meta.desiredWatermark = Math.max(meta.desiredWatermark, e.revision);
        return;
      case 'resync_begin':
        if (r) r.stage = 'pages';
        return;
      case 'resync_item':
        if (r) {
          r.after = e.deploymentId;
          r.count++;
        }
        return;
      case 'resync_end':
        if (r) r.stage = 'ops';
        return;
      case 'resync_op':
        return;
      case 'resync_done':
        if (r) meta.desiredWatermark = Math.max(meta.desiredWatermark, r.revision);
        meta.hubResync = null;
        return;
    }
  }

  /** Drop what was queued but not numbered; the fetch restarts from what was written. */
  private resetOutgoing(): void {
    this.queue.clear();
    this.windowFullSince = null;
    this.progress = fetchStateFrom(this.meta);
  }

  // -------------------------------------------------------------------------------------------
  // Sockets
  // -------------------------------------------------------------------------------------------

  private activeSocket(): WebSocket | null {
    if (this.active !== undefined) {
      if (this.active && this.active.readyState !== WebSocket.OPEN) this.active = null;
      return this.active;
    }
    // After a wake from hibernation: find the connection that carries the session.
    this.active = null;
    const sid = this.meta?.sessionId;
    for (const ws of this.ctx.getWebSockets()) {
      const att = this.attachment(ws);
      if (att?.phase === 'open' && att.sessionId === sid && ws.readyState === WebSocket.OPEN) this.active = ws;
    }
    return this.active;
  }

  private attachment(ws: WebSocket): Attachment | null {
    let att = this.attachments.get(ws);
    if (!att) {
      att = (ws.deserializeAttachment() as Attachment | null) ?? undefined;
      if (att) this.attachments.set(ws, att);
    }
    return att ?? null;
  }

  private setAttachment(ws: WebSocket, att: Attachment): void {
    ws.serializeAttachment(att);
    this.attachments.set(ws, att);
  }

  private noteFrame(): void {
    const now = Date.now();
    this.lastFrameAt = now;
    if (this.meta && now - this.lastFramePersistedAt >= LAST_FRAME_PERSIST_MS) {
      this.lastFramePersistedAt = now;
      this.meta.lastFrameAt = now;
      this.store.saveMeta(this.meta);
    }
  }

  /** The last sign of life on the connection: a frame, or a ping the runtime answered for us. */
  private lastSeen(ws: WebSocket): number {
    const auto = this.ctx.getWebSocketAutoResponseTimestamp(ws)?.getTime() ?? 0;
    return Math.max(this.lastFrameAt, auto);
  }

  /**
   * An idle operator's ping is answered by the runtime without waking this object: the pair is
   * installed only while the replay buffer is empty (the canonical ping whose ack is the last seq
   * sent → a pong carrying the cursor of the operator's stream), and replaced or removed whenever
   * either number moves. A ping whose ack would release frames never matches and reaches the
   * object; an auto-answered pong is never stale.
   */
  private syncAutoPong(): void {
    const want = this.meta && this.activeSocket() && this.outbound.unacked === 0 ? `${this.outbound.lastSent}/${this.inbound.cursor}` : null;
    if (want === this.autoPong) return;
    this.autoPong = want;
    if (want === null) {
      this.ctx.setWebSocketAutoResponse();
      return;
    }
    this.ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair(canonicalPing(this.outbound.lastSent), canonicalPong(this.inbound.cursor)));
  }

  private holeTooOld(now: number): boolean {
    const oldest = this.ingest.oldestArrival();
    return oldest !== null && now - oldest >= this.cfg.HOLE_TIMEOUT_MS;
  }

  private send(ws: WebSocket, frame: string): void {
    try {
      ws.send(frame);
    } catch (err) {
      this.log.debug('send on a closed socket', { error: describeError(err) });
    }
  }

  private sendConnectionError(ws: WebSocket, replyTo: string | null, code: ErrorCode, message: string, retryable: boolean): void {
    this.send(ws, buildFrame({ type: 'error', payload: { code, message, retryable }, reply_to: replyTo, ack: this.meta ? this.inbound.cursor : null }));
  }

  /** Handshake refusal: a typed error, then the close. Nothing about the session changes. */
  private refuse(
    ws: WebSocket,
    code: number,
    replyTo: string | null,
    errorCode: ErrorCode,
    message: string,
    retryable = false,
  ): void {
    this.baseLog.warn('handshake refused', { close: code, reason: message });
    this.sendConnectionError(ws, replyTo, errorCode, message, retryable);
    this.close(ws, code, message);
  }

  private protocolError(ws: WebSocket, replyTo: string | null, message: string): void {
    this.log.warn('protocol error; closing 4400', { reason: message });
    this.sendConnectionError(ws, replyTo, 'invalid', message, false);
    this.close(ws, CloseCode.PROTOCOL_ERROR, message);
  }

  private close(ws: WebSocket, code: number, reason: string): void {
    try {
      // Close reasons are limited to 123 bytes.
      ws.close(code, reason.slice(0, 120));
    } catch {
      // already closed
    }
    this.onSocketGone(ws, `closed by hub (${code}: ${reason})`);
  }

  private closeActive(code: number, reason: string): void {
    const ws = this.activeSocket();
    if (ws) this.close(ws, code, reason);
  }

  private onSocketGone(ws: WebSocket, why: string): void {
    const wasActive = this.active === ws || (this.active === undefined && this.activeSocket() === ws);
    this.attachments.delete(ws);
    if (!wasActive) return;
    this.active = null;
    this.resetOutgoing();
    this.syncAutoPong();
    const meta = this.meta;
    if (!meta) return;
    meta.disconnectedAt = Date.now();
    this.store.saveMeta(meta);
    this.log.info('session connection ended', { why, hub_cursor: this.inbound.cursor, unacked: this.outbound.unacked });
    void this.publishDisconnected(meta);
    void this.scheduleAlarm();
  }

  private async publishDisconnected(meta: SessionMeta): Promise<void> {
    try {
      await checkSession(this.shared, {
        clusterUid: meta.clusterUid,
        tokenHashHex: meta.tokenHash,
        sessionId: meta.sessionId,
        generation: meta.generation,
        live: this.liveView(),
        connected: false,
        watermark: meta.desiredWatermark,
      });
    } catch (err) {
      this.log.debug('could not publish disconnect', { error: describeError(err) });
    }
  }

  /** A session id this object does not (or no longer) carry live: drop it from the fleet poll. */
  private async leaveFleetPoll(sessionId: string, clusterUid: string | null): Promise<void> {
    try {
      await leaveFleetPoll(this.shared, sessionId);
    } catch (err) {
      this.baseLog.debug('could not leave the fleet poll; it pokes again', { cluster: clusterUid, session: sessionId, error: describeError(err) });
    }
  }

  private async scheduleAlarm(): Promise<void> {
    const now = Date.now();
    let next = Number.POSITIVE_INFINITY;
    for (const ws of this.ctx.getWebSockets()) {
      // A socket already closing needs no timer; counting it would re-fire a past deadline in a loop.
      if (ws.readyState !== WebSocket.OPEN) continue;
      const att = this.attachment(ws);
      if (att?.phase === 'handshake') next = Math.min(next, att.acceptedAt + this.cfg.HANDSHAKE_TIMEOUT_MS);
    }
    const active = this.activeSocket();
    if (active) {
      // Only real deadlines: silence (pings answered by the runtime count), a hole, a window the
      // operator does not release. No periodic tick: an idle session sleeps until one comes due.
      next = Math.min(next, this.lastSeen(active) + this.cfg.IDLE_TIMEOUT_MS);
      const oldest = this.ingest.oldestArrival();
      if (oldest !== null) next = Math.min(next, oldest + this.cfg.HOLE_TIMEOUT_MS);
      if (this.windowFullSince !== null) next = Math.min(next, this.windowFullSince + this.cfg.IDLE_TIMEOUT_MS);
    } else if (this.meta) {
      next = Math.min(next, (this.meta.disconnectedAt ?? now) + this.cfg.RETENTION_MS);
    }
    if (!Number.isFinite(next)) return;
    // Known after the first read: this object is the only one that sets its alarm.
    if (this.alarmAt === undefined) this.alarmAt = await this.ctx.storage.getAlarm();
    const current = this.alarmAt;
    if (current === null || current > next || current < now) {
      this.alarmAt = Math.max(next, now + 1);
      await this.ctx.storage.setAlarm(this.alarmAt);
    }
  }

  private async forget(): Promise<void> {
    await this.ingest.quiesce();
    await this.pg.close();
    await this.store.destroy();
    this.alarmAt = null;
    this.store.reinit();
    this.wakes.reinit();
    this.meta = null;
    this.outbound = new OutboundSequencer(this.store.replay, this.outbound.limits);
    this.inbound = new InboundSequencer();
    this.resetOutgoing();
    this.syncAutoPong();
  }

  private liveView(): LiveView {
    const m = this.meta;
    const active = this.activeSocket();
    const lastSeen = active ? this.lastSeen(active) : this.lastFrameAt;
    return {
      instance: this.instance,
      connected: this.activeSocket() !== null,
      session_id: m?.sessionId ?? null,
      generation: m?.generation ?? null,
      opened_at: m ? new Date(m.openedAt).toISOString() : null,
      hub_cursor: this.inbound.cursor,
      hub_expected: this.inbound.expected,
      pending_apply: this.ingest.size,
      held_subjects: this.ingest.heldSubjects,
      last_sent_seq: this.outbound.lastSent,
      operator_cursor: this.outbound.peerAck,
      replay_buffer_frames: this.outbound.unacked,
      replay_buffer_bytes: this.outbound.store.bytes,
      send_queue_frames: this.queue.length,
      last_frame_at: lastSeen ? new Date(lastSeen).toISOString() : null,
      desired_watermark: m?.desiredWatermark ?? 0,
      resync_in_progress: m?.hubResync !== null && m?.hubResync !== undefined,
      counters: m?.counters ?? { ...ZERO_COUNTERS },
      wakes: (({ wakes, constructions, byKind }) => ({ total: wakes, constructions, by_kind: byKind }))(this.wakes.snapshot()),
    };
  }

  private logFor(meta: SessionMeta | null): Logger {
    return meta ? this.baseLog.child({ cluster: meta.clusterUid, session: meta.sessionId }) : this.baseLog;
  }
}

/**
 * Why this hello cannot resume, from what the object itself knows (the claim may add one more:
 * a lost claim), or null when it may.
 */
function localFreshReason(
  meta: SessionMeta | null,
  hello: Payload<'hello'>,
  tokenHash: string,
  outbound: OutboundSequencer,
): string | null {
  if (!meta || hello.session_id === null || hello.session_id !== meta.sessionId) return 'no record of the session';
  if (hello.lossy) return 'operator is lossy';
  if (meta.tokenHash !== tokenHash) return 'enrollment token changed';
  if (hello.resume_from === null) return 'no resume point';
  const problem = outbound.resumeProblem(hello.resume_from);
  return problem === null ? null : `resume point ${hello.resume_from} unavailable (${problem})`;
}

interface FetchState {
  stage: 'begin' | 'pages' | 'ops' | 'done';
  snapshotAfter: string | null;
  /** Operations are redelivered in revision order; restarting this after an eviction only repeats some. */
  opsAfter: number;
  changesAfter: number;
}

function fetchStateFrom(meta: SessionMeta | null): FetchState {
  const r = meta?.hubResync ?? null;
  return {
    stage: r ? r.stage : 'done',
    snapshotAfter: r?.after ?? null,
    opsAfter: 0,
    changesAfter: meta?.desiredWatermark ?? 0,
  };
}

/** The sequenced error that answers a rejected frame (reply_to: its id, when it is a ULID). */
function rejectionAnswer(r: { frame_id: string | null; type: string; reason: string }): Outgoing {
  const replyTo = r.frame_id !== null && ULID_RE.test(r.frame_id) ? r.frame_id : null;
  return {
    kind: 'frame',
    type: 'error',
    payload: () => ({ code: 'invalid', message: `frame rejected (${r.type.slice(0, 64)}): ${r.reason.slice(0, 400)}`, retryable: false }),
    replyTo,
  };
}

function operationFrame(payload: Payload<'operation.start'>, id: string, effect: Effect, revision?: number): Outgoing {
  return {
    kind: 'frame',
    type: 'operation.start' satisfies MessageType,
    id,
    payload: () => payload,
    replyTo: null,
    effect,
    ...(revision !== undefined ? { revision } : {}),
  };
}
