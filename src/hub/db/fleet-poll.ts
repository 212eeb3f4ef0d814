import type { Sql } from './sql';

/** Why the fleet poll pokes a session. */
export type PokeReason = 'unregistered' | 'disabled' | 'token' | 'claim' | 'desired' | 'sweep';

export interface FleetPoll {
  poke: { sessionId: string; clusterUid: string; why: PokeReason }[];
  /** Whether any session is left in this shard (else the poller wakes only for history retention until one registers). */
  anyLive: boolean;
}

/**
 * One poller's look at its shard of the fleet, in one set-based statement: the sessions whose
 * claim, registration, disablement, token or desired revision changed since they last looked, and
 * those that have not checked in for a sweep period (an object that ended without saying so).
 * Idle sessions cost nothing here but a row compared; only the sessions returned are woken. The
 * sweep comes due for each session between one and two periods after its last check-in (an
 * offset of its own), so a fleet that connected together is not swept together; the sessions
 * that answered the previous sweep are recorded here (`alive`), not by a statement of their own.
 *
 * `alive` is left out of the sweep only: the update that records it is not visible to the rest
 * of the statement, so their old check-in time would sweep them again, but a claim, registration,
 * token or desired revision that changed since they answered must still be found by this poll
 * (else a session displaced just after its sweep answer is cut a poll late). `busy` are the
 * sessions whose previous poke is still unanswered: not poked again, and not counted against
 * `limit` (the poller keeps at most one poke in flight per session).
 */
export async function pollFleet(
  sql: Sql,
  shard: number,
  sweepMs: number,
  limit: number,
  alive: readonly string[] = [],
  busy: readonly string[] = [],
): Promise<FleetPoll> {
  const { rows } = await sql.query<{ session_id: string | null; cluster_uid: string | null; why: PokeReason | null; any_live: boolean }>(
    `with checked_in as (
       update live_sessions set checked_at = now() where session_id = any($4::text[])
     ), due as (
       select s.session_id, s.cluster_uid,
         case when c.uid is null then 'unregistered'
              when c.disabled_at is not null then 'disabled'
              when c.token_hash <> s.token_hash then 'token'
              when o.session_id is distinct from s.session_id or o.generation is distinct from s.generation then 'claim'
              when o.revoked then 'disabled'
              when c.desired_revision > s.seen_revision then 'desired'
              else 'sweep' end as why
       from live_sessions s
       left join clusters c on c.uid = s.cluster_uid
       left join cluster_owners o on o.cluster_uid = s.cluster_uid
       where s.poll_shard = $1 and not (s.session_id = any($5::text[])) and (
         c.uid is null or c.disabled_at is not null or c.token_hash <> s.token_hash
         or o.session_id is distinct from s.session_id or o.generation is distinct from s.generation
         or o.revoked or c.desired_revision > s.seen_revision
         or (s.checked_at < now() - make_interval(secs => ($2::bigint + abs(hashtext(s.session_id)::bigint) % greatest($2::bigint, 1))::double precision / 1000)
             and not (s.session_id = any($4::text[]))))
       -- Under the limit a revocation or a lost claim goes first, then desired state, then
       -- sweeps, oldest check-in first within each: a backlog of sweeps, or of desired changes
       -- (a rollout over the fleet: every session written to stays due until its next check),
       -- must not hold back a revoked or displaced session, which the poll is the bound for.
       order by (case when c.uid is null or c.disabled_at is not null or c.token_hash <> s.token_hash
                        or o.session_id is distinct from s.session_id or o.generation is distinct from s.generation
                        or o.revoked then 0
                      when c.desired_revision > s.seen_revision then 1 else 2 end), s.checked_at
       limit $3
     )
     select d.session_id, d.cluster_uid, d.why, exists (select 1 from live_sessions where poll_shard = $1) as any_live
     from (select 1) one left join due d on true`,
    [shard, sweepMs, limit, alive, busy],
    'wingsmith_fleet_poll_v5',
  );
  return {
    poke: rows.flatMap((r) => (r.session_id && r.cluster_uid && r.why ? [{ sessionId: r.session_id, clusterUid: r.cluster_uid, why: r.why }] : [])),
    anyLive: rows[0]?.any_live === true,
  };
}
