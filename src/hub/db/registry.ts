import { z } from 'zod';
import { LocationHintSchema, placementHint, type Jurisdiction, type LocationHint } from '../region';
import { createLogger } from '../log';
import { describeError } from './errors';
import { iso } from './read-paging';
import type { Sql } from './sql';

const log = createLogger({ component: 'registry' });

/** The cluster registry: one statement per operation. Token hashes travel as hex. */
export interface ClusterRow {
  uid: string;
  name: string;
  token_issued_at: string;
  disabled_at: string | null;
  created_at: string;
  location_hint: string | null;
}

// Times as text made in SQL: the driver parses timestamptz only in DateStyle ISO, and a
// database's default may be another (read-paging.ts `iso`).
const COLUMNS = `uid, name, ${iso('token_issued_at')} as token_issued_at, ${iso('disabled_at')} as disabled_at,
  ${iso('created_at')} as created_at, location_hint`;

/** A stored hint is used only if it is one the platform knows (the column is plain text). */
export function knownHint(v: unknown): LocationHint | null {
  const r = LocationHintSchema.safeParse(v);
  return r.success ? r.data : null;
}

/** Names are DNS-label-like and lowercase, so a name can never be mistaken for a uid (a ULID). */
export const CLUSTER_NAME_RE = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

export async function createCluster(
  sql: Sql,
  uid: string,
  name: string,
  tokenHashHex: string,
  locationHint: LocationHint | null,
  arriveBy: string,
): Promise<ClusterRow | null> {
  // Not registered late (arrival.ts): the name taken, after its 504, with a token nobody was shown.
  const { rows } = await sql.query<ClusterRow>(
    `insert into clusters (uid, name, token_hash, token_issued_at, location_hint)
     select $1, $2, decode($3, 'hex'), now(), $4 where wingsmith_arrived_by($5::timestamptz)
     on conflict (name) do nothing
     returning ${COLUMNS}`,
    [uid, name, tokenHashHex, locationHint, arriveBy],
  );
  return rows[0] ?? null;
}

/**
 * Change where the cluster's new session objects are placed. An actual change bumps the placement
 * generation (and is timestamped): route keys carry the generation they were minted under
 * (address.ts), so the connect route starts a new object for any session opened before it.
 */
export async function setLocationHint(sql: Sql, idOrName: string, locationHint: LocationHint | null, arriveBy: string): Promise<ClusterRow | null> {
  // Not applied late (arrival.ts): it would undo a hint set after its 504.
  const { rows } = await sql.query<ClusterRow>(
    `update clusters set
       placement_generation = placement_generation + case when location_hint is distinct from $2 then 1 else 0 end,
       placement_changed_at = case when location_hint is distinct from $2 then now() else placement_changed_at end,
       location_hint = $2
     where (uid = $1 or name = $1) and wingsmith_arrived_by($3::timestamptz) returning ${COLUMNS}`,
    [idOrName, locationHint, arriveBy],
  );
  return rows[0] ?? null;
}

/** By uid or by name (the two cannot collide: names are lowercase, uids are ULIDs). */
export async function getCluster(sql: Sql, idOrName: string): Promise<ClusterRow | null> {
  const { rows } = await sql.query<ClusterRow>(`select ${COLUMNS} from clusters where uid = $1 or name = $1`, [idOrName]);
  return rows[0] ?? null;
}

export async function listClusters(sql: Sql, after: string | null, limit: number): Promise<ClusterRow[]> {
  const { rows } = await sql.query<ClusterRow>(
    `select ${COLUMNS} from clusters where ($1::text is null or uid > $1) order by uid limit $2`,
    [after, limit],
  );
  return rows;
}

/** A revoked cluster, with the session the revocation must cut (null: none connected). */
export type RevokedRow = ClusterRow & { live_session: string | null };

/**
 * The session shown holding the cluster's claim on a live connection, read by its own statement
 * once the revocation's update has committed, not in that update's RETURNING: a claim holds the
 * cluster row FOR SHARE (ownership.ts CLAIM_SQL) until it commits, so the update may have waited
 * for a claim, and its statement's snapshot (taken before that wait) would not show the session
 * that claim made (a new owner row, or a new session in the old one). That session, welcomed on
 * the token just revoked, would then be cut only by the next fleet poll. A statement begun after
 * the update sees every claim that locked the row before it; every claim after it sees the
 * revocation and is refused. Not a locking read inside the update either: that would take the
 * owner row while holding the cluster row, the reverse of the order the claim, the session fence
 * and the session check (owner row, then cluster row) keep, and could deadlock with them.
 */
async function revoked(sql: Sql, row: ClusterRow | undefined, disableEpoch: number | null = null): Promise<RevokedRow | null> {
  if (!row) return null;
  try {
    // A disable's own statement marks the claim it locked revoked; a cluster's first claim, which
    // inserted its owner row while the disable waited, is not in that statement's snapshot: marked
    // here. A claim granted before the disable holds an epoch below the one the disable gave (a
    // claim reads the epoch under its share lock on the cluster row, held until it commits; the
    // disable bumps it under its update of that row), one granted after an enable the same: told
    // apart by that, whether or not an enable has committed since the disable's statement (looking
    // for the cluster still disabled, an enable in between left the claim unrevoked and its session
    // open). Not by claimed_at <= disabled_at: both are their transactions' start times, and a claim
    // that began after the disable's statement yet locked the cluster row before its update
    // committed first, stamped later. Nor may a claim granted after an enable that commits after
    // this snapshot be touched: it bumps the generation, and the update, re-checking the row it
    // waited for, no longer finds the generation seen here. A claim by code older than migration
    // 0029 keeps the row's old epoch: the cluster still disabled marks it, as before.
    const { rows } = await sql.query<{ session_id: string }>(
      disableEpoch !== null
        ? `with seen as (
             select generation from cluster_owners where cluster_uid = $1
           ), r as (
             update cluster_owners o set revoked = true from clusters c, seen s
             where c.uid = $1 and o.cluster_uid = c.uid and o.generation = s.generation and not o.revoked
               and (o.claim_epoch < $2::bigint or c.disabled_at is not null)
           )
           select session_id from cluster_owners where cluster_uid = $1 and connected`
        : `select session_id from cluster_owners where cluster_uid = $1 and connected`,
      disableEpoch !== null ? [row.uid, disableEpoch] : [row.uid],
    );
    return { ...row, live_session: rows[0]?.session_id ?? null };
  } catch (err) {
    // The revocation has committed: its answer (a rotation's new token, shown only there) must
    // not be lost to this read. Unpoked, the live session is cut by its fleet poll.
    log.warn('could not read the live session of a revoked cluster; its fleet poll will cut it', { cluster: row.uid, error: describeError(err) });
    return { ...row, live_session: null };
  }
}

