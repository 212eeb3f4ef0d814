import type { Payload } from '../../protocol';
import type { Sql } from './sql';
import { byteCut, CLUSTER_CTE, iso, num, numOrNull, toByteCutPage, toPage, type ByteCutRow, type KeyedPage, type PageRequest } from './read-paging';

export type { KeyedPage, PageRequest } from './read-paging';

/** The admin API's reads of a cluster's desired and observed state (deployments, nodes, GPUs). */
// ---------------------------------------------------------------------------------------------
// Deployments: desired and observed side by side
// ---------------------------------------------------------------------------------------------

type Serving = Payload<'deployment.desired'>['serving'];
type DeploymentPhase = Payload<'deployment.observed'>['phase'];

export interface DeploymentView {
  deployment_id: string;
  desired: {
    workload_id: string;
    revision: number;
    min_replicas: number;
    max_replicas: number;
    serving: Serving;
    deleted: boolean;
    updated_at: string;
  } | null;
  observed: {
    observed_revision: number | null;
    phase: DeploymentPhase;
    ready_replicas: number;
    message: string;
    replica_ids: string[];
    updated_at: string;
  } | null;
  in_sync: boolean;
  /** The operator's last refusal of this deployment's desired state (an error answering the frame). */
  last_refusal: { at: string; revision: number; code: string; message: string; seq: number; session_id: string } | null;
  refusals: number;
}

export type DeploymentKey = readonly [deployment_id: string];

interface DeploymentRow extends ByteCutRow {
  deployment_id: string | null;
  has_desired: boolean | null;
  workload_id: string | null;
  revision: string | null;
  min_replicas: number | null;
  max_replicas: number | null;
  serving: Serving;
  deleted: boolean | null;
  desired_updated_at: string | null;
  has_observed: boolean | null;
  observed_revision: string | null;
  phase: DeploymentPhase | null;
  ready_replicas: number | null;
  message: string | null;
  observed_updated_at: string | null;
  replica_ids: string[];
  in_sync: boolean | null;
  last_refusal: DeploymentView['last_refusal'];
  refusals: number | null;
}

/**
 * A full outer join of the two tables on deployment_id. Each side is cut to its first `limit`
 * keys after the cursor before the join: every key of the joined page's first `limit` is among
 * the first `limit` of each side that has it, so the cut changes nothing and both sides are read
 * by primary key range. Without `include_withdrawn` a tombstone counts as no desired entry (a
 * withdrawn deployment the operator still runs shows as observed with `desired: null`).
 *
 * The page is then cut in bytes too (byteCut): a deployment may carry thousands of replica ids.
 * Each row's size is estimated from its large parts (the replica ids, read by the primary key
 * index, the serving configuration, the messages) before any replica array is built, and the
 * arrays are built only for the rows kept.
 */
const DEPLOYMENTS_SQL = `
with ${CLUSTER_CTE},
d as (
  select t.* from desired_deployments t
  where t.cluster_uid = (select uid from cl) and ($2::boolean or not t.deleted)
    and ($3::text is null or t.deployment_id > $3)
  order by t.deployment_id limit $4
),
o as (
  select t.* from observed_deployments t
  where t.cluster_uid = (select uid from cl) and ($3::text is null or t.deployment_id > $3)
  order by t.deployment_id limit $4
),
page as (
  select coalesce(d.deployment_id, o.deployment_id) as deployment_id,
    d.deployment_id is not null as has_desired, d.workload_id, d.revision, d.min_replicas, d.max_replicas,
    d.serving, d.deleted, ${iso('d.updated_at')} as desired_updated_at,
    o.deployment_id is not null as has_observed, o.observed_revision, o.phase, o.ready_replicas, o.message,
    ${iso('o.updated_at')} as observed_updated_at,
    coalesce(o.observed_revision = d.revision and not d.deleted, false) as in_sync,
    d.last_refusal, d.refusals
  from d full outer join o on o.deployment_id = d.deployment_id
  order by 1 limit $4
),
sized as (
  select p.*,
    400 + octet_length(p.deployment_id) + coalesce(octet_length(p.workload_id), 0)
      + coalesce(octet_length(p.serving::text), 0) + coalesce(octet_length(p.message), 0)
      + coalesce(octet_length(p.last_refusal::text), 0)
      + case when p.has_observed then coalesce((
          select sum(octet_length(r.replica_id) + 4) from replicas r
          where r.cluster_uid = (select uid from cl) and r.deployment_id = p.deployment_id), 0)
        else 0 end as sz
  from page p
),
kept as (${byteCut('sized', 'deployment_id')})
select k.*, (select count(*) from page) as page_rows,
  -- Code-point order, so the set reads the same whatever the database's collation.
  array(select r.replica_id from replicas r
        where k.has_observed and r.cluster_uid = cl.uid and r.deployment_id = k.deployment_id
        order by r.replica_id collate "C") as replica_ids
from cl left join kept k on true
order by k.deployment_id`;

