/**
 * The operator SDK's client: one cluster's side of the Wingsmith plane–operator link. A thin
 * shell: it wires components that talk back through host interfaces (`Connection`, `Receiver`,
 * `Writer`, `SendSide`, `SessionState`, `RecordKeeper`, `OperationBook`) and makes the
 * session-level decisions with pure policies (handshake.ts, refusal.ts, drain.ts,
 * resume-base.ts). How to embed it, what it guarantees in the spec's terms, and a map of the
 * files are in README.md beside this file.
 */
import { EventEmitter } from 'node:events';
import {
  canonicalPing,
  canonicalPong,
  CloseCode,
  newId,
  timestamp,
  type Payload,
  type PushOutcome,
} from '../protocol';
import { Backoff, DEFAULT_BACKOFF } from './backoff';
import { assertTuning, zeroStats, type ClientEvents, type ClientState, type ClientStats, type OperatorClientOptions, type SessionView } from './client-types';
import { Connection } from './connection';
import { isCleanStop, isDrained, type DrainView } from './drain';
import { RecordKeeper } from './durable';
import { StateDirLostError } from './state-lock';
import { assertHandlers } from './handlers';
import { bearerToken, boundedLimits, decideWelcome, helloIdentity } from './handshake';
import type { DispatchHost } from './inbound-dispatch';
import type { Link } from './link';
import { LinkStatsReporter } from './link-stats';
import { jsonLogger, type Logger } from './logger';
import { OperationBook, type OperationHost } from './operations';
import { MemoryOutboundLog, type OutboundLog } from './outbound-log';
import { outItem, reportablePayload } from './outgoing';
import { Outbox } from './outbox';
import { Receiver } from './receiver';
import { SendSide } from './send-side';
import { SessionState } from './session';
import type { StorageWatch } from './storage-watch';
import { systemTimers, type Timers } from './timers';
import { connectUrl } from './transport';
import { Writer } from './writer';
import { wsDialer } from './ws-transport';

export type { ClientEvents, ClientState, ClientStats, Limits, OperatorClientOptions, RefusedEvent, SessionView } from './client-types';

const NOOP = () => {};
/**
 * The most out-of-bounds welcome limits remembered as warned about. The values are the hub's: one
 * sending a new one at every welcome must not grow the memory for the life of the process. Past
 * it the memory starts over, so a value may be warned about once more.
 */
const MAX_LIMIT_WARNINGS = 64;

type Reportable = `${'cluster' | 'node' | 'device' | 'deployment'}.observed` | `${'node' | 'device' | 'deployment'}.${'removed' | 'event'}`;

export class OperatorClient extends EventEmitter<ClientEvents> {
  private readonly opts: OperatorClientOptions;
  private readonly timers: Timers;
  private readonly log: Logger;
  /**
   * `log` naming the session too, for lines about the hub's frames (seq numbers restart in every
   * fresh session: a seq without its session points at nothing). Rebuilt when the session is
   * restored and at each welcome, not per frame.
   */
  private sessionLog: Logger;
  private readonly outbox: Outbox;
  private readonly buffer: OutboundLog;
  private readonly counters: ClientStats;
  private readonly s: SessionState;
  private readonly record: RecordKeeper;
  private readonly conn: Connection;
  private readonly receiver: Receiver;
  private readonly writer: Writer;
  private readonly sendSide: SendSide;
  private book!: OperationBook;
  private current: ClientState = 'idle';
  private stopping = false;
  private stopPromise: Promise<void> | null = null;
  private starting: Promise<void> | null = null;
  private drainWaiters: (() => void)[] = [];
  /** The stop's drain is over: nothing more is written to the hub, so reports are refused. */
  private sendingEnded = false;
  private refusedAfterStop = false;
  /** Out-of-bounds welcome limits already warned about: a hub that always sends one is logged once. */
  private readonly limitWarnings = new Set<string>();

