import type { Payload } from '../../protocol';
import { fenceCte } from './ownership';
import type { SessionFence } from './ingest';
import type { Sql } from './sql';

/** A change the owning session must put into its stream, in revision order. */
export type DesiredChange =
  | { kind: 'deployment'; revision: number; payload: Payload<'deployment.desired'> }
  | { kind: 'operation'; revision: number; payload: Payload<'operation.start'> };

interface ChangeRow {
  kind: 'deployment' | 'operation';
  revision: string;
  deployment_id: string | null;
  workload_id: string | null;
  min_replicas: number | null;
  max_replicas: number | null;
  serving: Payload<'deployment.desired'>['serving'];
  deleted: boolean | null;
  operation_id: string | null;
  op_kind: Payload<'operation.start'>['kind'] | null;
  target: string | null;
  params: Payload<'operation.start'>['params'] | null;
  deadline: string | null;
}

function toChange(r: ChangeRow): DesiredChange {
  const revision = Number(r.revision);
  if (r.kind === 'deployment') {
    return {
      kind: 'deployment',
      revision,
      payload: {
        deployment_id: r.deployment_id as string,
        workload_id: r.workload_id as string,
        revision,
        min_replicas: r.min_replicas as number,
        max_replicas: r.max_replicas as number,
        serving: r.deleted ? null : r.serving,
        deleted: r.deleted === true,
      },
    };
  }
  return {
    kind: 'operation',
    revision,
    payload: {
      operation_id: r.operation_id as string,
      kind: r.op_kind as Payload<'operation.start'>['kind'],
      target: r.target as string,
      params: r.params ?? {},
      deadline: new Date(r.deadline as string).toISOString(),
    },
  };
}

const DEPLOYMENT_COLS = `'deployment'::text as kind, revision, deployment_id, workload_id, min_replicas, max_replicas,
  serving, deleted, null::text as operation_id, null::text as op_kind, null::text as target, null::jsonb as params,
  null::timestamptz as deadline`;
// Named like DEPLOYMENT_COLS: used alone (open operations), an unaliased `kind` would overwrite
// the row's discriminator and leave `op_kind` empty.
const OPERATION_COLS = `'operation'::text as kind, revision, null::text as deployment_id, null::text as workload_id,
  null::int as min_replicas, null::int as max_replicas, null::jsonb as serving, null::boolean as deleted,
  operation_id, kind as op_kind, target, params, deadline`;

/** Everything above `after` (deployments, withdrawals, new operations), oldest revision first. */
export async function fetchDesiredChanges(sql: Sql, clusterUid: string, after: number, limit: number): Promise<DesiredChange[]> {
  const { rows } = await sql.query<ChangeRow>(
    `select * from (
       select ${DEPLOYMENT_COLS} from desired_deployments where cluster_uid = $1 and revision > $2
       union all
       select ${OPERATION_COLS} from operations
       where cluster_uid = $1 and revision > $2 and concluded_at is null and deadline > now()
     ) c order by revision limit $3`,
    [clusterUid, after, limit],
  );
  return rows.map(toChange);
}

/** One page of the hub's full-resync snapshot: live deployments by id. */
export async function fetchDesiredSnapshotPage(
  sql: Sql,
  clusterUid: string,
  after: string | null,
  limit: number,
): Promise<Extract<DesiredChange, { kind: 'deployment' }>[]> {
  const { rows } = await sql.query<ChangeRow>(
    `select ${DEPLOYMENT_COLS} from desired_deployments
     where cluster_uid = $1 and not deleted and ($2::text is null or deployment_id > $2)
     order by deployment_id limit $3`,
    [clusterUid, after, limit],
  );
  return rows.map(toChange) as Extract<DesiredChange, { kind: 'deployment' }>[];
}

/**
 * A fresh session's first snapshot page, and whether unconcluded operations up to its claimed
 * revision are owed, in one statement (claim-snapshot.ts). The flag's row carries the page
 * through a lateral join, so an empty snapshot still answers it.
 */
export async function fetchFirstSnapshotPage(
  sql: Sql,
  clusterUid: string,
  upToRevision: number,
  limit: number,
): Promise<{ deployments: Payload<'deployment.desired'>[]; openOperations: boolean }> {
  const { rows } = await sql.query<ChangeRow & { open_operations: boolean }>(
    `select d.*, o.open_operations
     from (select exists (select 1 from operations
                          where cluster_uid = $1 and revision <= $3 and concluded_at is null and deadline > now()) as open_operations) o
     left join lateral (
       select ${DEPLOYMENT_COLS} from desired_deployments
       where cluster_uid = $1 and not deleted order by deployment_id limit $2
     ) d on true
     order by d.deployment_id`,
    [clusterUid, limit, upToRevision],
    'wingsmith_first_page_v1',
  );
  return {
    deployments: rows.filter((r) => r.deployment_id !== null).map((r) => toChange(r).payload as Payload<'deployment.desired'>),
    openOperations: rows[0]?.open_operations === true,
  };
}

/**
 * Operations a fresh session must deliver again: outside the resync contract, an unconcluded
 * operation is never superseded by a snapshot. Redelivery is harmless (the operator dedupes).
 */
export async function fetchOpenOperations(
  sql: Sql,
  clusterUid: string,
  afterRevision: number,
  upToRevision: number,
  limit: number,
): Promise<Extract<DesiredChange, { kind: 'operation' }>[]> {
  const { rows } = await sql.query<ChangeRow>(
    `select ${OPERATION_COLS} from operations
     where cluster_uid = $1 and revision > $2 and revision <= $3 and concluded_at is null and deadline > now()
     order by revision limit $4`,
    [clusterUid, afterRevision, upToRevision, limit],
  );
  return rows.map(toChange) as Extract<DesiredChange, { kind: 'operation' }>[];
}

/** Record which start frames carried which operations, fenced by the session's claim. */
export async function markOperationsSent(
  sql: Sql,
  fence: SessionFence,
  sent: { operation_id: string; frame_id: string }[],
): Promise<boolean> {
  const { rows } = await sql.query<{ fenced: boolean }>(
    `with ${fenceCte({ cluster: '$1', session: '$2', generation: '$3', tokenHash: '$4' })},
     upd as (
       update operations o set
         state = case when o.state = 'pending' then 'sent' else o.state end,
         sent_at = coalesce(o.sent_at, now()),
         start_frame_ids = o.start_frame_ids || array[s.frame_id],
         updated_at = now()
       from jsonb_to_recordset($5::jsonb) as s(operation_id text, frame_id text)
       where o.operation_id = s.operation_id and o.cluster_uid = $1 and exists (select 1 from fence)
       returning 1
     )
     select exists (select 1 from fence) as fenced, (select count(*) from upd) as n`,
    [fence.clusterUid, fence.sessionId, fence.generation, fence.tokenHash, JSON.stringify(sent)],
  );
  return rows[0]?.fenced === true;
}
