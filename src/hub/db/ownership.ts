import type { Sql } from './sql';

/** Why a cluster may not hold a session, or null when it may. */
export type Refusal = 'not_registered' | 'disabled' | 'token_rotated';

export interface ClaimArgs {
  /**
   * When the session asked for the claim (its clock, ms): the claim's arrival deadline counts from
   * it, not from the gateway shard's receipt, where a call held up on its way would get a fresh
   * one and could take the cluster after the session had given up on it (its hello refused 1013).
   */
  takenAt?: number;
  clusterUid: string;
  tokenHashHex: string;
  /** The session to resume when this session still holds the claim it last had, else null. */
  resume: { sessionId: string; generation: number } | null;
  /** The id a fresh session gets (also when the resume is refused because the claim was lost). */
  freshSessionId: string;
  live: unknown;
  remoteAddr: string | null;
  operatorVersion: string;
  contention: ContentionPolicy;
  /** The poller shard that watches this cluster's sessions (address.ts `pollShardOf`). */
  pollShard: number;
  /**
   * The desired revision the session has already put into its stream (0 for a fresh session):
   * the fleet poll keeps poking it while the cluster's revision is higher, so a change whose fetch
   * failed is retried without waiting for another change.
   */
  watermark: number;
  /**
   * How many ingest statements the session object knows this session committed (0 for a fresh
   * session): an owner row counting fewer went back (restored from a backup), so it is not resumed.
   */
  ingestCommits: number;
}

export interface ContentionPolicy {
  /** Displacements counted over this window… */
  windowMs: number;
  /** …more than this many start a contention episode. */
  threshold: number;
  /** An episode ends after this long without a displacement. */
  quietMs: number;
}

export interface Displacement {
  from: { session_id: string; remote_addr: string | null; operator_version: string | null };
  to: { session_id: string; remote_addr: string | null; operator_version: string | null };
}

export interface ClaimResult {
  refusal: Refusal | null;
  /** The claim's generation when granted. */
  generation: number | null;
  /** The session that now holds the claim: the resumed one, or the fresh id. */
  sessionId: string | null;
  desiredRevision: number;
  /** The session that held the claim before, when it was another one (poke it: it is displaced). */
  previousSession: string | null;
  /** Set when this claim took the cluster from another session that was still connected. */
  displacement: Displacement | null;
  /** This displacement started a contention episode (log it once). */
  contentionStarted: boolean;
  /**
   * The resume was refused because the database went back under the session (restored from a
   * backup): its desired revision is below the session's watermark, or its owner row counts fewer
   * of the session's ingest statements than the session did.
   */
  wentBack: boolean;
}

/**
 * At hello: check registration, disablement and the token, and claim ownership, in one
 * statement. The newest hello wins and bumps the generation.
 *
 * Whether the session may be resumed is decided under the row lock, on the claim as it stands:
 * only a session that still holds the claim it last had (same session, same generation) resumes.
 * A later generation of the same session counts too: only this session's own object ever claims
 * under its id, so that is a claim of its own that committed after its hello gave up on it (the
 * answer lost on a half-dead path). Any other session's claim in between would have renamed it.
 * A session that lost its claim to another is never resumed: it gets the fresh id, so its return
 * is a full resync that replaces the plane's rows with one snapshot instead of mixing two views.
 * (A session superseding its own half-open connection still holds its claim and resumes.)
 * Nor is a session that has sent a desired revision above the cluster's, or whose owner row
 * counts fewer of its ingest statements than it knows committed (`ingestCommits`): the database went
 * back (restored from a backup), and its counters, claims and rows are older than the session's
 * stream.
 */