  constructor(options: OperatorClientOptions) {
    super();
    assertHandlers(options.handlers);
    assertTuning(options);
    options = { ...options, token: bearerToken(options.token), ...helloIdentity(options.clusterId, options.operatorVersion) };
    this.opts = options;
    const timers = (this.timers = options.timers ?? systemTimers);
    const log = (this.log = (options.logger ?? jsonLogger()).child({ cluster: options.clusterId }));
    this.sessionLog = log;
    const capacity = options.sendQueueCapacity ?? 4096;
    const outbox = (this.outbox = new Outbox(capacity, options.controlQueueLimit ?? Math.max(capacity, 64)));
    const buffer = (this.buffer = options.outboundLog ?? new MemoryOutboundLog());
    const epoch = newId(timers.now());
    const counters = (this.counters = zeroStats(epoch));
    const session = (this.s = new SessionState(buffer));
    const operations = () => (this.book ? this.book.snapshot() : []);
    const storageWatch: StorageWatch = {
      timers,
      stallMs: options.handlerStallMs ?? 30_000,
      stalled: (info) => this.safeEmit('saveStalled', info),
      log: () => this.sessionLog,
    };
    const record = (this.record = new RecordKeeper(options.cursorStore, log, (clean) => session.record(clean, operations()), (err) => this.storageError(err), storageWatch));
    const emit = <K extends keyof ClientEvents>(event: K, ...args: ClientEvents[K]) => this.safeEmit(event, ...args);
    const stopping = () => this.stopping;
    this.conn = new Connection({
      opts: options, url: connectUrl(options.url), timers, log, counters, session, record, emit, stopping,
      dial: options.dial ?? wsDialer(),
      backoff: new Backoff({ ...DEFAULT_BACKOFF, ...options.backoff }, options.random ?? Math.random),
      setState: (state) => this.setState(state),
      onMessage: (link, text, binary) => this.receiver.onMessage(link, text, binary),
      linkClosed: () => {
        this.receiver.cancelRetries();
        this.writer.reset();
        this.sendSide.linkClosed();
        this.checkDrained();
      },
    });
    const sessionLog = () => this.sessionLog;
    this.receiver = new Receiver({
      timers, counters,
      get log() {
        return sessionLog();
      },
      retryPolicy: { baseMs: 500, capMs: 30_000, ...options.retry },
      inbound: () => session.inbound,
      outbound: () => session.outbound,
      link: () => this.conn.link,
      dispatchHost: () => this.dispatchHost(),
      roomForReplies: (owed) => outbox.canApply(owed),
      protocolError: (link, reason, replyTo) => this.conn.protocolError(link, reason, replyTo ?? null),
      welcome: (link, w) => this.onWelcome(link, w),
      hubError: (payload, replyTo, seq) => this.safeEmit('hubError', { payload, replyTo, seq }),
      answerPing: (link) => this.conn.writeCursor(link, canonicalPong(record.persistedCursor)),
      acknowledged: (peerAck) => {
        this.book.acknowledged(peerAck);
        this.writer.request();
        this.checkDrained();
      },
      snapshotChanged: () => record.markChanged(),
      handlerFailed: () => this.sendSide.scheduleStats(),
      handlerStallMs: options.handlerStallMs ?? 30_000,
      stalled: (info) => this.safeEmit('stalled', info),
      cursorAdvanced: () => this.writer.cursorAdvanced(),
      settled: () => this.checkDrained(),
      stopping,
    });
    this.writer = new Writer({
      timers, counters, outbox, buffer, stopping, storageWatch,
      get log() {
        return sessionLog();
      },
      ackDelayMs: options.ackDelayMs ?? 50,
      outbound: () => session.outbound,
      cursor: () => session.ackableCursor(),
      durableCursor: () => record.persistedCursor,
      limits: () => session.limits,
      // Nothing is numbered into the log after the record's last save: the record would not back it.
      link: () => (record.sealed ? null : this.conn.link),
      needsSave: () => record.needsSave(session.ackableCursor()),
      persist: () => record.persist(),
      storageFailed: (numbered, err) => {
        // A log that failed to sync cannot vouch for itself any more.
        if (numbered) {
          session.lossy = true;
          record.markChanged();
        }
        this.storageError(err);
      },
      closeLink: (link, code, reason) => this.conn.close(link, code, reason),
      settledAnswers: (items) => {
        for (const item of items) session.answerSettled(item);
      },
      wrote: (written) => {
        // Control frames went out: conclusions that waited for room in the queue may follow.
        if (this.book.hasDeferred) this.book.resumeDeferred();
        this.sendSide.wrote(written);
      },
      idle: () => this.checkDrained(),
    });
    this.sendSide = new SendSide({
      timers, counters, outbox, stopping,
      // The session's logger: its lines name seqs of the session's numbering.
      get log() {
        return sessionLog();
      },
      linkStats: new LinkStatsReporter(epoch, options.statsIntervalMs ?? 5_000),
      snapshot: options.snapshot,
      reobserveDelayMs: options.reobserveDelayMs ?? 1_000,
      sessionGen: () => session.gen,
      random: options.random ?? Math.random,
      open: () => this.conn.link?.welcomed === true,
      requestPump: () => this.writer.request(),
    });
    session.appliedRevision.savedCursor = () => record.persistedCursor;
    session.appliedRevision.mustSave = () => {
      record.markChanged();
      // Saved here, not by the writer: it saves only while a link is open, and a handler that
      // returns after the link dropped would leave the revision unsaved for the whole backoff.
      // After the stop's final save this writes nothing (RecordKeeper.finalSave).
      record.persist().catch((err: unknown) => log.error('could not save a revision a replay could undo', { err }));
    };
  }

