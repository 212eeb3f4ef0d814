import { DurableObject } from 'cloudflare:workers';
import { answerableId, buildFrame, bytesOver, canonicalPong, CloseCode, newId, readFrame } from '../../protocol';
import { HELD_FRAME_OVERHEAD, HELD_FRAMES_OF_MAX_SIZE, HeldFrames } from './held-frames';
import { hubConfig, type HubConfig } from '../config';
import type { DesiredChange } from '../db/desired';
import { describeError } from '../db/errors';
import type { PokeReason } from '../db/fleet-poll';
import { gatewayClaim } from '../db/gateway-client';
import type { IngestResult } from '../db/ingest';
import type { HubEnv } from '../env';
import { createLogger, type LogFields, type Logger } from '../log';
import { LogBudget } from '../log-budget';
import type { Pg } from '../pg';
import { dueNow, phaseCheckOffset, releaseDue, type ClockState } from './clock';
import type { DesiredPump } from './desired-pump';
import type { FleetMember, SessionRef } from './fleet-member';
import { admitConnect } from './handshake';
import { answerHello, claimSnapshotRows } from './hello';
import { logAccepted, logCommitted, logPeerError, settleCommitted, triageFrame } from './inbound';
import { answeredOnCommit, type BuiltBatch, type InboundItem } from './ingest-batch';
import { unappliedBounds, type IngestPipeline } from './ingest-pipeline';
import { holdInIsolate, IsolateHoldCheck } from './isolate-hold';
import { buildLiveView, type LiveView } from './live-view';
import { ResidencyGate } from '../residency-gate';
import { sessionRetryDelay } from './retry-delay';
import type { SessionClock } from './session-clock';
import { buildSessionParts } from './session-parts';
import type { SendPath } from './send-path';
import type { SessionState } from './session-state';
import type { Attachment, Sockets } from './sockets';
import type { WakeCounter, WakeStats } from './wakes';

export type { LiveView } from './live-view';

/**
 * One operator session in a Durable Object with WebSocket hibernation. A thin shell: each
 * handler asks the pure policies what to do (handshake.ts, inbound.ts, clock.ts) and performs it
 * through its parts: the session's durable state (session-state.ts), its sockets, the send path,
 * the desired pump, the ingest pipeline and its membership of the fleet poll (built and wired to
 * each other in session-parts.ts). Everything a
 * session needs after an eviction is in the object's SQLite; memory is only a cache of it.
 */