export async function claimCluster(sql: Sql, args: ClaimArgs, arriveBy: string | null): Promise<ClaimResult> {
  const { rows } = await sql.query<{
    registered: boolean;
    disabled: boolean | null;
    token_current: boolean | null;
    generation: string | null;
    session_id: string | null;
    prev_session_id: string | null;
    prev_connected: boolean | null;
    desired_revision: string | null;
    displaced: Displacement | null;
    contention_started: boolean | null;
    went_back: boolean | null;
  }>(CLAIM_SQL, [
    args.clusterUid,
    args.tokenHashHex,
    args.freshSessionId,
    JSON.stringify(args.live),
    args.resume?.sessionId ?? null,
    args.resume?.generation ?? null,
    args.remoteAddr,
    args.operatorVersion,
    args.contention.windowMs,
    args.contention.threshold,
    args.contention.quietMs,
    args.pollShard,
    args.watermark,
    args.ingestCommits,
    arriveBy,
  ], 'wingsmith_claim_v11');
  const r = rows[0];
  if (!r) throw new Error('claim returned no row');
  const previous = r.prev_session_id !== null && r.prev_session_id !== r.session_id ? r.prev_session_id : null;
  return {
    refusal: refusalOf(r),
    generation: r.generation === null ? null : Number(r.generation),
    sessionId: r.session_id,
    desiredRevision: Number(r.desired_revision ?? 0),
    previousSession: previous,
    displacement: r.displaced,
    contentionStarted: r.contention_started === true,
    wentBack: r.went_back === true,
  };
}

