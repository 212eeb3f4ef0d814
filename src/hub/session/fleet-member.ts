import { CloseCode } from '../../protocol';
import { routeKeyOf, sessionStub } from '../address';
import type { HubConfig } from '../config';
import { describeError, failureLine } from '../db/errors';
import type { PokeReason } from '../db/fleet-poll';
import { checkSession, leaveFleetPoll } from '../db/ownership';
import type { Sql } from '../db/sql';
import type { HubEnv } from '../env';
import type { LogFields, Logger } from '../log';
import { inRegion } from '../region';
import { REFUSAL_ERRORS } from './handshake';
import type { LiveView } from './live-view';
import type { SessionState } from './session-state';
import type { SessionMeta } from './store';
import type { Sockets } from './sockets';
import { sessionRetryDelay } from './retry-delay';

/** What a session whose operator reports the database lost is cut with (its check, or its next ingest statement). */
export const WENT_BACK_INGEST = "it holds fewer of this session's ingest statements than the session committed";

export interface MemberHost {
  env: HubEnv;
  cfg: HubConfig;
  sql: Sql;
  baseLog: Logger;
  state: SessionState;
  sockets: Sockets;
  liveView(): LiveView;
  /** A hello is under way (it may be resuming this session on a new connection). */
  handshaking(): boolean;
  /** The cluster's desired revision as the check read it: fetch what is owed. */
  owed(revision: number): void;
}

/**
 * The session's part in the fleet poll (DESIGN decision 4): it joins at its claim, checks its
 * claim, registration, disablement, token and desired revision when poked, and leaves when its
 * connection ends. Joining is the claim's (its gateway shard arms the poll before registering the
 * session, gateway.ts `armPoll`).
 */
export class FleetMember {
  /** Pokes that came while a hello was under way, answered when it ends (by session, the latest reason). */
  private readonly pokedDuringHello = new Map<string, PokeReason>();
  /**
   * An admin write's poke (desired state) came during a hello. The revision it carried was
   * learned for whatever the object carried then, and a fresh session's hello drops it (the
   * pump keeps no revision learned for another session: after a restore it could be above the
   * counter); the write committed after the claim's snapshot, so nothing else would bring the
   * change before the next poll. The session's check after the hello reads the revision as it is.
   */
  private desiredPokedDuringHello = false;
  /** Disconnects not yet published (the database away), by session: retried (`retryDisconnect`). */
  private readonly unpublished = new Map<string, { timer: ReturnType<typeof setTimeout>; failures: number }>();

  constructor(private readonly host: MemberHost) {}

  /**
   * The claim is this session's: the cluster's poller watches it from now on, and a previous
   * owner in another object hears of it at once (the poll is the bound when this poke is lost).
   */
  claimed(clusterUid: string, routeKey: string, previous: string | null): void {
    const { env, cfg, baseLog } = this.host;
    const prevKey = routeKeyOf(previous);
    if (!previous || !prevKey || prevKey === routeKey || !cfg.DISPLACEMENT_POKE) return;
    sessionStub(env, { clusterUid, routeKey: prevKey })
      .check(previous, 'claim')
      .catch((err: unknown) => baseLog.warn('could not poke the displaced session; the fleet poll will', { cluster: clusterUid, error: describeError(err) }));
  }

  /**
   * Poked about `sessionId`. A session this object no longer carries leaves the fleet poll; one
   * whose connection ended without the news reaching Postgres publishes it; a live one checks,
   * except when the poke is only the sweep's: then being alive is the answer (true), and the
   * poller records it with its next statement.
   */
  async poked(sessionId: string, why: PokeReason): Promise<boolean> {
    // A hello under way decides what this object carries (its claim may be for this very
    // session, committed but not installed yet): the poke is answered once it has (`afterHello`).
    // Left to the poll, a revocation that committed just behind the claim would leave the session
    // it names open on the revoked token for up to a poll interval, or for good were the poll's
    // own poke lost too. A sweep's is not kept: the poll sweeps again.
    if (this.host.handshaking()) {
      if (why !== 'sweep') this.pokedDuringHello.set(sessionId, why);
      return false;
    }
    const meta = this.host.state.meta;
    if (meta?.sessionId !== sessionId) {
      await leaveFleetPoll(this.host.sql, sessionId).catch((err: unknown) => {
        this.host.baseLog.debug('could not leave the fleet poll; it pokes again', { session: sessionId, error: describeError(err) });
      });
      return false;
    }
    if (!this.host.sockets.active()) {
      await this.disconnected(meta);
      return false;
    }
    if (why === 'sweep') return true;
    this.host.state.log.debug('poked', { why });
    await this.check();
    return false;
  }