  // --- public surface ----------------------------------------------------------------------------

  get state(): ClientState {
    return this.current;
  }

  /** The session in force (null before the first welcome of a new operator). */
  get session(): SessionView {
    return { ...this.s.view(), durableCursor: this.record.persistedCursor, nextReconnectInMs: this.conn.nextReconnectInMs };
  }

  get stats(): ClientStats {
    return { ...this.counters, queue: this.outbox.counters, queued: this.outbox.length, unacked: this.s.outbound.unacked };
  }

  /**
   * Load the durable state, then connect (and keep reconnecting) in the background. A start that
   * fails (the record unreadable, its first save refused) rejects and leaves the client stopped.
   */
  start(): Promise<void> {
    // A stop under way still reads 'idle' until it resolves; a start then would load and save the
    // record after the stop gave the state directory up.
    if (this.stopPromise) throw new Error(`start() called after stop() (state ${this.current})`);
    if (this.current !== 'idle' || this.starting) throw new Error(`start() called in state ${this.current}`);
    this.starting = this.startNow();
    // Told only now that the stop can see the start: a listener that stops the client on it must
    // wait for the start, not close the log under it.
    this.setState('connecting');
    return this.starting.catch(async (err: unknown) => {
      // Half restored, it cannot start again; left 'connecting' it looked alive while nothing ran.
      // The stop closes the log, which gives the state directory up for a retry with a new client.
      this.log.error('the operator could not start; stopping', { err });
      // The start's own error is the one its caller must see, not a failure of this cleanup.
      await this.stop().catch((stopErr: unknown) => this.log.error('the stop after a failed start failed', { err: stopErr }));
      throw err;
    });
  }

  /**
   * Stop. Graceful (the default): ask running operations to stop, wait up to `timeoutMs` for
   * everything sent to be acknowledged and the cursor to be acked, persist (marked clean when
   * nothing was left over), close with 1000. Not graceful: persist as unclean and close now.
   */
  stop(options: { graceful?: boolean; timeoutMs?: number } = {}): Promise<void> {
    this.stopPromise ??= this.stopNow(options.graceful ?? true, options.timeoutMs ?? this.opts.drainTimeoutMs ?? 10_000);
    return this.stopPromise;
  }

  /**
   * The state directory was taken over by another process (StateDirLostError): it numbers frames
   * from the same files now, so this one must neither write them nor speak for the cluster (its
   * next hello would displace the new holder's session). It stops at once, without a drain.
   */
  private storageError(err: unknown): void {
    if (!(err instanceof StateDirLostError) || this.stopPromise) return;
    this.log.error('the state directory is no longer this process\'s: stopping', { err });
    void this.stop({ graceful: false });
  }

  reportCluster(payload: Payload<'cluster.observed'>): PushOutcome {
    return this.report('cluster.observed', payload);
  }

  reportNode(payload: Payload<'node.observed'>): PushOutcome {
    return this.report('node.observed', payload);
  }

  removeNode(nodeId: string): PushOutcome {
    return this.report('node.removed', { node_id: nodeId });
  }