// $1 cluster, $2 token hash, $3 fresh session id, $4 live view, $5 session to resume, $6 its
// generation, $7 remote address, $8 operator version, $9 window ms, $10 threshold, $11 quiet ms,
// $12 poll shard, $13 the session's desired watermark, $14 the ingest statements it knows committed,
// $15 when the claim must have reached Postgres by (null: no bound).
//
// $15: a claim the hub stopped waiting for (its hello refused 1013) must not commit later, when a
// path that stalled delivers it: it would take the cluster from the session the operator opened
// since, shown connected with no connection behind it (arrival.ts, migration 0030). Checked in the
// final select, whose failure undoes the whole statement: earlier, it would push the owner row's
// insert out of the first 1 KiB that pg_stat_activity shows (below).
//
// Locks, in the order every statement that locks both rows keeps (cluster_owners, then clusters;
// the session fence `fenceCte` locks them in that order too): first the owner row (`held`), which
// is where a claim waits while an ingest batch's fence or another claim holds it; only then the
// cluster row, FOR SHARE (`c`). The registry must be read with a lock, not from the statement's
// snapshot: a rotate-token or disable that commits while this claim waits for the owner row (and
// answers the admin 200) would otherwise be missed, and the hello welcomed on a token or cluster
// the admin was just told is dead. A locking read under READ COMMITTED returns the newest
// committed row version, and FOR SHARE conflicts with the update of a rotation or disable: one
// still in flight is waited for (then seen), and one that starts after this lock waits for the
// claim's commit, after which its own look for the session to cut (registry.ts) finds this claim.
// `c` reads `held` so that it is evaluated after it; the count is never negative (the condition
// only orders the two locks). The owner row may not exist (the cluster's first claim): then the
// insert below may wait for a concurrent first claim's insert while holding the cluster row FOR
// SHARE, which blocks no holder of an owner row: they want the cluster row only FOR SHARE or KEY
// SHARE (the fence, foreign-key checks), and no statement updates it while holding an owner row.
// `back`: the database holds a lower desired revision than this session has already sent, or an
// owner row naming it counts fewer of its ingest statements than it committed, so it went back
// (restored from a backup); its rows no longer match the session's stream nor the claim it names,
// so the session is never resumed and the fresh one resyncs both ways. A fresh session's count
// starts at 0 (`ingest_commits`); a resume keeps it. (Comments stay
// out of the statement: pg_stat_activity shows only its first 1 KiB, where a person, and the
// tests that watch a claim wait, look for the owner row's insert.)
const CLAIM_SQL = `
with held as (
  select session_id, ingest_commits from cluster_owners where cluster_uid = $1 for no key update
), c as (
  select uid, token_hash, disabled_at, desired_revision, revocation_epoch from clusters
  where uid = $1 and (select count(*) from held) >= 0
  for share
), back as (
  select desired_revision < $13::bigint
    or coalesce((select ingest_commits < $14::bigint from held where session_id = $5), false) as went_back
  from c
), ok as (
  select * from c where token_hash = decode($2, 'hex') and disabled_at is null
), recent as (
  select count(*) as n from cluster_displacements
  where cluster_uid = $1 and at > now() - make_interval(secs => $9::bigint / 1000.0)
), claim as (
  insert into cluster_owners (cluster_uid, session_id, generation, claimed_at, connected, polled_at, live,
    remote_addr, operator_version, ingest_commits, claim_id, claim_generation, claim_epoch)
  select uid, $3, 1, now(), true, now(), $4::jsonb, $7, $8, 0, $3, 1, revocation_epoch from ok
  on conflict (cluster_uid) do update set
    claim_id = excluded.claim_id, claim_generation = cluster_owners.generation + 1, claim_epoch = excluded.claim_epoch,
    session_id = case when cluster_owners.session_id = $5 and cluster_owners.generation >= $6::bigint and not (select went_back from back)
                      then $5 else excluded.session_id end,
    ingest_commits = case when cluster_owners.session_id = $5 and cluster_owners.generation >= $6::bigint and not (select went_back from back)
                          then cluster_owners.ingest_commits else 0 end,
    generation = cluster_owners.generation + 1, revoked = false,
    claimed_at = now(), connected = true, polled_at = now(), live = excluded.live,
    remote_addr = excluded.remote_addr, operator_version = excluded.operator_version,
    prev_session_id = cluster_owners.session_id,
    prev_connected = cluster_owners.connected,
    prev_remote_addr = cluster_owners.remote_addr,
    prev_operator_version = cluster_owners.operator_version,
    -- An episode continues while displacements keep coming within the quiet period; a new one
    -- starts when this displacement makes more than the threshold within the window.
    contention_since = case
      when not (cluster_owners.connected and cluster_owners.session_id is distinct from
                (case when cluster_owners.session_id = $5 and cluster_owners.generation >= $6::bigint and not (select went_back from back) then $5 else excluded.session_id end))
        then cluster_owners.contention_since
      when cluster_owners.contention_since is not null
           and cluster_owners.contention_last_at > now() - make_interval(secs => $11::bigint / 1000.0)
        then cluster_owners.contention_since
      when (select n from recent) + 1 > $10::int then now()
      else null end,
    contention_last_at = case
      when not (cluster_owners.connected and cluster_owners.session_id is distinct from
                (case when cluster_owners.session_id = $5 and cluster_owners.generation >= $6::bigint and not (select went_back from back) then $5 else excluded.session_id end))
        then cluster_owners.contention_last_at
      else now() end
  returning session_id, generation, prev_session_id, prev_connected, prev_remote_addr, prev_operator_version,
    contention_since, remote_addr, operator_version
), displaced as (
  select * from claim cl
  where cl.prev_connected and cl.prev_session_id is distinct from cl.session_id
), logged as (
  insert into cluster_displacements (cluster_uid, from_session, from_remote_addr, from_operator_version,
    to_session, to_remote_addr, to_operator_version)
  select $1, d.prev_session_id, d.prev_remote_addr, d.prev_operator_version, d.session_id, d.remote_addr, d.operator_version
  from displaced d
  returning from_session, from_remote_addr, from_operator_version, to_session, to_remote_addr, to_operator_version
), trimmed as (
  delete from cluster_displacements
  where cluster_uid = $1 and exists (select 1 from displaced)
    and at < now() - greatest(interval '1 day', make_interval(secs => greatest($9::bigint, $11::bigint) / 1000.0))
), registered as (
  -- The session joins the fleet poll with the claim and token it now holds and the desired
  -- revision it has already sent (a fresh session: none). $13 is the watermark of the session
  -- asked to resume: a claim that turns the resume down grants the fresh id, which has sent
  -- nothing, and registered with the old watermark it would look caught up to the poll.
  insert into live_sessions (session_id, cluster_uid, poll_shard, generation, token_hash, seen_revision)
  select cl.session_id, $1, $12, cl.generation, decode($2, 'hex'),
    case when cl.session_id = $5 then $13::bigint else 0 end from claim cl
  on conflict (session_id) do update set poll_shard = excluded.poll_shard, generation = excluded.generation,
    token_hash = excluded.token_hash, seen_revision = excluded.seen_revision, checked_at = now()
)
select exists (select 1 from c) as registered,
       (select disabled_at is not null from c) as disabled,
       (select token_hash = decode($2, 'hex') from c) as token_current,
       (select generation from claim) as generation,
       (select session_id from claim) as session_id,
       (select prev_session_id from claim) as prev_session_id,
       (select prev_connected from claim) as prev_connected,
       (select desired_revision from c) as desired_revision,
       (select jsonb_build_object(
          'from', jsonb_build_object('session_id', from_session, 'remote_addr', from_remote_addr, 'operator_version', from_operator_version),
          'to', jsonb_build_object('session_id', to_session, 'remote_addr', to_remote_addr, 'operator_version', to_operator_version))
        from logged) as displaced,
       (select d.contention_since = now() from displaced d) as contention_started,
       (select went_back from back) as went_back,
       $15::timestamptz is null or wingsmith_arrived_by($15::timestamptz) as arrived
`;

