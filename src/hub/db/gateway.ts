import { DurableObject } from 'cloudflare:workers';
import { pollShardOf, routeKeyOf, sessionStub } from '../address';
import { describeError } from './errors';
import { arrivalDeadline } from './arrival';
import { claimWithSnapshot, type ClaimedSession } from './claim-snapshot';
import type { DesiredItem } from './desired-admin';
import { PutCoalescer } from './desired-coalesce';
import { currentOwner, putChanges, writeDeployments, writeDesired, type DesiredWriteRequest, type DesiredWriteResult, type OwnerPoke } from './desired-relay';
import { classifyDbError } from './errors';
import { FleetPoller } from './fleet-poller';
import { releaseUnansweredClaim, type ClaimArgs } from './ownership';
import { hubConfig } from '../config';
import { claimPageBytes } from '../frame-budget';
import { withDeadline } from '../deadline';
import type { HubEnv } from '../env';
import { createLogger } from '../log';
import { answerMarginMs, Pg } from '../pg';
import { outcomeUnknown } from '../pg-errors';
import { ResidencyGate } from '../residency-gate';
import { sendWithinMs, type GatewayResult, type Relayed } from './gateway-client';

const log = createLogger({ component: 'db-gateway' });

/**
 * A few long-lived Postgres connections shared by the whole hub. Opening a connection costs a
 * Postgres backend and several round trips (~22 ms here, more at the edge), and a Worker request
 * cannot keep one between requests; a Durable Object can. The connect route's token lookup, the
 * admin API, and session claims, polls and desired-state reads go through these shards, so a
 * handshake or an admin call opens no connection, and an idle fleet of sessions holds none.
 * (Each session keeps its own connection only while it ingests: those statements are large and
 * fenced, and must not queue behind other sessions' work.)
 */
export class DbGateway extends DurableObject<HubEnv> {
  /**
   * A few connections, not one: a statement that waits (a claim on a locked row, a slow admin
   * read) holds its connection, and everything queued behind it on that connection would wait
   * too. Each statement goes to the connection with the fewest in flight (opened on demand), but
   * for a claim of a cluster with one already in flight (`claimLanes`).
   */
  private readonly pool: Pg[];
  /**
   * Refuses, logs and deletes the storage of a shard outside the jurisdiction (residency-gate.ts);
   * such a shard relays nothing.
   */
  private readonly gate: ResidencyGate;
  /** The fleet poll of this shard, and its history retention (fleet-poller.ts). */
  private readonly poller: FleetPoller;

  constructor(ctx: DurableObjectState, env: HubEnv) {
    super(ctx, env);
    const cfg = hubConfig(env);
    this.pool = Array.from(
      { length: cfg.DB_GATEWAY_CONNECTIONS },
      () => new Pg(env, { idleCloseMs: 60_000, queryTimeoutMs: cfg.PG_QUERY_TIMEOUT_MS, sendWithinMs: sendWithinMs(cfg), answerMarginMs: answerMarginMs(cfg.PG_QUERY_TIMEOUT_MS) }),
    );
    this.gate = new ResidencyGate(ctx.id, cfg, log, ctx.storage);
    this.poller = new FleetPoller({ storage: ctx.storage, env, leastBusy: () => this.leastBusy() });
  }

  /** The poll and the retention pass of this object's shard. */
  override async alarm(): Promise<void> {
    // A shard created before its region had a jurisdiction: it polls nothing and keeps nothing.
    if (this.gate.refuses('alarm')) return this.gate.discard();
    await this.poller.run();
  }

  /**
   * Single-deployment PUTs of one cluster that arrive while one is being written go out together.
   * A PUT's wait behind its cluster's statement and its statement's wait for a connection share
   * one budget (`sendWithinMs`, passed on through `within`).
   */
  private readonly puts = new PutCoalescer({
    write: (cluster, items, within, oldest) => writeDeployments(this.leastBusy().within(within), cluster, items, arrivalDeadline(hubConfig(this.env), oldest)),
    written: (w, items) => {
      const changes = putChanges(w.first_revision, items);
      this.pokeOwner({ clusterUid: w.cluster_uid, ownerSession: w.owner_session, revision: w.first_revision + items.length - 1, changes, recheck: w.recheck_owner === true });
    },
    pokeFailed: (err) => log.error('the poke after a desired write failed; the fleet poll will deliver the change', { error: String(err) }),
    itemFault: (err) => classifyDbError(err) === 'permanent',
  }, { maxWaitMs: sendWithinMs(hubConfig(this.env)), maxBytes: hubConfig(this.env).DESIRED_PAGE_BYTES });
  /**
   * The connection each cluster's claims in flight run on, and how many there are. A claim waits
   * on its cluster's owner row while that cluster's session writes or another of its claims runs,
   * holding its connection and everything queued behind it; claims of one cluster run one after
   * another on that row anyway. On the least busy connection each, a burst of one cluster's
   * hellos (any holder of its token, or an operator reconnecting in a loop) put a waiting claim at
   * the head of every connection of the shard, and every other cluster's token lookups and
   * claims waited behind them. Queued on one connection, they hold only that one; and all of a
   * cluster's claims come to one shard (`gatewayClaim`), so that is one connection of the gateway.
   */
  private readonly claimLanes = new Map<string, { pg: Pg; claims: number }>();

