import type { Payload } from '../../protocol';
import { iso } from './read-paging';
import type { Sql } from './sql';

/** Admin writes of desired state and operations: one statement each, bumping the cluster revision. */

export interface DesiredWrite {
  cluster_uid: string;
  deployment_id: string;
  revision: number;
  owner_session: string | null;
  /** The claim may have changed hands while the statement ran: look the owner up again (OWNER_RECHECK). */
  recheck_owner: boolean;
}

type Serving = NonNullable<Payload<'deployment.desired'>['serving']>;

/**
 * The session a write pokes with its changes: the cluster's owner, only while the cluster is
 * enabled and the owner claimed it with the current token since the last disable, so nothing
 * written after a disable or a rotation is pushed to the session that is about to be cut. Read through `rev`, the
 * statement's update of the cluster row: its RETURNING is the row as the write locked it, after a
 * rotation or disable that committed first (the statement's snapshot may predate them).
 */
export const POKED_OWNER = `(select o.session_id from rev
   join cluster_owners o on o.cluster_uid = rev.uid
   join live_sessions s on s.session_id = o.session_id and s.generation = o.generation
   where rev.disabled_at is null and not o.revoked and s.token_hash = rev.token_hash)`;

/**
 * Whether POKED_OWNER may be stale: its owner row is read from the statement's snapshot, and a
 * claim that commits after that snapshot is not in it (the write's update of the cluster row
 * waits for the claim's FOR SHARE, then goes on). That claim's fresh session may have read its
 * resync before this write committed, so only a poke brings it this change before its next
 * fleet poll: the gateway looks the owner up again once this has committed (`currentOwner`).
 * Told without a lock (a locking read of the owner row, taken while holding the cluster row,
 * would reverse the order the claim and the fence take them in, registry.ts): the row as the
 * snapshot has it was updated or locked (xmax) by a transaction the snapshot does not see, one
 * in progress when it was taken or begun since. A lock of a fence that ended before it does not
 * count, so an ingesting session's writes are not rechecked each time. A cluster with no owner
 * row yet is rechecked too: a first claim inserts its row, which no snapshot before it shows.
 * `xmax` is the raw field: a claim's update made while another transaction held the row FOR KEY
 * SHARE leaves a multixact id there, which this misreads as an old xid (false, the old bug). Only
 * a foreign key into cluster_owners or an explicit FOR KEY SHARE of it would take that lock; none
 * does (the claim's FOR NO KEY UPDATE waits out the fences' FOR SHARE, so its xmax is its own xid).
 */
const OWNER_RECHECK = `coalesce((
   select o.xmax <> '0'::xid
     and (o.xmax = any (select xid(x) from pg_snapshot_xip(pg_current_snapshot()) x)
          or age(o.xmax) <= age(xid(pg_snapshot_xmax(pg_current_snapshot()))))
   from rev join cluster_owners o on o.cluster_uid = rev.uid), true)`;

export async function putDesiredDeployment(
  sql: Sql,
  idOrName: string,
  d: { deployment_id: string; workload_id: string; min_replicas: number; max_replicas: number; serving: Serving },
  arriveBy: string,
): Promise<DesiredWrite | null> {
  const { rows } = await sql.query<{ cluster_uid: string; deployment_id: string; revision: string; owner_session: string | null; recheck_owner: boolean }>(
    `with c as (select uid from clusters where (uid = $1 or name = $1) and wingsmith_arrived_by($7::timestamptz)),
     rev as (
       update clusters set desired_revision = desired_revision + 1 where uid = (select uid from c)
       returning uid, desired_revision, disabled_at, token_hash
     ),
     up as (
       insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving, deleted, updated_at)
       select uid, $2, $3, desired_revision, $4, $5, $6::jsonb, false, now() from rev
       on conflict (cluster_uid, deployment_id) do update set workload_id = excluded.workload_id,
         revision = excluded.revision, min_replicas = excluded.min_replicas, max_replicas = excluded.max_replicas,
         serving = excluded.serving, deleted = false, updated_at = now()
       returning cluster_uid, deployment_id, revision
     )
     select up.*, ${POKED_OWNER} as owner_session, ${OWNER_RECHECK} as recheck_owner from up`,
    [idOrName, d.deployment_id, d.workload_id, d.min_replicas, d.max_replicas, JSON.stringify(d.serving), arriveBy],
    // Prepared (named), as every statement on a hot path is: parsed and planned once per
    // connection instead of per call (this one: 0.43 against 0.85 ms a write, pgbench on a local disk).
    'wingsmith_put_desired_v4',
  );
  const r = rows[0];
  return r ? { ...r, revision: Number(r.revision), recheck_owner: r.recheck_owner === true } : null;
}