  reportDevice(payload: Payload<'device.observed'>): PushOutcome {
    return this.report('device.observed', payload);
  }

  removeDevice(deviceId: string): PushOutcome {
    return this.report('device.removed', { device_id: deviceId });
  }

  reportDeployment(payload: Payload<'deployment.observed'>): PushOutcome {
    return this.report('deployment.observed', payload);
  }

  removeDeployment(deploymentId: string): PushOutcome {
    return this.report('deployment.removed', { deployment_id: deploymentId });
  }

  /** Something that happened (`node.event` etc.). `occurred_at` defaults to now. */
  emitEvent(
    kind: 'node' | 'device' | 'deployment',
    event: Omit<Payload<'node.event'>, 'occurred_at'> & { occurred_at?: string },
  ): PushOutcome {
    return this.report(`${kind}.event`, { ...event, occurred_at: event.occurred_at ?? timestamp(this.timers.now()) });
  }

  /**
   * Stream the complete observed state now (a periodic reconciliation snapshot is legitimate at
   * any time). While disconnected it runs once the next session opens.
   */
  resync(): void {
    this.sendSide.resync();
  }

  // --- the session ---------------------------------------------------------------------------------

  /**
   * Validate an application report (catalog and frame size; a programming error throws) and queue
   * it, unless this client can send nothing more: a stop whose drain is over, or one begun with no
   * session open (a stopping client never dials). Queued, it would be answered as if it would go.
   */
  private report(type: Reportable, payload: unknown): PushOutcome {
    const item = outItem(type, reportablePayload(type, payload, this.s.limits.max_frame_bytes));
    const link = this.conn.link;
    if (this.sendingEnded || (this.stopping && !(link !== null && link.welcomed && !link.ended))) {
      if (!this.refusedAfterStop) {
        this.refusedAfterStop = true;
        this.log.warn('a report made after the stop began, with nothing more to be sent by this process: refused (this warning is logged once)', { type });
      }
      return 'rejected';
    }
    return this.sendSide.enqueue(item);
  }

  /** Close the outbound log, which also gives the state directory's lock up; a failure is logged. */
  private async closeLog(options: { dropUnsynced: boolean }): Promise<void> {
    try {
      await this.buffer.close(options);
    } catch (err) {
      this.log.error('could not close the outbound log', { err });
    }
  }

  private setState(s: ClientState): void {
    if (this.current === s) return;
    this.current = s;
    // Called from the middle of the link's work (a welcome half applied): a listener's throw
    // must not cut it short, nor escape from the socket's handler as an uncaught exception.
    this.safeEmit('state', s);
  }

  /** Emit to the application; a listener that throws must not break the link's own work. */
  private safeEmit<K extends keyof ClientEvents>(event: K, ...args: ClientEvents[K]): void {
    try {
      (this.emit as (e: K, ...a: ClientEvents[K]) => boolean)(event, ...args);
    } catch (err) {
      this.log.error(`a '${String(event)}' listener threw; ignored`, { err });
    }
  }

  private async startNow(): Promise<void> {
    const record = await this.record.load();
    this.record.persistedCursor = record.cursor;
    this.sendSide.resyncAfterOpen = this.s.restore(record, this.log).resyncAfterOpen;
    this.sessionLog = this.log.child({ session: this.s.id });
    this.book = new OperationBook(record.operations, this.operationHost(), this.opts.handlers, this.opts.operations);
    // A session this process continues replays its log: the conclusions in it go again that way.
    this.book.recover(this.buffer.entriesAfter(this.s.outbound.peerAck));
    // From here on a crash must be detectable: the record says "not clean" until a graceful stop.
    await this.record.persist();
    const s = this.s;
    this.log.info('operator starting', {
      session: s.id, resume_from: s.id ? this.record.persistedCursor : null, lossy: s.lossy,
      durable_outbound: this.buffer.durable, replayable_frames: s.outbound.unacked, next_seq: s.outbound.nextSeq,
    });
    this.conn.connect();
  }