  /** An admin write's poke (desired state) arrived: remembered when it came during a hello (`afterHello`). */
  desiredPoked(): void {
    if (this.host.handshaking()) this.desiredPokedDuringHello = true;
  }

  /**
   * The database went back under this live session (restored from a backup): cut it 1013. The
   * claim refuses to resume it (ownership.ts), so its reconnect resyncs both ways. `what` says
   * which of the session's counters the database is behind.
   */
  wentBack(what: string, fields: LogFields): void {
    const { state, sockets } = this.host;
    state.log.error(`the database went back: ${what} (restored from a backup?); cutting the session for a full resync`, fields);
    const ws = sockets.active();
    if (ws) sockets.refuse(ws, CloseCode.TRY_AGAIN_LATER, null, 'unavailable', 'the hub database went back (restored from a backup); reconnect for a full resync', true);
  }

  /** The session's own check; it acts as the answer says: 4403, 4409, or fetch what is owed. */
  async check(): Promise<void> {
    const { state, sockets } = this.host;
    const meta = state.meta;
    const ws = sockets.active();
    if (!meta || !ws) return;
    // Taken before the statement: a fetch that completes meanwhile can move the watermark past
    // what the statement read, and only what was sent before it was read from a committed row.
    const watermark = meta.desiredWatermark;
    // Likewise: only statements known committed before this one count.
    const ingestCommits = meta.ingestCommits ?? 0;
    let r;
    try {
      r = await checkSession(this.host.sql, { ...ref(meta), live: this.host.liveView(), connected: true, watermark });
    } catch (err) {
      // An outage rides out on the next poke; a fault (a schema behind the code) fails every
      // check, and the check is what cuts a disabled or displaced session: that wants a person.
      const line = failureLine('session check', err);
      state.log[line.level](`${line.message}; the fleet poll pokes again`, line.fields);
      return;
    }
    if (sockets.active() !== ws) return;
    if (r.refusal) {
      const e = REFUSAL_ERRORS[r.refusal];
      state.log.warn('session refused by its check', { reason: r.refusal });
      // As at the connect and the hello: a live session cut by a move (its cluster disabled here) learns where.
      return sockets.refuse(ws, CloseCode.REFUSED, null, e.code, `${e.message}${inRegion(this.host.cfg)}`);
    }
    if (!r.owner) {
      state.log.warn('displaced by a newer session for the cluster');
      return sockets.refuse(ws, CloseCode.DISPLACED, null, 'conflict', 'displaced by a newer session for this cluster');
    }
    if (r.desiredRevision < watermark) {
      // The session sent revisions the database no longer has: it went back (restored from a
      // backup). Its counters, claims and rows are older than this session's stream, so the
      // changes written from now on would be numbered at or below what was sent, and never sent.
      // The claim refuses to resume the session (ownership.ts), so the reconnect resyncs both ways.
      return this.wentBack('its desired revision is below what this session has sent', { desired_revision: r.desiredRevision, watermark });
    }
    if (r.ingestCommits !== null && r.ingestCommits < ingestCommits) {
      // The operator's side of the same (migration 0027): reports it made after the backup point
      // are gone. Its next report would find it too, but an operator with nothing to report only
      // pings, which the runtime answers: the sweep's check is what reaches it.
      return this.wentBack(WENT_BACK_INGEST, { ingest_commits: ingestCommits, database_ingest_commits: r.ingestCommits });
    }
    // Always: a fetch that failed earlier is retried here (the fleet poll pokes until the
    // watermark catches up); with nothing owed the pump returns without a query.
    this.host.owed(r.desiredRevision);
  }

