import type { OperationKind } from '../../protocol';
import { createOperation, POKED_OWNER, putDesiredDeployment, putDesiredDeployments, withdrawDesiredDeployment, type DesiredItem } from './desired-admin';
import type { DesiredChange } from './desired';
import { jsonbOrder } from './jsonb-order';
import type { Sql } from './sql';

/**
 * An admin write of desired state, as the Worker hands it to a gateway shard. `takenAt`: when the
 * Worker took it (its clock, ms), from which its wait bounds count, as a registry write's do from
 * the route: counted from the shard's receipt, a call held up on its way there could commit
 * after the Worker had answered 504 (and the caller repeated it, the later write then overwritten).
 */
export type DesiredWriteRequest = { takenAt?: number } & (
  | { op: 'put'; cluster: string; items: DesiredItem[] }
  | { op: 'withdraw'; cluster: string; deploymentId: string }
  | {
      op: 'operation';
      cluster: string;
      operation: {
        operation_id: string;
        kind: OperationKind;
        target: string;
        params: Record<string, string | number | boolean | null>;
        deadline_s: number;
        idempotency_key?: string | null;
      };
    }
);

export type DesiredWriteResult =
  | { op: 'put'; cluster_uid: string; revisions: number[] }
  | { op: 'withdraw'; cluster_uid: string; revision: number; already: boolean }
  | {
      op: 'operation';
      cluster_uid: string;
      operation_id: string;
      revision: number;
      deadline: string;
      /** The idempotency key named an operation already started: this is it, as it was asked for. */
      prior: { kind: string; target: string; params: Record<string, unknown> } | null;
    };

/** Who to tell, and what: the owning session and the changes themselves (it sends them without reading back). */
export interface OwnerPoke {
  clusterUid: string;
  ownerSession: string | null;
  revision: number;
  changes: DesiredChange[];
  /** The owner is looked up again once the write has committed, and poked too if it is another (desired-admin.ts OWNER_RECHECK). */
  recheck?: boolean;
}

/**
 * The session a write committed before this statement must poke: POKED_OWNER's conditions, read
 * from a snapshot taken after that commit, so it sees every claim the write's own snapshot missed.
 */
export async function currentOwner(sql: Sql, clusterUid: string): Promise<string | null> {
  const { rows } = await sql.query<{ session_id: string | null }>(
    `with rev as (select uid, disabled_at, token_hash from clusters where uid = $1)
     select ${POKED_OWNER} as session_id`,
    [clusterUid],
    'wingsmith_current_owner_v2',
  );
  return rows[0]?.session_id ?? null;
}

/**
 * The frames' content for deployments written in order from revision `first`: shaped as the same
 * revision read back from Postgres is (desired.ts), serving in jsonb's key order, so every path
 * sends one revision with the same bytes.
 */
export function putChanges(first: number, items: readonly DesiredItem[]): DesiredChange[] {
  return items.map((d, i) => {
    const revision = first + i;
    const payload = {
      deployment_id: d.deployment_id,
      workload_id: d.workload_id,
      revision,
      min_replicas: d.min_replicas,
      max_replicas: d.max_replicas,
      serving: jsonbOrder(d.serving),
      deleted: false,
    };
    return { kind: 'deployment', revision, payload };
  });
}

/**
 * Write deployments in one statement: the single-row statement for one, the set-based one for
 * more. Written only if it reaches Postgres by `arriveBy` (arrival.ts), as every desired write.
 */
export async function writeDeployments(sql: Sql, cluster: string, items: readonly DesiredItem[], arriveBy: string) {
  if (items.length === 1) {
    const w = await putDesiredDeployment(sql, cluster, items[0] as DesiredItem, arriveBy);
    return w ? { cluster_uid: w.cluster_uid, first_revision: w.revision, owner_session: w.owner_session, recheck_owner: w.recheck_owner } : null;
  }
  return putDesiredDeployments(sql, cluster, items, arriveBy);
}

/**
 * Run one admin write of desired state (one statement, one commit, the cluster's revision bumped)
 * and say which session to poke with which changes. Null: no such cluster (or deployment).
 */
export async function writeDesired(sql: Sql, req: DesiredWriteRequest, arriveBy: string): Promise<{ result: DesiredWriteResult; poke: OwnerPoke | null } | null> {
  if (req.op === 'put') {
    const w = await writeDeployments(sql, req.cluster, req.items, arriveBy);
    if (!w) return null;
    const [clusterUid, owner, first] = [w.cluster_uid, w.owner_session, w.first_revision];
    const changes = putChanges(first, req.items);
    const revisions = changes.map((c) => c.revision);
    return {
      result: { op: 'put', cluster_uid: clusterUid, revisions },
      poke: { clusterUid, ownerSession: owner, revision: first + req.items.length - 1, changes, recheck: w.recheck_owner === true },
    };
  }
  if (req.op === 'withdraw') {
    const w = await withdrawDesiredDeployment(sql, req.cluster, req.deploymentId, arriveBy);
    if (!w) return null;
    const result: DesiredWriteResult = { op: 'withdraw', cluster_uid: w.cluster_uid, revision: w.revision, already: w.already };
    if (w.already) return { result, poke: null };
    const payload = {
      deployment_id: req.deploymentId,
      workload_id: w.workload_id,
      revision: w.revision,
      min_replicas: w.min_replicas,
      max_replicas: w.max_replicas,
      serving: null,
      deleted: true,
    };
    return {
      result,
      poke: { clusterUid: w.cluster_uid, ownerSession: w.owner_session, revision: w.revision, changes: [{ kind: 'deployment', revision: w.revision, payload }], recheck: w.recheck_owner },
    };
  }
  const o = req.operation;
  // With a key, nothing back can mean a request with the same key committed first (the conflict
  // hides its row from this statement's snapshot): the next statement sees it.
  const created = (await createOperation(sql, req.cluster, o, arriveBy)) ?? (o.idempotency_key ? await createOperation(sql, req.cluster, o, arriveBy) : null);
  if (!created) return null;
  const base = { op: 'operation' as const, cluster_uid: created.cluster_uid, operation_id: created.operation_id, revision: created.revision, deadline: created.deadline };
  if (created.prior) return { result: { ...base, prior: created.prior }, poke: null };
  const payload = { operation_id: created.operation_id, kind: o.kind, target: o.target, params: o.params, deadline: created.deadline };
  return {
    result: { ...base, prior: null },
    poke: {
      clusterUid: created.cluster_uid,
      ownerSession: created.owner_session,
      revision: created.revision,
      changes: [{ kind: 'operation', revision: created.revision, payload }],
      recheck: created.recheck_owner,
    },
  };
}