function refusalOf(r: { registered: boolean; disabled: boolean | null; token_current: boolean | null }): Refusal | null {
  if (!r.registered) return 'not_registered';
  if (r.disabled) return 'disabled';
  if (!r.token_current) return 'token_rotated';
  return null;
}

export interface CheckResult {
  refusal: Refusal | null;
  /** False when a newer hello elsewhere took the claim. */
  owner: boolean;
  desiredRevision: number;
  /** The owner row's count of this session's committed ingest statements (when it is the owner). */
  ingestCommits: number | null;
}

/**
 * A session's own check, in one statement, when the fleet poll (or a claim, or a failed write)
 * pokes it: is the cluster still registered, enabled, on the same token, and is this session still
 * the owner? It publishes the session's live view for the admin API (fenced by the claim) and
 * records the desired revision it has sent, so the fleet poll stops poking it once it has caught
 * up. A session that is no longer connected leaves the fleet poll.
 */
export async function checkSession(
  sql: Sql,
  args: {
    clusterUid: string;
    tokenHashHex: string;
    sessionId: string;
    generation: number;
    live: unknown;
    connected: boolean;
    /** The desired revision the session has already put into its stream. */
    watermark: number;
  },
): Promise<CheckResult> {
  const { rows } = await sql.query<{
    registered: boolean;
    disabled: boolean | null;
    token_current: boolean | null;
    owner: boolean;
    desired_revision: string | null;
    ingest_commits: string | null;
  }>(
    `with c as (
       select uid, token_hash, disabled_at, desired_revision from clusters where uid = $1
     ), upd as (
       -- A check never turns a claim back to connected: only a claim (which bumps the generation)
       -- connects. A check's statement may reach the server after this session's disconnect
       -- committed (held on a slow link, on another gateway connection than the disconnect's), and
       -- that disconnect also took it out of the fleet poll: nothing would correct it, and the
       -- operator's next hello would count as a displacement. Under a row lock the newest row is
       -- what this reads.
       update cluster_owners set live = $5::jsonb, polled_at = now(), connected = cluster_owners.connected and $6
       where cluster_uid = $1 and session_id = $3 and generation = $4
       returning revoked, ingest_commits
     ), seen as (
       update live_sessions s set seen_revision = $7::bigint, checked_at = now()
       where $6 and s.session_id = $3
     ), gone as (
       delete from live_sessions where not $6 and session_id = $3 and generation = $4
     )
     select exists (select 1 from c) as registered,
            -- A claim a disable revoked stays refused after an enable (migration 0021).
            (select disabled_at is not null from c) or exists (select 1 from upd where revoked) as disabled,
            (select token_hash = decode($2, 'hex') from c) as token_current,
            exists (select 1 from upd) as owner,
            (select desired_revision from c) as desired_revision,
            (select ingest_commits from upd) as ingest_commits`,
    [args.clusterUid, args.tokenHashHex, args.sessionId, args.generation, JSON.stringify(args.live), args.connected, args.watermark],
    'wingsmith_session_check_v5',
  );
  const r = rows[0];
  if (!r) throw new Error('session check returned no row');
  return {
    refusal: refusalOf(r),
    owner: r.owner,
    desiredRevision: Number(r.desired_revision ?? 0),
    ingestCommits: r.ingest_commits === null ? null : Number(r.ingest_commits),
  };
}

