/**
 * The parts of one session object, built and wired to each other: its durable state, clock,
 * sockets, send path, desired pump, fleet membership and ingest pipeline. The object
 * (session-object.ts) keeps the runtime's handlers and the hot path; what the parts need of it
 * comes through `PartsHost`.
 */
import { CloseCode } from '../../protocol';
import type { HubConfig } from '../config';
import { failUnsendableOperations } from '../db/desired';
import { failureLine } from '../db/errors';
import { gatewaySql } from '../db/gateway-client';
import type { IngestResult } from '../db/ingest';
import type { Sql } from '../db/sql';
import type { HubEnv } from '../env';
import type { LogFields, Logger } from '../log';
import type { LogBudget } from '../log-budget';
import { Pg } from '../pg';
import type { ClockState } from './clock';
import { DesiredPump } from './desired-pump';
import { FleetMember, WENT_BACK_INGEST } from './fleet-member';
import type { BuiltBatch, InboundItem } from './ingest-batch';
import { IngestPipeline } from './ingest-pipeline';
import type { LiveView } from './live-view';
import { SessionSql } from './schema';
import { SessionClock } from './session-clock';
import { SendPath } from './send-path';
import { SessionState } from './session-state';
import { Sockets } from './sockets';
import { WakeCounter } from './wakes';

/** What the parts ask of the session object. */
export interface PartsHost {
  clockState(): ClockState<WebSocket>;
  /** Act on whatever deadline is due (the handshake clock's timer, between alarms). */
  runDue(what: string): void;
  /** The active connection ended (closed, failed, or superseded). */
  connectionEnded(why: string, fields: LogFields): void;
  syncAutoPong(): void;
  liveView(): LiveView;
  /** A hello is being answered. */
  handshaking(): boolean;
  /** A batch of the operator's frames is committed in Postgres. */
  committed(items: InboundItem[], built: BuiltBatch, result: IngestResult): void;
  /** Settling a committed batch threw: memory is ahead of storage. */
  commitFailed(err: unknown): void;
}

export interface SessionParts {
  state: SessionState;
  wakes: WakeCounter;
  /** Its own connection for ingest only; every other statement goes through the shared gateway. */
  pg: Pg;
  shared: Sql;
  clock: SessionClock;
  sockets: Sockets;
  sendPath: SendPath;
  pump: DesiredPump;
  fleet: FleetMember;
  ingest: IngestPipeline;
}