export interface DesiredItem {
  deployment_id: string;
  workload_id: string;
  min_replicas: number;
  max_replicas: number;
  serving: Serving;
}

/**
 * Many deployments in one statement and one commit: the cluster's revision is bumped once, by
 * their number, and each gets its own revision in the order given (so a reader paging by revision
 * never splits a tie). Deployment ids must be distinct (the caller checks).
 */
export async function putDesiredDeployments(
  sql: Sql,
  idOrName: string,
  items: readonly DesiredItem[],
  arriveBy: string,
): Promise<{ cluster_uid: string; first_revision: number; owner_session: string | null; recheck_owner: boolean } | null> {
  const { rows } = await sql.query<{ cluster_uid: string; first_revision: string; owner_session: string | null; recheck_owner: boolean }>(
    `with c as (select uid from clusters where (uid = $1 or name = $1) and wingsmith_arrived_by($4::timestamptz)),
     input as (
       select * from jsonb_to_recordset($2::jsonb)
         as x(deployment_id text, workload_id text, min_replicas int, max_replicas int, serving jsonb, ord int)
     ),
     rev as (
       update clusters set desired_revision = desired_revision + $3 where uid = (select uid from c)
       returning uid, desired_revision - $3 as before, disabled_at, token_hash
     ),
     up as (
       insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving, deleted, updated_at)
       select rev.uid, i.deployment_id, i.workload_id, rev.before + i.ord, i.min_replicas, i.max_replicas, i.serving, false, now()
       from input i, rev
       on conflict (cluster_uid, deployment_id) do update set workload_id = excluded.workload_id,
         revision = excluded.revision, min_replicas = excluded.min_replicas, max_replicas = excluded.max_replicas,
         serving = excluded.serving, deleted = false, updated_at = now()
       returning 1
     )
     select rev.uid as cluster_uid, rev.before + 1 as first_revision,
       ${POKED_OWNER} as owner_session, ${OWNER_RECHECK} as recheck_owner,
       (select count(*) from up) as written
     from rev`,
    [idOrName, JSON.stringify(items.map((d, i) => ({ ...d, ord: i + 1 }))), items.length, arriveBy],
    'wingsmith_put_desired_many_v4',
  );
  const r = rows[0];
  return r ? { cluster_uid: r.cluster_uid, first_revision: Number(r.first_revision), owner_session: r.owner_session, recheck_owner: r.recheck_owner === true } : null;
}

/** Withdraw: a tombstone with a new revision, so the owning session tells its operator. */
export async function withdrawDesiredDeployment(
  sql: Sql,
  idOrName: string,
  deploymentId: string,
  arriveBy: string,
): Promise<(DesiredWrite & { already: boolean; workload_id: string; min_replicas: number; max_replicas: number }) | null> {
  const { rows } = await sql.query<{
    cluster_uid: string;
    deployment_id: string;
    revision: string;
    already: boolean;
    workload_id: string;
    min_replicas: number;
    max_replicas: number;
    owner_session: string | null;
    recheck_owner: boolean;
  }>(
    // The cluster's row is locked first (the order every desired write takes: cluster, then
    // deployment), and the deployment is read FOR UPDATE: a PUT or DELETE of it that committed
    // while this waited is then read as it is now, not as the statement's snapshot had it. A
    // plain read would withdraw with the values before that PUT, or withdraw twice.
    `with c as (select uid from clusters where (uid = $1 or name = $1) and wingsmith_arrived_by($3::timestamptz) for update),
     d as (select cluster_uid, deployment_id, deleted, revision, workload_id, min_replicas, max_replicas from desired_deployments
           where cluster_uid = (select uid from c) and deployment_id = $2 for update),
     rev as (
       update clusters set desired_revision = desired_revision + 1
       where uid = (select cluster_uid from d where not deleted)
       returning uid, desired_revision, disabled_at, token_hash
     ),
     tomb as (
       update desired_deployments t set deleted = true, revision = rev.desired_revision, updated_at = now()
       from rev where t.cluster_uid = rev.uid and t.deployment_id = $2
       returning t.cluster_uid, t.deployment_id, t.revision
     )
     select d.cluster_uid, d.deployment_id, coalesce((select revision from tomb), d.revision) as revision,
            d.deleted as already, d.workload_id, d.min_replicas, d.max_replicas,
            ${POKED_OWNER} as owner_session, (exists (select 1 from rev) and ${OWNER_RECHECK}) as recheck_owner
     from d`,
    [idOrName, deploymentId, arriveBy],
    'wingsmith_withdraw_desired_v5',
  );
  const r = rows[0];
  return r ? { ...r, revision: Number(r.revision), recheck_owner: r.recheck_owner === true } : null;
}