/**
 * The fence every session write carries, as a CTE named `fence`: one row when this session
 * still owns the cluster on a current token. `FOR SHARE` makes a concurrent claim wait for the
 * write (and the write re-check a claim that committed first), so a displaced session writes nothing.
 * It locks the owner row, then the cluster row (the order of its FROM list): the order the claim
 * keeps too (CLAIM_SQL), so the two never wait for each other crosswise.
 */
export function fenceCte(p: { cluster: string; session: string; generation: string; tokenHash: string; columns?: string; lock?: string }): string {
  return `fence as (
    select ${p.columns ?? '1'} from cluster_owners o join clusters c on c.uid = o.cluster_uid
    where o.cluster_uid = ${p.cluster} and o.session_id = ${p.session} and o.generation = ${p.generation}
      and not o.revoked and c.disabled_at is null and c.token_hash = decode(${p.tokenHash}, 'hex')
    ${p.lock ?? 'for share'}
  )`;
}

/**
 * A claim whose outcome is unknown (its answer lost: the hello was refused 1013) may have
 * committed for a connection no one will carry: shown connected and in the fleet poll, whether it
 * granted the hello's fresh id or resumed the session asked for. Both are released by the claim's
 * own id (`claim_id`, the fresh id the hello named, migration 0028), and the fresh id leaves the
 * fleet poll whatever claimed since. A claim since, answered, names another id: a release landing
 * after it changes nothing of it. A resumed session matched by its id and generation instead
 * stayed connected and polled until its object's retention, and the next claim by anyone was
 * recorded as displacing it.
 */
export async function releaseUnansweredClaim(sql: Sql, clusterUid: string, claimId: string): Promise<void> {
  // `generation = claim_generation`: a claim by code older than migration 0028 leaves both columns
  // as they were under a newer generation, and is not this claim.
  await sql.query(
    `with o as (
       update cluster_owners set connected = false
       where cluster_uid = $1 and claim_id = $2 and generation = claim_generation and connected
       returning session_id, generation
     )
     delete from live_sessions s
     where s.session_id = $2 or exists (select 1 from o where o.session_id = s.session_id and o.generation = s.generation)`,
    [clusterUid, claimId],
  );
}

/**
 * A session id no object carries live any more (forgotten, replaced, or never connected): it
 * leaves the fleet poll, and if its claim still stands it is not shown as connected (a claim
 * committed for a connection that closed before its welcome, its handshake deadline passed
 * while the claim ran, names a session that never opened).
 */
export async function leaveFleetPoll(sql: Sql, sessionId: string): Promise<void> {
  await sql.query(
    `with gone as (delete from live_sessions where session_id = $1)
     update cluster_owners set connected = false where session_id = $1 and connected`,
    [sessionId],
  );
}