export function buildSessionParts(
  ctx: DurableObjectState,
  env: HubEnv,
  cfg: HubConfig,
  baseLog: Logger,
  logBudget: LogBudget,
  host: PartsHost,
): SessionParts {
  const sql = new SessionSql(ctx.storage.sql);
  const state = new SessionState(ctx.storage, sql, cfg, baseLog);
  const wakes = new WakeCounter(sql);
  const lockTimeoutMs = Math.min(cfg.PG_LOCK_TIMEOUT_MS, cfg.PG_QUERY_TIMEOUT_MS / 2);
  const pg = new Pg(env, { idleCloseMs: cfg.PG_IDLE_CLOSE_MS, queryTimeoutMs: cfg.PG_QUERY_TIMEOUT_MS, lockTimeoutMs });
  const shared = gatewaySql(env);
  const clock = new SessionClock(
    {
      storage: ctx.storage,
      cfg,
      state: () => host.clockState(),
      hasSession: () => state.meta !== null,
      // Counted wakes ride on the alarm's commit instead of a commit of their own a second later.
      writing: () => wakes.flushPending(),
      due: () => host.runDue('handshake clock'),
    },
    !state.meta,
  );
  const log = () => state.log;
  const sockets = new Sockets(ctx, {
    sessionId: () => state.meta?.sessionId,
    ack: () => (state.meta ? state.inbound.cursor : null),
    log,
    // A connection that never finished its handshake may have been all that kept the runtime's
    // auto-answer off (syncAutoPong); one closed here is on the clock until its peer answers.
    gone: (_ws, why, active, fields) => {
      if (active) return host.connectionEnded(why, fields);
      host.syncAutoPong();
      void clock.schedule();
    },
  });
  const sendPath: SendPath = new SendPath({
    cfg,
    store: state.store,
    meta: () => state.meta,
    outbound: () => state.outbound,
    cursor: () => state.inbound.cursor,
    socket: () => sockets.active(),
    send: (ws, frame) => sockets.send(ws, frame),
    // The close's own line (cluster, session, connection, close, reason), with the send path's
    // figures: a search for a cluster's 4429s must find these as it finds every other close.
    closeActive: (code, reason, fields) => sockets.closeActive(code, reason, 'log', fields),
    failed: () => {
      // Before the close, which stores the record: what the failed pass moved in memory must not reach storage.
      state.reload();
      sendPath.clear();
      pump.reset(state.meta);
      sockets.closeActive(CloseCode.INTERNAL, 'internal error');
    },
    log,
    written: (queued) => {
      host.syncAutoPong();
      if (queued < cfg.DESIRED_PAGE_ROWS) void pump.run();
    },
    // The pump moved past the resync's revision when it queued the resync's end: back to the
    // watermark the incomplete resync left.
    resyncIncomplete: () => pump.reset(state.meta),
    startsWritten: (operationIds) => pump.written(operationIds),
    unsendable: (operations) => {
      const fence = state.fence();
      if (!fence) return;
      void failUnsendableOperations(shared, fence, operations).catch((err: unknown) => {
        // Not concluded: the next fresh session sends it again, refuses it again and retries this.
        const line = failureLine('concluding operations too large to send', err);
        log()[line.level](`${line.message}; they stay open until a fresh session refuses them again`, { ...line.fields, operations: operations.map((o) => o.operation_id) });
      });
    },
  });
  const pump: DesiredPump = new DesiredPump(
    {
      cfg,
      sql: shared,
      meta: () => state.meta,
      connected: () => sockets.active() !== null,
      queued: () => sendPath.queue.length,
      queuedBytes: () => sendPath.queue.bytes,
      claimLost: () => void fleet.check(),
      enqueue: (o) => sendPath.enqueue(o),
      batch: (queue) => sendPath.batch(queue),
      fence: () => state.fence(),
      lastOperationStart: () => state.store.replay.lastOperationStart(),
      log,
    },
    state.meta,
  );
  const fleet: FleetMember = new FleetMember({
    env,
    cfg,
    sql: shared,
    baseLog: baseLog,
    state,
    sockets,
    liveView: () => host.liveView(),
    handshaking: () => host.handshaking(),
    owed: (revision) => {
      pump.learn(revision);
      void pump.run();
    },
  });
  const ingest = new IngestPipeline(
    {
      sql: pg,
      fence: () => state.fence(),
      resyncs: () => state.meta?.opResyncs ?? {},
      sentDesired: (frameId) => state.store.sentDesiredFrame(frameId),
      committed: (items, built, result) => host.committed(items, built, result),
      commitFailed: (err) => host.commitFailed(err),
      fenceLost: () => {
        state.log.warn('write fenced off: this session no longer owns the cluster');
        void fleet.check();
      },
      // The claim will not resume the session (the owner row still counts fewer than it did),
      // so the reconnect resyncs both ways and the operator reports its whole state again.
      wentBack: () => fleet.wentBack(WENT_BACK_INGEST, { ingest_commits: state.meta?.ingestCommits ?? 0 }),
      keepRetrying: () => sockets.active() !== null,
      outcomeUnknown: () => {
        const active = sockets.active();
        if (active) sockets.refuse(active, CloseCode.TRY_AGAIN_LATER, null, 'unavailable', 'the database did not answer a write; reconnect and replay', true);
      },
      logBudget,
      // Read at each line: the session's logger names its cluster and session, and is replaced
      // when a hello opens a session (the base logger names neither).
      get log() {
        return state.log;
      },
    },
    cfg.INGEST_BATCH_FRAMES,
    {},
    cfg.INGEST_LINGER_MS,
  );
  return { state, wakes, pg, shared, clock, sockets, sendPath, pump, fleet, ingest };
}