  /**
   * After every hello: the pokes that came while it ran are answered, now that it is known what
   * this object carries. And Postgres must not show connected what no connection carries. A claim the
   * hello made but did not open (its socket closed meanwhile, its resume point moved) and a
   * disconnect held back while it ran (`held`) are published now, instead of waiting for the sweep.
   */
  afterHello(claim: SessionRef | null, held: boolean): void {
    const owed = [...this.pokedDuringHello];
    this.pokedDuringHello.clear();
    for (const [sessionId, why] of owed) {
      this.poked(sessionId, why).catch((err: unknown) => this.host.baseLog.warn('a poke kept through a hello failed; the fleet poll pokes again', { session: sessionId, why, error: describeError(err) }));
    }
    if (this.desiredPokedDuringHello) {
      this.desiredPokedDuringHello = false;
      this.check().catch((err: unknown) => this.host.baseLog.warn('the check for a desired change poked during a hello failed; the fleet poll pokes again', { error: describeError(err) }));
    }
    const meta = this.host.state.meta;
    // A fresh session claimed and never opened: the object holds no record of it.
    if (claim && claim.sessionId !== meta?.sessionId) void this.disconnected(claim);
    // The recorded session (resumed by the claim, or the one whose end was held) with no
    // connection carrying it; its generation is the claim's when the claim resumed it.
    if (meta && !this.host.sockets.active() && (held || claim?.sessionId === meta.sessionId)) void this.disconnected(meta);
  }

  /** The connection ended: tell the admin views, and leave the fleet poll. */
  async disconnected(session: SessionMeta | SessionRef): Promise<void> {
    const r = 'tokenHashHex' in session ? session : ref(session);
    try {
      // Fenced by the generation: a later claim (every claim bumps it) is never marked disconnected.
      await checkSession(this.host.sql, { ...r, live: this.host.liveView(), connected: false, watermark: 0 });
      this.unpublished.delete(r.sessionId);
    } catch (err) {
      this.host.state.log.debug('could not publish disconnect', { session: r.sessionId, error: describeError(err) });
      this.retryDisconnect(r);
    }
  }

  /**
   * Publish a disconnect again, with backoff, while no connection carries the session. Left to the
   * sweep (LIVE_SWEEP_MS, minutes), an operator that left during a database outage was shown
   * connected long after the database came back (and a fresh session's claim counted as taking
   * the cluster from it).
   * An eviction drops the timer: the sweep is then the bound, as for an object that ended silently.
   */
  private retryDisconnect(r: SessionRef): void {
    const prior = this.unpublished.get(r.sessionId);
    if (prior) clearTimeout(prior.timer);
    const failures = (prior?.failures ?? 0) + 1;
    const timer = setTimeout(() => {
      if (this.unpublished.get(r.sessionId)?.timer !== timer) return;
      // A hello under way may be resuming it: decided when it ends.
      if (this.host.handshaking()) return this.retryDisconnect(r);
      if (this.host.state.meta?.sessionId === r.sessionId && this.host.sockets.active() !== null) {
        this.unpublished.delete(r.sessionId);
        return;
      }
      void this.disconnected(r);
    }, sessionRetryDelay(this.host.cfg.POLL_INTERVAL_MS, failures - 1));
    this.unpublished.set(r.sessionId, { timer, failures });
  }
}

/** A claim as Postgres knows it. */
export interface SessionRef {
  clusterUid: string;
  tokenHashHex: string;
  sessionId: string;
  generation: number;
}

function ref(m: SessionMeta): SessionRef {
  return { clusterUid: m.clusterUid, tokenHashHex: m.tokenHash, sessionId: m.sessionId, generation: m.generation };
}
