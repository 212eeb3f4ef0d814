import type { Sql } from './sql';

/** Why a cluster may not hold a session, or null when it may. */
export type Refusal = 'not_registered' | 'disabled' | 'token_rotated';

export interface ClaimResult {
  refusal: Refusal | null;
  /** The claim's generation when granted. */
  generation: number | null;
  desiredRevision: number;
}

/**
 * At hello: check registration, disablement and the token, and claim ownership, in one
 * statement. The newest hello wins and bumps the generation.
 */
export async function claimCluster(
  sql: Sql,
  args: { clusterUid: string; tokenHashHex: string; sessionId: string; live: unknown },
): Promise<ClaimResult> {
  const { rows } = await sql.query<{
    registered: boolean;
    disabled: boolean | null;
    token_current: boolean | null;
    generation: string | null;
    desired_revision: string | null;
  }>(
    `with c as (
       select uid, token_hash, disabled_at, desired_revision from clusters where uid = $1
     ), ok as (
       select uid from c where token_hash = decode($2, 'hex') and disabled_at is null
     ), claim as (
       insert into cluster_owners (cluster_uid, session_id, generation, claimed_at, connected, polled_at, live)
       select uid, $3, 1, now(), true, now(), $4::jsonb from ok
       on conflict (cluster_uid) do update
         set session_id = excluded.session_id, generation = cluster_owners.generation + 1,
             claimed_at = now(), connected = true, polled_at = now(), live = excluded.live
       returning generation
     )
     select exists (select 1 from c) as registered,
            (select disabled_at is not null from c) as disabled,
            (select token_hash = decode($2, 'hex') from c) as token_current,
            (select generation from claim) as generation,
            (select desired_revision from c) as desired_revision`,
    [args.clusterUid, args.tokenHashHex, args.sessionId, JSON.stringify(args.live)],
  );
  const r = rows[0];
  if (!r) throw new Error('claim returned no row');
  return {
    refusal: refusalOf(r),
    generation: r.generation === null ? null : Number(r.generation),
    desiredRevision: Number(r.desired_revision ?? 0),
  };
}

function refusalOf(r: { registered: boolean; disabled: boolean | null; token_current: boolean | null }): Refusal | null {
  if (!r.registered) return 'not_registered';
  if (r.disabled) return 'disabled';
  if (!r.token_current) return 'token_rotated';
  return null;
}

export interface PollResult {
  refusal: Refusal | null;
  /** False when a newer hello elsewhere took the claim. */
  owner: boolean;
  desiredRevision: number;
}

/**
 * The ownership poll, in one statement: is the cluster still registered, enabled, on the same
 * token, and is this session still the owner? It also publishes the session's live view for
 * the admin API, fenced by the claim.
 */
export async function pollOwnership(
  sql: Sql,
  args: { clusterUid: string; tokenHashHex: string; sessionId: string; generation: number; live: unknown; connected: boolean },
): Promise<PollResult> {
  const { rows } = await sql.query<{
    registered: boolean;
    disabled: boolean | null;
    token_current: boolean | null;
    owner: boolean;
    desired_revision: string | null;
  }>(
    `with c as (
       select uid, token_hash, disabled_at, desired_revision from clusters where uid = $1
     ), upd as (
       update cluster_owners set live = $5::jsonb, polled_at = now(), connected = $6
       where cluster_uid = $1 and session_id = $3 and generation = $4
       returning 1
     )
     select exists (select 1 from c) as registered,
            (select disabled_at is not null from c) as disabled,
            (select token_hash = decode($2, 'hex') from c) as token_current,
            exists (select 1 from upd) as owner,
            (select desired_revision from c) as desired_revision`,
    [args.clusterUid, args.tokenHashHex, args.sessionId, args.generation, JSON.stringify(args.live), args.connected],
  );
  const r = rows[0];
  if (!r) throw new Error('poll returned no row');
  return { refusal: refusalOf(r), owner: r.owner, desiredRevision: Number(r.desired_revision ?? 0) };
}

/**
 * The fence every session write carries, as a CTE named `fence`: one row when this session
 * still owns the cluster on a current token. `FOR SHARE` makes a concurrent claim wait for the
 * write (and the write re-check a claim that committed first), so a displaced session writes nothing.
 */
export function fenceCte(p: { cluster: string; session: string; generation: string; tokenHash: string }): string {
  return `fence as (
    select 1 from cluster_owners o join clusters c on c.uid = o.cluster_uid
    where o.cluster_uid = ${p.cluster} and o.session_id = ${p.session} and o.generation = ${p.generation}
      and c.disabled_at is null and c.token_hash = decode(${p.tokenHash}, 'hex')
    for share
  )`;
}