/**
 * `afterCommit`, in rotateToken and setDisabled: where what follows the committed update runs (the
 * read of the session to cut, a disable's revocation of a first claim it could not see). Not the
 * admin write's own kind of statement, sent only within a short wait behind whatever is on the
 * connection: refused unsent on a busy shard, it left a leaked token's session open until the
 * fleet poll. It reads a write already applied, and marks only what that write revoked, whenever
 * it runs (epoch and generation), so it may queue as reads do.
 */

/**
 * Rotate: the old token stops working at once; its live session is cut by the caller (revoke.ts).
 * Written only if it reaches Postgres by `arriveBy` (arrival.ts): one delivered late, after its
 * caller was answered 504 and rotated again, would replace the token the admin was shown.
 */
export async function rotateToken(sql: Sql, idOrName: string, tokenHashHex: string, arriveBy: string, afterCommit: Sql): Promise<RevokedRow | null> {
  const { rows } = await sql.query<ClusterRow>(
    `update clusters set token_hash = decode($2, 'hex'), token_issued_at = now()
     where (uid = $1 or name = $1) and wingsmith_arrived_by($3::timestamptz) returning ${COLUMNS}`,
    [idOrName, tokenHashHex, arriveBy],
  );
  return revoked(afterCommit, rows[0]);
}

/**
 * Disable (its live session is cut by the caller, revoke.ts) or enable (nothing to cut: live_session
 * null). Written only if it reaches Postgres by `arriveBy` (arrival.ts): one delivered late could
 * undo the opposite toggle its caller made after being answered 504.
 */
export async function setDisabled(sql: Sql, idOrName: string, disabled: boolean, arriveBy: string, afterCommit: Sql): Promise<RevokedRow | null> {
  // A disable also revokes the claim it finds (migration 0021): an enable clears only
  // disabled_at, so a session the disable revoked stays revoked until a new claim, even if the
  // poke that would cut it is lost and the enable comes before the next poll.
  const { rows } = await sql.query<ClusterRow & { revocation_epoch: string }>(
    // The owner row is locked first, the order of every statement that locks both (ownership.ts).
    `with arrived as (select wingsmith_arrived_by($3::timestamptz) as ok), held as (
       select 1 from cluster_owners where $2 and (select ok from arrived) and cluster_uid = (select uid from clusters where uid = $1 or name = $1)
       for no key update
     ), d as (
       update clusters set disabled_at = case when $2 then coalesce(disabled_at, now()) else null end,
         revocation_epoch = revocation_epoch + case when $2 then 1 else 0 end
       where (uid = $1 or name = $1) and (select ok from arrived) and (select count(*) from held) >= 0 returning ${COLUMNS}, revocation_epoch
     ), r as (
       update cluster_owners o set revoked = true from d where $2 and o.cluster_uid = d.uid and not o.revoked
     )
     select * from d`,
    [idOrName, disabled, arriveBy],
  );
  const found = rows[0];
  if (!found) return null;
  const { revocation_epoch: epoch, ...row } = found;
  if (!disabled) return { ...row, live_session: null };
  return revoked(afterCommit, row, Number(epoch));
}

export interface TokenLookup {
  uid: string;
  name: string;
  disabled: boolean;
  /** The hint new session objects are created with: null when none, or when it is ignored. */
  location_hint: LocationHint | null;
  /** A stored hint outside the deployment's jurisdiction (stored before it had one), not used. */
  ignored_hint: LocationHint | null;
  /** Counts the placement's changes: the generation a new route key is minted under. */
  placement_generation: number;
}

const LookupRow = z.object({
  uid: z.string(),
  name: z.string(),
  disabled: z.boolean(),
  location_hint: z.unknown(),
  placement_generation: z.coerce.number().int().nonnegative(),
});

/** The connect route's check: which cluster does this token belong to, and may it connect? Where do its objects go? */
export async function lookupToken(sql: Sql, tokenHashHex: string, jurisdiction: Jurisdiction | null | undefined): Promise<TokenLookup | null> {
  const { rows } = await sql.query<unknown>(
    `select uid, name, disabled_at is not null as disabled, location_hint, placement_generation
     from clusters where token_hash = decode($1, 'hex')`,
    [tokenHashHex],
    'wingsmith_token_lookup_v2',
  );
  if (rows[0] === undefined) return null;
  const r = LookupRow.parse(rows[0]);
  const { hint, ignored } = placementHint(knownHint(r.location_hint), jurisdiction);
  return { uid: r.uid, name: r.name, disabled: r.disabled, location_hint: hint, ignored_hint: ignored, placement_generation: r.placement_generation };
}