export class SessionObject extends DurableObject<HubEnv> {
  private readonly cfg: HubConfig;
  private readonly state!: SessionState;
  private readonly wakes!: WakeCounter;
  /** Its own connection for ingest only; every other statement goes through the shared gateway. */
  private readonly pg!: Pg;
  private readonly baseLog: Logger;
  /** Outside the deployment's jurisdiction the object builds no part and every entry point refuses. */
  private readonly gate: ResidencyGate;
  private readonly sockets!: Sockets;
  private readonly sendPath!: SendPath;
  private readonly pump!: DesiredPump;
  private readonly ingest!: IngestPipeline;
  /** Past these, frames unacknowledged and bytes unapplied, the operator is told to come back (unappliedBounds). */
  private readonly unapplied: { frames: number; bytes: number };
  /** And past what the isolate's sessions hold unapplied together (isolate-hold.ts). */
  private readonly isolateHold: IsolateHoldCheck;
  private readonly fleet!: FleetMember;
  private helloInProgress: Promise<void> | null = null;
  /** Alarm runs that threw in a row: the next is put off by a growing delay (`runDue`). */
  private alarmFailures = 0;
  /** What the hello under way claimed, and whether a connection ended without publishing it. */
  private helloClaim: SessionRef | null = null;
  private disconnectHeld = false;
  private readonly held: HeldFrames;
  /** Lines the operator can provoke once per frame (poison, unknown types, error frames): log-budget.ts. */
  private readonly logBudget = new LogBudget();
  /** Changes whenever the object is constructed again (no ULID: construction is on the idle path). */
  private readonly instance = `${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  private readonly clock!: SessionClock;

  constructor(ctx: DurableObjectState, env: HubEnv) {
    super(ctx, env);
    const cfg = (this.cfg = hubConfig(env));
    this.unapplied = unappliedBounds(cfg);
    this.isolateHold = new IsolateHoldCheck(cfg.ISOLATE_UNAPPLIED_BYTES);
    this.held = new HeldFrames(HELD_FRAMES_OF_MAX_SIZE * (cfg.MAX_FRAME_BYTES + HELD_FRAME_OVERHEAD));
    this.baseLog = createLogger({ component: 'session' });
    if ((this.gate = new ResidencyGate(ctx.id, cfg, this.baseLog, ctx.storage)).misplaced) return;
    ({
      state: this.state,
      wakes: this.wakes,
      pg: this.pg,
      clock: this.clock,
      sockets: this.sockets,
      sendPath: this.sendPath,
      pump: this.pump,
      fleet: this.fleet,
      ingest: this.ingest,
    } = buildSessionParts(ctx, env, cfg, this.baseLog, this.logBudget, {
      clockState: () => this.clockState(),
      runDue: (what) => void this.runDue(what),
      connectionEnded: (why, fields) => this.onConnectionEnded(why, fields),
      syncAutoPong: () => this.syncAutoPong(),
      liveView: () => this.liveView(),
      handshaking: () => this.helloInProgress !== null,
      committed: (items, built, result) => this.onCommitted(items, built, result),
      commitFailed: (err) => {
        // Memory is only a cache of storage: the object starts again from what is stored (the
        // connections go with it), and the operator resumes and replays from the stored cursor.
        this.state.log.error('a committed ingest batch could not be settled (its record not stored); resetting the session object for a replay', { error: describeError(err) });
        this.ctx.abort('settling a committed ingest batch failed');
      },
    }));
    holdInIsolate(this.ingest);
  }

  // --- The runtime's handlers ------------------------------------------------------------------

  override async fetch(request: Request): Promise<Response> {
    if (this.gate.misplaced) return this.gate.refusal();
    this.wakes.note('fetch');
    const now = Date.now();
    const att = admitConnect(request.headers, now, newId(now));
    if (!('cid' in att)) return Response.json({ error: { code: 'invalid', message: att.message } }, { status: att.status });
    // Defence in depth: routing is keyed by the token's cluster, so this never differs.
    if (this.state.meta && this.state.meta.clusterUid !== att.clusterUid) {
      this.baseLog.error("connect routed to another cluster's session object; refusing", { cluster: att.clusterUid });
      return Response.json({ error: { code: 'internal', message: 'session routing mismatch' } }, { status: 500 });
    }
    const [client, server] = Object.values(new WebSocketPair()) as [WebSocket, WebSocket];
    this.sockets.accept(server, att);
    this.syncAutoPong();
    await this.clock.schedule();
    return new Response(null, { status: 101, webSocket: client });
  }

  override async webSocketMessage(ws: WebSocket, message: string | ArrayBuffer): Promise<void> {
    if (this.gate.refuses('webSocketMessage', ws)) return;
    this.wakes.note('message');
    if (this.helloInProgress) this.defer(ws, message);
    else this.dispatch(ws, message);
  }

  /**
   * Hold a frame until the hello in progress settles (held-frames.ts). What needs no session is
   * answered at once (binary, over the size limit); past the bound the sender is told to come back
   * (1013), as when too many frames wait to be applied.
   */
  private defer(ws: WebSocket, message: string | ArrayBuffer): void {
    if (typeof message !== 'string' || bytesOver(message, this.cfg.MAX_FRAME_BYTES) > 0) return this.dispatch(ws, message);
    // A held frame of the session's own connection is a sign of life when it arrives, not when
    // the hello lets it through: a claim slower than the silence limit (a lock, a slow database)
    // must not cut an operator that kept talking, its pings held with everything else.
    if (ws === this.sockets.active()) this.state.noteFrame(Date.now());
    if (!this.held.hold(ws, message)) {
      this.sockets.refuse(ws, CloseCode.TRY_AGAIN_LATER, null, 'unavailable', 'too many frames sent while a handshake was in progress; reconnect and replay', true);
    }
  }

  override async webSocketClose(ws: WebSocket, code: number, reason: string): Promise<void> {
    if (this.gate.refuses('webSocketClose', ws)) return;
    this.wakes.note('close');
    const neverSpoke = this.sockets.attachment(ws)?.phase === 'handshake' && !this.helloInProgress;
    // Echoing 1005/1006 back hangs some clients' close for seconds.
    try {
      ws.close(CloseCode.NORMAL, 'closing');
    } catch {
      // already closed
    }
    this.sockets.forget(ws, `closed by peer (${code}${reason ? `: ${reason}` : ''})`, { code, reason });
    if (neverSpoke && this.sockets.all().every((w) => w === ws)) {
      // Local workerd keeps the TCP connection of a socket that never delivered a message until
      // its object is evicted (close frame at 10.0 s, TCP end at 20.0 s, measured on a quiet
      // hub). With nothing else alive here, reset the object so it ends now: memory is only a
      // cache of storage, and the alarm survives.
      this.ctx.abort('released a connection that closed without a message');
    }
  }

  override async webSocketError(ws: WebSocket, error: unknown): Promise<void> {
    if (this.gate.refuses('webSocketError', ws)) return;
    this.wakes.note('error');
    this.sockets.forget(ws, `socket error: ${describeError(error)}`);
  }

  override async alarm(): Promise<void> {
    // A misplaced object's retention: it never serves again, so its storage goes now.
    if (this.gate.refuses('alarm')) return this.gate.discard();
    this.wakes.note('alarm');
    this.clock.lapsed();
    await this.runDue('alarm');
  }

  private async runDue(what: string): Promise<void> {
    let forgotten = false;
    let failed = false;
    try {
      this.logBudget.flush(this.state.log);
      forgotten = await this.onAlarm();
      this.alarmFailures = 0;
    } catch (err) {
      failed = true;
      this.alarmFailures++;
      this.state.log.error(`${what} failed`, { error: describeError(err), failures: this.alarmFailures });
    } finally {
      // The alarm is the session's clock: never let it lapse, nor spin on a deadline whose action throws.
      if (!forgotten) await this.clock.schedule(failed ? Date.now() + sessionRetryDelay(this.cfg.POLL_INTERVAL_MS, this.alarmFailures - 1) : undefined);
      else if (this.sockets.closingSince() !== null) await this.clock.schedule();
    }
    if (releaseDue(this.clockState(), this.cfg, Date.now())) await this.releaseClosing();
  }

  /**
   * End the TCP connections of sockets the hub closed whose peer never answered the close: local
   * workerd waits for that answer with no limit of its own, and a Workers WebSocket has no call
   * that drops its connection (no terminate()). Resetting the object ends them, and only them,
   * since none is open (`releaseDue`). The alarm just written is flushed first: memory is only a
   * cache of storage, and the session resumes at the next hello as after any eviction.
   */
  private async releaseClosing(): Promise<void> {
    this.state.log.info('releasing connections whose peer never answered the close', { closing_since: this.sockets.closingSince() });
    await this.ctx.storage.sync();
    // A hello accepted while the sync ran would be cut by the reset: it waits for the next alarm.
    if (!releaseDue(this.clockState(), this.cfg, Date.now())) return;
    this.ctx.abort('released connections whose peer never answered the close');
  }

  /** Act on whatever deadline is due; true when the session was forgotten. */
  private async onAlarm(): Promise<boolean> {
    const now = Date.now();
    const { state, sockets } = this;
    const active = sockets.active();
    // A connection that ended without its close reaching the object (a restart): retention counts
    // from now, and Postgres, which still shows it connected and in the fleet poll, hears of it
    // now rather than at the sweep (LIVE_SWEEP_MS, minutes). A hello under way decides instead.
    const meta = state.meta;
    if (!active && meta && meta.disconnectedAt === null) {
      state.disconnected(now);
      if (!this.helloInProgress) await this.fleet.disconnected(meta);
      else this.disconnectHeld = true;
    }
    for (const due of dueNow(this.clockState(), this.cfg, now)) {
      if (due.t === 'handshake') sockets.close(due.key, CloseCode.TIMEOUT, `no hello within ${this.cfg.HANDSHAKE_TIMEOUT_MS} ms`);
      else if (due.t === 'silence') sockets.closeActive(CloseCode.TIMEOUT, `no frame for ${this.cfg.IDLE_TIMEOUT_MS} ms`);
      else if (due.t === 'window') {
        // A peer that stays alive but never acknowledges would stall desired state forever.
        sockets.closeActive(CloseCode.SEND_QUEUE_FULL, 'replay window not released', 'log', { unacked: state.outbound.unacked });
      } else if (due.t === 'hole' && active) {
        sockets.refuse(active, CloseCode.TRY_AGAIN_LATER, null, 'unavailable', 'frames could not be applied in time; reconnect and replay', true);
      } else if (due.t === 'resend' && active) {
        this.sendPath.resendUnacked(now);
      } else if (due.t === 'retention') {
        const log = state.log;
        log.info('session retention expired; deleting its storage');
        await this.forget();
        // Its end too: the alarm is done and the object may sleep (a close that waited on a
        // stalled database link once kept it awake for as long as the link stayed stalled).
        log.info('session storage deleted');
        return true;
      }
    }
    // A failed fetch's retry is a timer, gone with an eviction; on a cluster at revision 0 with
    // every frame acked, no poll, sweep or ack would run the pump again (a resync's stream.end
    // never sent). An open session always has an alarm, so it retries here at the latest.
    if (active && sockets.active() === active && this.pump.owes()) void this.pump.run();
    return false;
  }

  // --- RPC -------------------------------------------------------------------------------------

  /** Desired state for this cluster changed in Postgres (the admin API): send it now. */
  async poke(revision: number, changes: DesiredChange[] = []): Promise<void> {
    this.gate.enter('poke');
    this.wakes.note('poke');
    this.fleet.desiredPoked();
    this.pump.poke(revision, changes);
  }

  /** Something about `sessionId` changed (fleet poll, or the claim that displaced it), or a sweep: true when swept alive. */
  async check(sessionId: string, why: PokeReason): Promise<boolean> {
    this.gate.enter('check');
    this.wakes.note('check');
    return this.fleet.poked(sessionId, why);
  }

  async status(): Promise<LiveView> {
    this.gate.enter('status');
    return this.liveView();
  }

  /** How often this object has been woken (not counting this call, or `status`). */
  async wakeStats(): Promise<WakeStats> {
    this.gate.enter('wakeStats');
    return this.wakes.snapshot();
  }

  // --- Frames ----------------------------------------------------------------------------------

  private dispatch(ws: WebSocket, message: string | ArrayBuffer): void {
    const att = this.sockets.attachment(ws);
    if (!att) return this.sockets.close(ws, CloseCode.INTERNAL, 'unknown connection');
    if (typeof message !== 'string') return this.sockets.protocolError(ws, null, 'binary frames are not part of the protocol');
    if (bytesOver(message, this.cfg.MAX_FRAME_BYTES) > 0) {
      this.sockets.sendError(ws, null, 'invalid', `frame exceeds max_frame_bytes ${this.cfg.MAX_FRAME_BYTES}`, false);
      return this.sockets.close(ws, CloseCode.TOO_BIG, 'frame too big');
    }
    if (att.phase === 'handshake') {
      // A connection refused at its hello is closing; a frame it sent before it heard so can
      // arrive after the refusal, and would be taken for its first frame. (Our own record, not
      // readyState: the runtime's readyState of a just-accepted socket is not reliably OPEN when
      // its first message arrives, and a hello dropped on it showed up in CI as a 4400.)
      if (this.sockets.ended(ws)) return;
      this.helloInProgress = this.hello(ws, att, message).finally(() => {
        this.helloInProgress = null;
        this.settleHello();
        for (const [w, m] of this.held.take()) {
          // A frame whose socket closed meanwhile (its own hello refused) is dropped: its
          // attachment still says handshake, and it would be taken for a first frame.
          if (this.sockets.ended(w)) continue;
          if (this.helloInProgress) this.defer(w, m);
          else this.dispatch(w, m);
        }
      });
      return;
    }
    // A superseded connection's late frames are not part of the session any more. And the silence
    // rule is the active connection's: a frame on a connection still in its handshake (or one
    // refused, or superseded) is no sign of life of the peer the session talks to. The hello that
    // opens or resumes the session sets the time itself (`opened`, in `hello`).
    if (ws === this.sockets.active()) {
      this.state.noteFrame(Date.now());
      this.onSessionFrame(ws, message);
    }
  }

  private async hello(ws: WebSocket, att: Attachment, text: string): Promise<void> {
    try {
      await answerHello(
        {
          cfg: this.cfg,
          claim: (args) => gatewayClaim(this.env, args, claimSnapshotRows(this.cfg)),
          baseLog: this.baseLog,
          state: this.state,
          sockets: this.sockets,
          quiesceIngest: () => this.ingest.quiesce(),
          resetOutgoing: () => this.resetOutgoing(),
          committed: (sessionId, generation) => {
            this.helloClaim = { sessionId, generation, clusterUid: att.clusterUid, tokenHashHex: att.tokenHash };
          },
          claimed: (clusterUid, routeKey, previous) => this.fleet.claimed(clusterUid, routeKey, previous),
          opened: async (desiredRevision, snapshot) => {
            // The hello is the new connection's first sign of life, and the only one counted
            // until it is active (webSocketMessage): the clock must not read an older connection's.
            if (this.state.meta) this.state.lastFrameAt = this.state.meta.lastFrameAt;
            this.pump.reset(this.state.meta);
            this.pump.learn(desiredRevision);
            this.syncAutoPong();
            // A resumed session's owed answers (kept across the disconnect or an eviction) go first.
            if (this.sendPath.pending > 0) void this.sendPath.drain();
            // A fresh session's resync starts from the page its claim brought: queued now, it is
            // written in the welcome's commit.
            if (snapshot) this.pump.seed(snapshot, claimSnapshotRows(this.cfg));
            else void this.pump.run();
            await this.clock.schedule();
          },
        },
        ws,
        att,
        text,
      );
    } catch (err) {
      // The same cluster, session (once known) and connection as the refusal's line that follows.
      this.baseLog.error('hello failed unexpectedly', { ...this.sockets.whose(ws), error: describeError(err) });
      this.sockets.refuse(ws, CloseCode.INTERNAL, null, 'internal', 'internal error during handshake', true);
    }
  }

  /** The hot path: one frame of an open session. Synchronous; applying happens in batches. */
  private onSessionFrame(ws: WebSocket, text: string): void {
    const { state, sockets } = this;
    const meta = state.meta;
    if (!meta) return;
    const f = readFrame(text);
    if (f.kind === 'fatal') return sockets.protocolError(ws, f.id, f.reason);
    const ack = f.envelope.ack;
    if (ack !== null) {
      const verdict = state.acknowledge(ack);
      if (verdict === 'invalid') return sockets.protocolError(ws, answerableId(f.envelope.id), `ack ${ack} is beyond the last seq sent (${state.outbound.lastSent})`);
      if (verdict === 'advanced') {
        if (this.sendPath.pending > 0) void this.sendPath.drain();
        // Nothing queued, yet something owed: the queue that waited for this room was lost with
        // an eviction (it lives in memory), and on a cluster at revision 0 no poll would poke for
        // a hub resync's rest, its stream.end never sent.
        else if (this.pump.owes()) void this.pump.run();
        this.syncAutoPong();
      }
    }
    const action = triageFrame(f, (seq) => state.inbound.arrive(seq), () => state.inbound.expected, Date.now());
    switch (action.do) {
      case 'protocol-error':
        return sockets.protocolError(ws, action.replyTo, action.reason);
      case 'pong':
        sockets.send(ws, canonicalPong(state.inbound.cursor));
        return this.syncAutoPong();
      case 'peer-error':
        return logPeerError(state.log, this.logBudget, action.payload, f.envelope.reply_to);
      case 'duplicate':
        return state.countDuplicate();
      case 'apply':
        // Owing the operator too many answers closes the link with this frame unapplied (replayed).
        if (!this.sendPath.admit(answeredOnCommit(action.item))) return;
        action.item.bytes = text.length;
        this.ingest.push(action.item);
        // A frame still unapplied HOLE_TIMEOUT_MS after it came closes the link (1013): the alarm
        // must come by then, not only at the next silence check (up to IDLE_TIMEOUT_MS later).
        this.clock.dueBy((this.ingest.oldestArrival() ?? action.item.arrivedAt) + this.cfg.HOLE_TIMEOUT_MS);
        // Frames: every one not yet acknowledged, those applied past a hole too (the operator
        // replays them with it). Bytes: only those still held here, unapplied.
        if (state.inbound.expected - 1 - state.inbound.cursor > this.unapplied.frames || this.ingest.bytes > this.unapplied.bytes) {
          sockets.refuse(ws, CloseCode.TRY_AGAIN_LATER, null, 'unavailable', 'too many frames waiting to be applied; reconnect and replay', true);
        } else if (this.isolateHold.over(text.length, this.ingest.bytes)) {
          state.log.warn('closing: the sessions of this isolate hold too many frames waiting to be applied (the database slow or away?)', {
            held_by_session: this.ingest.bytes,
            budget: this.cfg.ISOLATE_UNAPPLIED_BYTES,
            seq: action.item.seq,
          });
          sockets.refuse(ws, CloseCode.TRY_AGAIN_LATER, null, 'unavailable', 'this hub holds too many frames waiting to be applied; reconnect and replay', true);
        }
    }
  }

  /** A batch is committed in Postgres: settle its frames, persist the cursor, ack, answer. */
  private onCommitted(items: InboundItem[], built: BuiltBatch, result: IngestResult): void {
    const { state } = this;
    if (!state.meta) return;
    const settled = settleCommitted(items, built, result, (state.meta.countedAhead ??= []));
    // Saved with the cursor below: the owner row already holds it, so a claim or a statement
    // finding fewer there knows the database went back.
    if (result.commits !== undefined) state.meta.ingestCommits = Math.max(state.meta.ingestCommits ?? 0, result.commits);
    state.settle(settled, built.resyncs);
    // Said when it is true: a frame not yet committed may be replayed (a link closed 1013), and
    // was logged once per delivery, "acknowledged and recorded" before either.
    let answerable = 0;
    for (const item of items) {
      logAccepted(state.log, this.logBudget, item);
      if (answeredOnCommit(item)) answerable++;
    }
    this.sendPath.answered(answerable);
    logCommitted(state.log, this.logBudget, built, result);
    this.logBudget.flush(state.log);
    // Stored in this turn's commit with the cursor that passes their frames.
    this.sendPath.owe(settled.answers);
    const ws = this.sockets.active();
    if (ws) this.sockets.send(ws, buildFrame({ type: 'ack', payload: {}, ack: state.inbound.cursor }));
    this.syncAutoPong();
  }

  // --- Connection state ------------------------------------------------------------------------

  private onConnectionEnded(why: string, fields: LogFields): void {
    this.logBudget.flush(this.state.log, true);
    this.resetOutgoing();
    this.syncAutoPong();
    const meta = this.state.meta;
    if (!meta) return;
    this.state.disconnected(Date.now());
    this.state.log.info('session connection ended', { ...fields, why, hub_cursor: this.state.inbound.cursor, unacked: this.state.outbound.unacked });
    // A hello under way may be resuming this very session on its new connection (its claim
    // already recorded): a disconnect published now would mark the session disconnected and take
    // it out of the fleet poll for good. If that hello does not open the session, `settleHello` publishes it.
    if (!this.helloInProgress) void this.fleet.disconnected(meta);
    else this.disconnectHeld = true;
    void this.clock.schedule();
  }

  /** After every hello: publish what it claimed and did not open, and a disconnect it held back. */
  private settleHello(): void {
    const claim = this.helloClaim;
    const held = this.disconnectHeld;
    this.helloClaim = null;
    this.disconnectHeld = false;
    this.fleet.afterHello(claim, held);
  }

  /** Drop what was queued but not numbered; the fetch restarts from what was written. */
  private resetOutgoing(): void {
    this.sendPath.clear();
    this.pump.reset(this.state.meta);
  }

  private syncAutoPong(): void {
    // Not while a connection is in its handshake: its first frame must reach the hello check.
    this.sockets.autoAnswer(this.state.autoPair(this.sockets.active() !== null && !this.sockets.anyHandshaking()));
  }

  /**
   * The extra silence check that spreads an idle fleet's wake phases (clock.ts): from the
   * connection's acceptance and the session id, both of which survive an eviction (a time kept
   * only in memory was lost with the object before its check came, and the check with it).
   */
  private phaseCheckAt(ws: WebSocket): number | null {
    const att = this.sockets.attachment(ws);
    const meta = this.state.meta;
    return att && meta ? att.acceptedAt + phaseCheckOffset(meta.sessionId, this.cfg.IDLE_TIMEOUT_MS) : null;
  }

  private clockState(): ClockState<WebSocket> {
    const active = this.sockets.active();
    // A socket already closing needs no timer; counting it would re-fire a past deadline in a loop.
    const open = this.sockets.all().filter((w) => w.readyState === WebSocket.OPEN);
    return {
      handshakes: open.flatMap((ws) => {
        const att = this.sockets.attachment(ws);
        return att?.phase === 'handshake' ? [{ key: ws, acceptedAt: att.acceptedAt }] : [];
      }),
      active: active ? { lastSeen: this.sockets.lastSeen(active, this.state.lastFrameAt), phaseCheckAt: this.phaseCheckAt(active) } : null,
      oldestUnapplied: this.ingest.oldestArrival(),
      windowFullSince: this.sendPath.windowWaitSince(),
      ackWaitSince: this.state.meta?.ackWaitSince ?? null,
      session: this.state.meta ? { disconnectedAt: this.state.meta.disconnectedAt } : null,
      anyOpen: open.length > 0,
      closingSince: this.sockets.closingSince(),
    };
  }

  private async forget(): Promise<void> {
    // Storage first, while the input gate holds every other event back: a hello that arrives
    // during the network awaits below then finds no session and opens a fresh one, instead of
    // resuming a session whose storage is deleted after its welcome (an open socket with no
    // session behind it: nothing acked, no pong, no deadline).
    await this.state.forget();
    this.clock.lapsed();
    this.wakes.reinit();
    this.resetOutgoing();
    this.syncAutoPong();
    await this.ingest.quiesce();
    await this.pg.close();
  }

  private liveView(): LiveView {
    const { state } = this;
    const active = this.sockets.active();
    return buildLiveView({
      instance: this.instance,
      connected: active !== null,
      meta: state.meta,
      inbound: { cursor: state.inbound.cursor, expected: state.inbound.expected },
      outbound: { lastSent: state.outbound.lastSent, peerAck: state.outbound.peerAck, unacked: state.outbound.unacked, bytes: state.outbound.store.bytes },
      pendingApply: this.ingest.size,
      heldSubjects: this.ingest.heldSubjects,
      applyInFlight: this.ingest.statementsInFlight,
      sendQueue: this.sendPath.pending,
      lastSeen: active ? this.sockets.lastSeen(active, state.lastFrameAt) : state.lastFrameAt,
      wakes: this.wakes.snapshot(),
    });
  }
}
