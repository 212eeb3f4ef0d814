/**
 * The fleet poll of one gateway shard (DESIGN decision 4): one set-based statement per interval
 * for every session of the shard, a poke to each session whose claim, registration, disablement,
 * token or desired revision changed, and the history retention pass riding on the same alarm.
 * The gateway object (gateway.ts) arms it at every claim and runs it at its alarm.
 */
import { routeKeyOf, sessionStub } from '../address';
import { hubConfig, type HubConfig } from '../config';
import { withDeadline } from '../deadline';
import type { HubEnv } from '../env';
import { createLogger } from '../log';
import type { Pg } from '../pg';
import { describeError, failureLine } from './errors';
import { pollFleet, type FleetPoll } from './fleet-poll';
import { pruneHistory } from './history-prune';
import { RegionGuard } from './region-guard';

const log = createLogger({ component: 'db-gateway' });

export interface PollerHost {
  readonly storage: DurableObjectStorage;
  readonly env: HubEnv;
  /** The gateway's connection with the least in flight. */
  leastBusy(): Pg;
}

export class FleetPoller {
  constructor(private readonly host: PollerHost) {}

  /** The fleet-poll shard this object watches, once a session of it has registered. */
  private pollShard: number | null | undefined = undefined;
  /** The poll alarm as last set (undefined: not read since construction). */
  private pollAt: number | null | undefined = undefined;
  /**
   * When this poller next runs a history retention pass (0: at the next poll; a backlog remains,
   * or the object was just built). Memory only, so due at construction: an idle poller wakes only
   * for its pass and is evicted in between, and a time counted from each construction would never
   * come.
   */
  private pruneAt = 0;
  private pruning = false;
  /** Swept sessions that answered alive: recorded by the next poll's statement. */
  private sweptAlive: string[] = [];
  /** Sessions with a poke of this poller still unanswered: never more than one each. */
  private readonly poking = new Set<string>();
  /**
   * Claims that armed the poll (`arm`) so far. A poll whose statement is already on its way may have read
   * the shard before a join's claim committed: its "no session left" is not the last word then.
   */
  private joins = 0;
  private readonly region = new RegionGuard();

  /**
   * The poll of `shard` (this object's) runs within a poll interval: armed by every claim, before
   * its statement registers the session (`claim`), so that no session is ever registered in a
   * shard nothing polls (shown connected after it ended, its revocations undelivered). Cheap when
   * the poll already runs (no storage access once the alarm is known).
   */
  async arm(shard: number): Promise<void> {
    this.joins++;
    if (this.pollShard !== shard) {
      this.pollShard = shard;
      this.host.storage.sql.exec('create table if not exists poller (k integer primary key check (k = 1), shard integer not null)');
      this.host.storage.sql.exec('insert into poller (k, shard) values (1, ?) on conflict (k) do update set shard = excluded.shard', shard);
    }
    if (this.pollAt === undefined) this.pollAt = await this.host.storage.getAlarm();
    // An idle poller's alarm waits for its next retention pass: a session must be polled sooner.
    const soon = Date.now() + hubConfig(this.host.env).POLL_INTERVAL_MS;
    if (this.pollAt === null || this.pollAt > soon) {
      this.pollAt = soon;
      await this.host.storage.setAlarm(this.pollAt);
    }
  }

  /**
   * The fleet poll: one set-based statement for every session of this shard, then a poke to each
   * session whose claim, registration, disablement, token or desired revision changed (or that
   * has not checked in for a sweep period). Each poked session runs its own check and acts. The
   * poll re-arms while any session of the shard is registered; with none, the alarm comes back
   * only for the next history retention pass (history ages past the horizon while the fleet is
   * idle too), until a claim brings the poll back (`arm`).
   *
   * The next poll is armed before the pokes go out, and the alarm does not wait for them: a
   * session's check can wait on a row lock for up to PG_QUERY_TIMEOUT_MS (its cluster's owner row,
   * held FOR SHARE by that session's own long write), and that must not hold up the poll of every
   * other session of the shard. Sweep answers that come back are recorded by whichever poll runs
   * next.
   */
  async run(): Promise<void> {
    this.pollAt = null;
    const startedAt = Date.now();
    const cfg = hubConfig(this.host.env);
    let shard: number | null;
    try {
      shard = this.pollShard ?? this.storedShard();
    } catch (err) {
      // Polled again at the next interval: a poll chain that stops here stops for good (until a
      // claim in this shard), with every revocation and displacement it delivers.
      this.pollAt = Date.now() + cfg.POLL_INTERVAL_MS;
      await this.host.storage.setAlarm(this.pollAt);
      log.error('fleet poll: could not read which shard this object polls; retrying at the next interval', { error: describeError(err) });
      return;
    }
    if (shard === null) return;
    this.pollShard = shard;
    if (await this.databaseIsForeign(shard, cfg)) {
      // Nothing of the other region's is touched; looked at again at each retention interval
      // (a new secret comes with a deploy, and a claim here brings the poll back at once).
      this.pollAt = Date.now() + cfg.HISTORY_PRUNE_INTERVAL_MS;
      await this.host.storage.setAlarm(this.pollAt);
      return;
    }
    let again = true;
    let poke: FleetPoll['poke'] = [];
    const alive = this.sweptAlive;
    this.sweptAlive = [];
    const joinsBefore = this.joins;
    try {
      const r = await pollFleet(this.host.leastBusy(), shard, cfg.LIVE_SWEEP_MS, cfg.POLL_POKE_LIMIT, alive, [...this.poking]);
      // A session that joined while the statement ran set a near alarm (`arm`), and
      // the statement may have read the shard before its claim committed: an empty answer must
      // not put the poll off to the next retention pass, minutes away, with that session in it.
      again = r.anyLive || this.joins !== joinsBefore;
      poke = r.poke;
    } catch (err) {
      // The statement did not run: these sweep answers go with the next one.
      this.sweptAlive.push(...alive);
      // A fault (a migration not run) fails every poll, and with it every revocation and
      // displacement the poll exists to deliver: an error, not the outage's warning.
      const line = failureLine('fleet poll', err);
      log[line.level](`${line.message}; retrying at the next interval`, { shard, ...line.fields });
    }
    // Every interval from this poll's start, not from its end: the interval is the bound on how
    // late a revocation or displacement is seen, and a poll statement that took its time (a
    // database far away or loaded) pushed the next one back by as much, every time. One that took
    // longer than the interval is followed a quarter interval later, not at once: back to back,
    // the polls would load a database that is already struggling.
    const next = Math.max(startedAt + cfg.POLL_INTERVAL_MS, Date.now() + cfg.POLL_INTERVAL_MS / 4);
    this.pollAt = again ? next : Math.max(this.pruneAt, next);
    await this.host.storage.setAlarm(this.pollAt);
    for (const p of poke) this.pokeSession(p, cfg);
    if (poke.length > 0) log.debug('fleet poll poked sessions', { shard, poked: poke.length, unanswered: this.poking.size });
    if (!this.pruning && Date.now() >= this.pruneAt) this.retentionPass(shard, cfg);
  }