export async function listDeployments(
  sql: Sql,
  idOrName: string,
  opts: PageRequest<DeploymentKey> & { includeWithdrawn: boolean },
): Promise<KeyedPage<DeploymentView, DeploymentKey> | null> {
  const { rows } = await sql.query<DeploymentRow>(DEPLOYMENTS_SQL, [idOrName, opts.includeWithdrawn, opts.after?.[0] ?? null, opts.limit + 1]);
  return toByteCutPage(
    rows,
    opts.limit,
    (r) => r.deployment_id !== null,
    (r): DeploymentView => ({
      deployment_id: r.deployment_id as string,
      desired: r.has_desired
        ? {
            workload_id: r.workload_id as string,
            revision: num(r.revision as string),
            min_replicas: r.min_replicas as number,
            max_replicas: r.max_replicas as number,
            serving: r.serving,
            deleted: r.deleted === true,
            updated_at: r.desired_updated_at as string,
          }
        : null,
      observed: r.has_observed
        ? {
            observed_revision: numOrNull(r.observed_revision),
            phase: r.phase as DeploymentPhase,
            ready_replicas: r.ready_replicas as number,
            message: r.message as string,
            replica_ids: r.replica_ids,
            updated_at: r.observed_updated_at as string,
          }
        : null,
      in_sync: r.in_sync === true,
      last_refusal: r.last_refusal
        ? { ...r.last_refusal, revision: Number(r.last_refusal.revision), seq: Number(r.last_refusal.seq), at: new Date(r.last_refusal.at).toISOString() }
        : null,
      refusals: r.refusals ?? 0,
    }),
    (r) => [r.deployment_id as string] as const,
  );
}

// ---------------------------------------------------------------------------------------------
// Nodes and devices
// ---------------------------------------------------------------------------------------------

type NodeObserved = Payload<'node.observed'>;

export interface NodeView {
  node_id: string;
  name: string;
  ready: boolean;
  schedulable: boolean;
  labels: NodeObserved['labels'];
  taints: NodeObserved['taints'];
  allocatable: NodeObserved['allocatable'];
  /** GPUs reported on this node (device.observed with this node_id): compare with allocatable.gpus. */
  devices: number;
  updated_at: string;
}

export type NodeKey = readonly [node_id: string];

interface NodeRow extends ByteCutRow {
  node_id: string | null;
  name: string;
  ready: boolean;
  schedulable: boolean;
  labels: NodeObserved['labels'];
  taints: NodeObserved['taints'];
  // bigint columns: the driver returns them as strings (every count is at most 2^53 − 1, so
  // Number is exact).
  gpus: string;
  cpu_millis: string;
  memory_mb: string;
  devices: string;
  updated_at: string;
}

/** Cut in bytes too (byteCut): a node's labels and taints are each up to a frame. */
const NODES_SQL = `
with ${CLUSTER_CTE},
page as (
  select t.node_id, t.name, t.ready, t.schedulable, t.labels, t.taints, t.gpus, t.cpu_millis, t.memory_mb,
    ${iso('t.updated_at')} as updated_at,
    300 + octet_length(t.node_id) + octet_length(t.name) + octet_length(t.labels::text) + octet_length(t.taints::text) as sz
  from nodes t
  where t.cluster_uid = (select uid from cl) and ($2::text is null or t.node_id > $2)
  order by t.node_id limit $3
),
kept as (${byteCut('page', 'node_id')})
select k.*, (select count(*) from page) as page_rows,
  (select count(*) from devices dv where dv.cluster_uid = cl.uid and dv.node_id = k.node_id) as devices
from cl left join kept k on true
order by k.node_id`;

export async function listNodes(sql: Sql, idOrName: string, opts: PageRequest<NodeKey>): Promise<KeyedPage<NodeView, NodeKey> | null> {
  const { rows } = await sql.query<NodeRow>(NODES_SQL, [idOrName, opts.after?.[0] ?? null, opts.limit + 1]);
  return toByteCutPage(
    rows,
    opts.limit,
    (r) => r.node_id !== null,
    (r): NodeView => ({
      node_id: r.node_id as string,
      name: r.name,
      ready: r.ready,
      schedulable: r.schedulable,
      labels: r.labels,
      taints: r.taints,
      allocatable: { gpus: num(r.gpus), cpu_millis: num(r.cpu_millis), memory_mb: num(r.memory_mb) },
      devices: num(r.devices),
      updated_at: r.updated_at,
    }),
    (r) => [r.node_id as string] as const,
  );
}

type DeviceObserved = Payload<'device.observed'>;

export interface DeviceView {
  device_id: string;
  node_id: string;
  vendor: string;
  model: string;
  memory_total_mb: number;
  health: DeviceObserved['health'];
  driver_version: string;
  updated_at: string;
}

export type DeviceKey = readonly [device_id: string];

interface DeviceRow {
  device_id: string | null;
  node_id: string;
  vendor: string;
  model: string;
  memory_total_mb: string;
  health: DeviceObserved['health'];
  driver_version: string;
  updated_at: string;
}

const DEVICES_SQL = `
with ${CLUSTER_CTE},
page as (
  select t.device_id, t.node_id, t.vendor, t.model, t.memory_total_mb, t.health, t.driver_version,
    ${iso('t.updated_at')} as updated_at
  from devices t
  where t.cluster_uid = (select uid from cl) and ($2::text is null or t.node_id = $2)
    and ($3::text is null or t.device_id > $3)
  order by t.device_id limit $4
)
select p.* from cl left join page p on true
order by p.device_id`;

export async function listDevices(
  sql: Sql,
  idOrName: string,
  opts: PageRequest<DeviceKey> & { nodeId: string | null },
): Promise<KeyedPage<DeviceView, DeviceKey> | null> {
  const { rows } = await sql.query<DeviceRow>(DEVICES_SQL, [idOrName, opts.nodeId, opts.after?.[0] ?? null, opts.limit + 1]);
  return toPage(
    rows,
    opts.limit,
    (r) => r.device_id !== null,
    (r): DeviceView => ({
      device_id: r.device_id as string,
      node_id: r.node_id,
      vendor: r.vendor,
      model: r.model,
      memory_total_mb: num(r.memory_total_mb),
      health: r.health,
      driver_version: r.driver_version,
      updated_at: r.updated_at,
    }),
    (r) => [r.device_id as string] as const,
  );
}