  private claimLane(clusterUid: string): { pg: Pg; done(): void } {
    let lane = this.claimLanes.get(clusterUid);
    if (!lane) {
      lane = { pg: this.leastBusy(), claims: 0 };
      this.claimLanes.set(clusterUid, lane);
    }
    lane.claims++;
    const held = lane;
    return {
      pg: held.pg,
      done: () => {
        if (--held.claims === 0) this.claimLanes.delete(clusterUid);
      },
    };
  }

  /** An idle open connection first, then an idle closed one, then the least loaded. */
  private leastBusy(): Pg {
    let best = this.pool[0] as Pg;
    for (const pg of this.pool) {
      if (pg.inFlightCount < best.inFlightCount || (pg.inFlightCount === best.inFlightCount && pg.isOpen && !best.isOpen)) best = pg;
    }
    return best;
  }

  /**
   * Errors come back as values: RPC would drop the SQLSTATE that tells transient from permanent.
   * `strict`: sent within its caller's budget or not at all, like a desired write (`Pg.within`):
   * an admin write answered 503 must not commit later (a rotation would leave a token nobody was
   * shown, a registration a name taken with no token).
   */
  async query(text: string, params: unknown[], name?: string, strict = false, lane?: 'public'): Promise<GatewayResult> {
    return this.relay(async () => {
      const pg = this.leastBusy();
      const r = await (strict ? pg.within(sendWithinMs(hubConfig(this.env))) : lane === 'public' ? pg.low : pg).query(text, params, name);
      return { rows: r.rows, rowCount: r.rowCount };
    });
  }

  /**
   * A session's claim at hello and, when it granted a fresh session, the first page of that
   * session's resync read right behind it on the same connection (claim-snapshot.ts): one call
   * from the session instead of three.
   */
  async claim(args: ClaimArgs, snapshotRows: number): Promise<Relayed<ClaimedSession>> {
    const cfg = hubConfig(this.env);
    // The page is a nicety: it may hold up the claim's answer for a fraction of the call's deadline,
    // and never past the caller's own wait (what it leaves for the hops back).
    const deadlineMs = Math.min(1_000, cfg.PG_QUERY_TIMEOUT_MS / 4);
    const endBy = Date.now() + sendWithinMs(cfg) + cfg.PG_QUERY_TIMEOUT_MS + answerMarginMs(cfg.PG_QUERY_TIMEOUT_MS);
    // From when the session asked, not when the lane sends it: a claim that waited its turn (or
    // its way here) past this is refused (57014, the hello retried) rather than committed after
    // the session may have given up.
    const arriveBy = arrivalDeadline(cfg, Math.min(args.takenAt ?? Date.now(), Date.now()));
    return this.relay(async () => {
      // Armed first: a claim that cannot arm the poll fails before it registers anything (the
      // hello is refused, retryable), rather than register a session nothing would poll.
      await this.poller.arm(pollShardOf(args.clusterUid, cfg.DB_GATEWAY_SHARDS));
      const lane = this.claimLane(args.clusterUid);
      try {
        return await claimWithSnapshot(lane.pg, args, arriveBy, { rows: snapshotRows, bytes: claimPageBytes(cfg), deadlineMs, endBy }, (err) =>
          log.warn("fresh session's first snapshot page could not be read; the session fetches it", { cluster: args.clusterUid, error: describeError(err) }),
        );
      } catch (err) {
        if (outcomeUnknown(err)) await this.releaseUnanswered(args, deadlineMs);
        throw err;
      } finally {
        lane.done();
      }
    });
  }

  /**
   * A claim whose outcome is unknown (its connection lost under it, or unanswered) may have
   * committed, granting the fresh id it named or resuming the session it asked for, shown
   * connected, to a hello that is now refused: no connection carries it. Left so, the next hello
   * by anyone was recorded as taking the cluster from a connected session (a displacement,
   * counted toward contention, of a session that never opened), and a resumed one stayed in the
   * fleet poll, its object woken at every poll until its retention. So what the claim granted is
   * published as not carried before the refusal goes back, when that can be done quickly, matched
   * by the fresh id this hello alone named (releaseUnansweredClaim). A claim still on its way (a
   * stalled path) can commit after this: a fresh id's is then bounded by the fleet poll's sweep,
   * a resumed session's by its operator's return (its next claim) or its object's retention.
   */
  private async releaseUnanswered(args: ClaimArgs, deadlineMs: number): Promise<void> {
    const left = releaseUnansweredClaim(this.leastBusy(), args.clusterUid, args.freshSessionId).catch((err: unknown) =>
      log.warn('a claim of unknown outcome could not be released; the fleet poll will', { cluster: args.clusterUid, error: describeError(err) }),
    );
    await withDeadline(left, deadlineMs, () => undefined);
  }