  private onWelcome(link: Link, w: Payload<'welcome'>): void {
    // Hub frames that arrive once stop() began are not applied, a welcome least of all: the
    // stopping process would open a session (and go back to `open`) on its way out.
    if (this.stopping) return;
    const s = this.s;
    const asked = s.id;
    const decision = decideWelcome(asked, s.lossy, w);
    if (decision.kind === 'refuse') return this.conn.protocolError(link, decision.reason);
    const bounded = boundedLimits(w.limits);
    for (const a of bounded.adjusted) {
      const key = `${a.field}=${a.got}`;
      if (this.limitWarnings.has(key)) continue;
      if (this.limitWarnings.size >= MAX_LIMIT_WARNINGS) this.limitWarnings.clear();
      this.limitWarnings.add(key);
      this.log.warn("the hub's welcome asks for a timing limit, frame size or replay window outside the SDK's bounds: using the spec's value (for the frame size and the replay window, the SDK's default)", {
        field: a.field, got: a.got, used: a.used, min: a.bounds[0], max: a.bounds[1],
      });
    }
    s.limits = bounded.limits;
    const fresh = decision.kind === 'fresh';
    if (fresh) {
      const { dropped, droppedEvents, removals } = s.fresh(w.session_id);
      this.outbox.countLostEvents(droppedEvents);
      this.sendSide.freshSession();
      for (const r of removals) {
        const item = outItem(r.type, r.payload);
        // A report of the subject made since is newer than the removal: it stands.
        if (!this.outbox.hasQueued(item)) this.sendSide.enqueue(item);
      }
      // Nothing of the new session is processed yet: 0 is a true ack even before the save.
      this.record.freshCursor();
      this.book.freshSession();
      this.counters.freshSessions++;
      this.log.info('fresh session', { session: w.session_id, asked, full_resync: w.full_resync, dropped_unacked_frames: dropped, dropped_unacked_events: droppedEvents, removals_sent_again: removals.length });
    } else {
      const plan = s.resume(w.ack_seq, s.limits.max_frame_bytes);
      if (!plan.ok) {
        this.log.error('cannot resume the session; next hello says lossy', { reason: plan.reason, ack_seq: w.ack_seq });
        this.record.markChanged();
        return this.conn.protocolError(link, `cannot resume from ${w.ack_seq}: ${plan.reason}`);
      }
      this.book.acknowledged(w.ack_seq);
      link.replay = plan.replay;
      link.lastAckSent = this.record.persistedCursor;
      this.log.info('session resumed', { session: w.session_id, ack_seq: w.ack_seq, replaying: plan.replay.length });
    }
    this.sessionLog = this.log.child({ session: w.session_id });
    link.welcome();
    link.limitsChanged();
    this.counters.sessionsOpened++;
    this.setState('open');
    // Canonical: while the cursor does not move every ping is the same text, which the hub's
    // runtime answers without waking the session object.
    const pingMs = this.opts.pingIntervalMs ?? s.limits.ping_interval_s * 1000;
    link.startPinging(pingMs, () => this.conn.writeCursor(link, canonicalPing(this.record.persistedCursor)));
    this.sendSide.opened(fresh);
    this.safeEmit('welcome', { sessionId: w.session_id, fresh, hubVersion: w.hub_version, limits: { ...s.limits }, region: w.region ?? null });
    this.writer.request();
  }

  private dispatchHost(): DispatchHost {
    // One per frame: a handler that returns after a fresh welcome (its link cut meanwhile) must
    // leave nothing in the new session, whose numbering and applied revisions start over.
    const gen = this.s.gen;
    const current = () => this.s.gen === gen;
    return {
      current,
      handlers: this.opts.handlers,
      book: this.book,
      streams: this.s.streams,
      appliedRevision: this.s.appliedRevision,
      logger: this.sessionLog,
      counters: this.counters,
      send: (item) => {
        // An answer to a frame of a session that has since been replaced answers nothing the hub
        // still holds, and owing it would hold the new session's cursor at the old frame's seq.
        if (!current()) return;
        // Queued before the frame it answers settles, so no save of the cursor can pass it first.
        if (this.sendSide.enqueue(item) !== 'rejected' && item.answers !== undefined) this.s.oweAnswer(item, item.answers);
      },
      canReply: () => this.outbox.canApply(),
      hubError: (payload, env) => this.safeEmit('hubError', { payload, replyTo: env.reply_to, seq: env.seq }),
      pruned: (keep) => this.safeEmit('pruned', { keep }),
    };
  }