  /** Whether DATABASE_URL is another region's database (region-guard.ts); a failed read is not. */
  private async databaseIsForeign(shard: number, cfg: HubConfig): Promise<boolean> {
    try {
      const refusal = await this.region.refusal(this.host.leastBusy(), cfg, this.host.env.DATABASE_URL, (r) =>
        log.error('fleet poll stopped: this shard polls, pokes and prunes nothing in another region\'s database', { shard, variable: r.variable, error: r.message }),
      );
      return refusal !== null;
    } catch {
      // The poll's own statement meets the database's state and reports it.
      return false;
    }
  }

  /**
   * History retention rides on the fleet poll's alarm, which an idle shard keeps for it. Not
   * awaited, like the pokes: a pass over a backlog must not hold up the poll. Every shard's poller
   * runs it; the pass is idempotent.
   */
  private retentionPass(shard: number, cfg: HubConfig): void {
    this.pruning = true;
    pruneHistory(this.host.leastBusy(), { historyMs: cfg.HISTORY_RETENTION_MS, operationsMs: cfg.OPERATIONS_RETENTION_MS }, cfg.HISTORY_PRUNE_BATCH)
      .then((r) => {
        this.pruneAt = r.full ? 0 : Date.now() + cfg.HISTORY_PRUNE_INTERVAL_MS;
        if (r.events + r.rejections + r.operationEvents + r.operations > 0) {
          log.info('history retention: deleted rows older than HISTORY_RETENTION_MS (operations: OPERATIONS_RETENTION_MS)', {
            shard,
            events: r.events,
            rejections: r.rejections,
            operation_events: r.operationEvents,
            operations: r.operations,
            more: r.full,
          });
        }
      })
      .catch((err: unknown) => {
        this.pruneAt = Date.now() + cfg.HISTORY_PRUNE_INTERVAL_MS;
        const line = failureLine('history retention pass', err);
        log[line.level](`${line.message}; retrying at the next interval`, { shard, ...line.fields });
      })
      .finally(() => {
        this.pruning = false;
      });
  }

  /**
   * One poke of the fleet poll, not awaited by the poll. A session whose previous poke is still
   * unanswered is not poked again (the statement leaves it out), so pokes do not pile up on a
   * session stuck behind a lock, each holding a gateway connection; and none is awaited past a
   * deadline: that of the check's own statement through the gateway, plus a margin for the hop
   * to the session's object. Past it the session is poked again by the next poll (a poke only
   * asks it to look, so a late answer to the earlier one does no harm).
   */
  private pokeSession(p: FleetPoll['poke'][number], cfg: HubConfig): void {
    const routeKey = routeKeyOf(p.sessionId);
    if (!routeKey || this.poking.has(p.sessionId)) return;
    this.poking.add(p.sessionId);
    const deadlineMs = pokeDeadlineMs(cfg);
    const answer = withDeadline(sessionStub(this.host.env, { clusterUid: p.clusterUid, routeKey }).check(p.sessionId, p.why), deadlineMs, () => {
      throw new Error(`no answer in ${deadlineMs} ms`);
    });
    answer
      .then((swept) => {
        if (swept) this.sweptAlive.push(p.sessionId);
      })
      .catch((err: unknown) => {
        log.warn('fleet poll: poke failed; the next poll retries', { cluster: p.clusterUid, session: p.sessionId, why: p.why, error: describeError(err) });
      })
      .finally(() => this.poking.delete(p.sessionId));
  }

  /** The shard this object polls, from storage: null when no session ever registered with it (no table). */
  private storedShard(): number | null {
    try {
      const row = this.host.storage.sql.exec<{ shard: number }>('select shard from poller where k = 1').toArray()[0];
      return row ? row.shard : null;
    } catch (err) {
      if (/no such table/i.test(describeError(err))) return null;
      // Anything else is not "nothing to poll": taken for that, the alarm ended the poll chain.
      throw err;
    }
  }
}

/**
 * How long the poller waits for a session's answer to a poke: the session's check is one statement
 * through the gateway, which gives up at PG_QUERY_TIMEOUT_MS + 2 s (`viaGateway`); a second more
 * for the hops to and from the session's object.
 */
function pokeDeadlineMs(cfg: Pick<HubConfig, 'PG_QUERY_TIMEOUT_MS'>): number {
  return cfg.PG_QUERY_TIMEOUT_MS + 3_000;
}