  /**
   * An admin write of desired state: the statement, then, in the same turn as the commit, a poke
   * carrying the change(s) to the owning session, which sends them without reading them back.
   * The change leaves from here instead of from the Worker after the answer: one hop less
   * between the commit and the frame. A lost poke is caught by the fleet poll.
   */
  async writeDesired(req: DesiredWriteRequest): Promise<Relayed<DesiredWriteResult | null>> {
    return this.relay(async () => {
      if (req.op === 'put' && req.items.length === 1) {
        const w = await this.puts.put(req.cluster, req.items[0] as DesiredItem, req.takenAt);
        // Not while more of the cluster's PUTs wait: in a burst the timer's turn waits behind
        // all of them, and answering later slows the client's next PUT more than it helps.
        if (w?.owner_session && this.puts.pending(req.cluster) === 0) await pokeFirst();
        return w && { op: 'put' as const, cluster_uid: w.cluster_uid, revisions: [w.revision] };
      }
      // Held to its send-by time like a coalesced PUT: answered 503, it must not commit later. Both
      // bounds count from when the Worker took it, not from its arrival here.
      const cfg = hubConfig(this.env);
      const takenAt = Math.min(req.takenAt ?? Date.now(), Date.now());
      const w = await writeDesired(this.leastBusy().within(sendWithinMs(cfg) - (Date.now() - takenAt)), req, arrivalDeadline(cfg, takenAt));
      if (w?.poke) {
        this.pokeOwner(w.poke);
        await pokeFirst();
      }
      return w?.result ?? null;
    });
  }

  private pokeOwner(p: OwnerPoke): void {
    this.pokeOne(p.ownerSession, p);
    if (p.recheck) this.pokeCurrentOwner(p);
  }

  private pokeOne(sessionId: string | null, p: OwnerPoke): void {
    const routeKey = routeKeyOf(sessionId);
    if (!routeKey) return;
    sessionStub(this.env, { clusterUid: p.clusterUid, routeKey })
      .poke(p.revision, p.changes)
      .catch((err: unknown) => log.warn('poke failed; the fleet poll will bring the change', { cluster: p.clusterUid, error: describeError(err) }));
  }

  /**
   * A claim may have committed while the write's statement ran, unseen by its snapshot: that
   * claim's fresh session read its resync before the write committed, and would otherwise learn
   * of the change only at its next fleet poll. Looked up after the commit, not awaited (the
   * admin's answer does not wait for it); a failure leaves the change to the fleet poll.
   */
  private pokeCurrentOwner(p: OwnerPoke): void {
    currentOwner(this.leastBusy(), p.clusterUid)
      .then((owner) => {
        if (owner !== null && owner !== p.ownerSession) this.pokeOne(owner, p);
      })
      .catch((err: unknown) => log.warn("the owner's lookup after a desired write failed; the fleet poll will bring the change", { cluster: p.clusterUid, error: describeError(err) }));
  }

  private async relay<T>(run: () => Promise<T>): Promise<Relayed<T>> {
    const misplaced = this.gate.problem;
    if (misplaced) {
      log.error("RESIDENCY: gateway shard refusing to relay outside the deployment's jurisdiction", { reason: misplaced });
      return { ok: false, message: `residency check failed: ${misplaced}`, code: null, name: 'ResidencyError' };
    }
    try {
      return { ok: true, value: await run() };
    } catch (err) {
      const e = err as { message?: unknown; code?: unknown; name?: unknown };
      return {
        ok: false,
        message: typeof e.message === 'string' ? e.message : String(err),
        code: typeof e.code === 'string' ? e.code : null,
        name: typeof e.name === 'string' ? e.name : 'Error',
        unknown: outcomeUnknown(err),
      };
    }
  }
}

/**
 * Let the poke that was just sent be delivered before the admin's answer goes back. Where the
 * Worker, this shard and the session share a thread (one workerd, locally, or one machine), the
 * answer's turn would otherwise run first and the change would wait behind the Worker's
 * response; the operator's frame is what the write is for. A zero timer: nothing waits for
 * the session's answer, so a slow session never holds up the admin.
 */
function pokeFirst(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}