export interface OperationCreated {
  operation_id: string;
  cluster_uid: string;
  revision: number;
  deadline: string;
  owner_session: string | null;
  /** As DesiredWrite's. */
  recheck_owner: boolean;
  /** Set when the idempotency key named an operation already started: nothing was written. */
  prior: { kind: string; target: string; params: Record<string, unknown> } | null;
}

export interface OperationRequest {
  operation_id: string;
  kind: string;
  target: string;
  params: Record<string, unknown>;
  deadline_s: number;
  idempotency_key?: string | null;
}

/**
 * Start an operation, or, when its idempotency key already started one on this cluster, return
 * that one and write nothing. Null: no such cluster, or (with a key) a request that raced another
 * with the same key: the conflict leaves nothing to return, and a second try sees the winner.
 */
export async function createOperation(sql: Sql, idOrName: string, op: OperationRequest, arriveBy: string): Promise<OperationCreated | null> {
  const { rows } = await sql.query<{
    operation_id: string;
    cluster_uid: string;
    revision: string;
    deadline: string;
    owner_session: string | null;
    recheck_owner: boolean;
    prior_kind: string | null;
    prior_target: string | null;
    prior_params: Record<string, unknown> | null;
  }>(
    `with c as (select uid from clusters where (uid = $1 or name = $1) and wingsmith_arrived_by($8::timestamptz)),
     prior as (
       select operation_id, cluster_uid, revision, ${iso('deadline')} as deadline, kind, target, params from operations
       where $7::text is not null and cluster_uid = (select uid from c) and idempotency_key = $7
     ),
     rev as (
       update clusters set desired_revision = desired_revision + 1
       where uid = (select uid from c) and not exists (select 1 from prior)
       returning uid, desired_revision, disabled_at, token_hash
     ),
     ins as (
       insert into operations (operation_id, cluster_uid, kind, target, params, deadline, revision, idempotency_key)
       select $2, uid, $3, $4, $5::jsonb, now() + make_interval(secs => $6::double precision), desired_revision, $7 from rev
       on conflict (cluster_uid, idempotency_key) where idempotency_key is not null do nothing
       returning operation_id, cluster_uid, revision, ${iso('deadline')} as deadline
     )
     select ins.*, ${POKED_OWNER} as owner_session, ${OWNER_RECHECK} as recheck_owner, null::text as prior_kind, null::text as prior_target, null::jsonb as prior_params from ins
     union all
     select operation_id, cluster_uid, revision, deadline, null, false, kind, target, params from prior`,
    [idOrName, op.operation_id, op.kind, op.target, JSON.stringify(op.params), op.deadline_s, op.idempotency_key ?? null, arriveBy],
    'wingsmith_create_operation_v6',
  );
  const r = rows[0];
  if (!r) return null;
  const prior = r.prior_kind !== null ? { kind: r.prior_kind, target: r.prior_target ?? '', params: r.prior_params ?? {} } : null;
  return { operation_id: r.operation_id, cluster_uid: r.cluster_uid, owner_session: r.owner_session, recheck_owner: r.recheck_owner === true, revision: Number(r.revision), deadline: r.deadline, prior };
}