  private operationHost(): OperationHost {
    return {
      send: (item) => this.sendSide.enqueue(item),
      hasRoom: () => this.outbox.hasRoom(),
      progressDropped: () => {
        this.counters.droppedProgress++;
        this.sendSide.scheduleStats();
      },
      changed: () => {
        this.record.markChanged();
        this.writer.request();
        // The writer saves only while a link is open: a conclusion reached during the backoff
        // waited for the next dial, and a crash meanwhile reported the finished operation as
        // interrupted (failed). After the stop's final save this writes nothing.
        if (!this.conn.link?.open) this.record.persist().catch((err: unknown) => this.log.error('could not save an operation record', { err }));
        this.checkDrained();
      },
      persist: () => this.record.persist(),
      sessionId: () => this.s.id,
      timers: this.timers,
      logger: this.log,
    };
  }

  // --- stop ----------------------------------------------------------------------------------------

  private drainView(): DrainView {
    const link = this.conn.link;
    return {
      linkOpen: link !== null && link.welcomed && !link.ended,
      outboxEmpty: this.outbox.empty,
      unacked: this.s.outbound.unacked,
      inboundPending: this.receiver.pending,
      runningOperations: this.book.runningCount,
      lastAckSent: link?.lastAckSent ?? 0,
      cursor: this.s.inbound.cursor,
    };
  }

  private checkDrained(): void {
    if (!this.stopping || this.drainWaiters.length === 0 || !isDrained(this.drainView())) return;
    const waiters = this.drainWaiters;
    this.drainWaiters = [];
    for (const w of waiters) w();
  }

  private async stopNow(graceful: boolean, timeoutMs: number): Promise<void> {
    this.stopping = true;
    this.sendSide.stopBegins();
    if (this.starting) await this.starting.catch(() => {});
    if (!this.starting || !this.book) {
      // Never started (or failed to load): nothing to drain or persist. The log is still closed,
      // as after any stop: that gives the state directory's lock up, and a process that retries
      // with a new client (the record was unreadable for a moment) would find it held by itself.
      await this.closeLog({ dropUnsynced: false });
      this.setState('stopped');
      this.safeEmit('stopped');
      return;
    }
    this.setState('stopping');
    this.conn.stop();
    if (graceful) {
      this.sendSide.flushStats();
      // The snapshot a lost removal waits for is never taken in a process that is stopping.
      this.outbox.sendLostRemovals();
      this.book.abortAll('the operator is stopping');
      let cancelTimeout = NOOP;
      await new Promise<void>((resolve) => {
        cancelTimeout = this.timers.schedule(resolve, timeoutMs);
        this.drainWaiters.push(resolve);
        // An operation that ends moves nothing else the drain watches while the link is down.
        void this.book.whenIdle().then(() => this.checkDrained());
        // Acks go out at once from here on.
        this.writer.ackNow(this.conn.link?.lastAckSent ?? 0);
        this.writer.request();
        this.checkDrained();
      });
      cancelTimeout();
    }
    // A lossy process (it could not vouch for its buffer, and no fresh session has replaced it
    // yet) never records a clean stop: the next one must say lossy too.
    const clean = isCleanStop(graceful, this.drainView()) && !this.s.lossy;
    this.sendingEnded = true;
    this.writer.reset();
    this.sendSide.dispose();
    this.receiver.dispose();
    this.book.dispose();
    let saved = false;
    try {
      this.record.cleanOnSave = clean;
      this.record.markChanged();
      await this.record.finalSave();
      saved = true;
    } catch (err) {
      this.log.error('could not save the cursor on stop', { err });
    }
    if (this.conn.link) this.conn.close(this.conn.link, graceful ? CloseCode.NORMAL : 1001, 'operator stopping');
    // Frames numbered and never synced were never sent. Once the record is saved it backs them
    // (the log may keep them for the next process to replay); when that save failed, the record
    // on disk is older than they are, and a log replaying them would ack a cursor, or conclude
    // an operation, that the next process does not know of.
    await this.closeLog({ dropUnsynced: !saved });
    this.log.info('operator stopped', { graceful, clean, unacked: this.s.outbound.unacked, queued: this.outbox.length });
    this.setState('stopped');
    this.safeEmit('stopped');
  }
}
