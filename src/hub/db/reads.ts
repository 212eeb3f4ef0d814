import type { OperationKind, Payload, SEVERITIES } from '../../protocol';
import type { Sql } from './sql';

/**
 * The admin API's reads of a cluster's observed and desired state and of operations: one
 * statement each. Every per-cluster read resolves the cluster (uid or name) in the same statement
 * and returns no row at all for an unknown cluster, so "no such cluster" and "an empty page" are
 * told apart without a second round trip: `null` means the former.
 *
 * Pages are keyset pages: the statement fetches one row more than asked, and the key of the
 * last returned row becomes the next page's lower bound.
 */

export interface KeyedPage<T, K> {
  items: T[];
  /** The key of the last item when more follow, else null. */
  next: K | null;
}

export interface PageRequest<K> {
  after: K | null;
  limit: number;
}

const CLUSTER_CTE = `cl as (select uid from clusters where uid = $1 or name = $1)`;

/** Timestamps leave as ISO 8601 UTC strings with milliseconds, the same whatever the driver's type parsing. */
const iso = (col: string) => `to_char(${col} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
/**
 * A timestamp that is part of a key keeps Postgres' full (microsecond) precision: a key rounded to
 * milliseconds would make the next page skip or repeat rows written within the same millisecond.
 */
const keyTs = (col: string) => `to_char(${col} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;

/**
 * Rows come from `cl left join page on true`: none when the cluster is unknown, one row with a
 * null key when the page is empty, else up to limit + 1 rows.
 */
function toPage<R, T, K>(
  rows: R[],
  limit: number,
  present: (r: R) => boolean,
  item: (r: R) => T,
  key: (r: R) => K,
): KeyedPage<T, K> | null {
  if (rows.length === 0) return null;
  const hits = rows.filter(present);
  const page = hits.slice(0, limit);
  const last = page[page.length - 1];
  return { items: page.map(item), next: hits.length > limit && last !== undefined ? key(last) : null };
}

const num = (v: string | number): number => Number(v);
const numOrNull = (v: string | number | null): number | null => (v === null ? null : Number(v));

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

interface DeploymentRow {
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
)
select p.*,
  -- Code-point order, so the set reads the same whatever the database's collation.
  array(select r.replica_id from replicas r
        where p.has_observed and r.cluster_uid = cl.uid and r.deployment_id = p.deployment_id
        order by r.replica_id collate "C") as replica_ids
from cl left join page p on true
order by p.deployment_id`;

export async function listDeployments(
  sql: Sql,
  idOrName: string,
  opts: PageRequest<DeploymentKey> & { includeWithdrawn: boolean },
): Promise<KeyedPage<DeploymentView, DeploymentKey> | null> {
  const { rows } = await sql.query<DeploymentRow>(DEPLOYMENTS_SQL, [idOrName, opts.includeWithdrawn, opts.after?.[0] ?? null, opts.limit + 1]);
  return toPage(
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

interface NodeRow {
  node_id: string | null;
  name: string;
  ready: boolean;
  schedulable: boolean;
  labels: NodeObserved['labels'];
  taints: NodeObserved['taints'];
  gpus: number;
  cpu_millis: string;
  memory_mb: string;
  devices: string;
  updated_at: string;
}

const NODES_SQL = `
with ${CLUSTER_CTE},
page as (
  select t.node_id, t.name, t.ready, t.schedulable, t.labels, t.taints, t.gpus, t.cpu_millis, t.memory_mb,
    ${iso('t.updated_at')} as updated_at
  from nodes t
  where t.cluster_uid = (select uid from cl) and ($2::text is null or t.node_id > $2)
  order by t.node_id limit $3
)
select p.*, (select count(*) from devices dv where dv.cluster_uid = cl.uid and dv.node_id = p.node_id) as devices
from cl left join page p on true
order by p.node_id`;

export async function listNodes(sql: Sql, idOrName: string, opts: PageRequest<NodeKey>): Promise<KeyedPage<NodeView, NodeKey> | null> {
  const { rows } = await sql.query<NodeRow>(NODES_SQL, [idOrName, opts.after?.[0] ?? null, opts.limit + 1]);
  return toPage(
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
      allocatable: { gpus: r.gpus, cpu_millis: num(r.cpu_millis), memory_mb: num(r.memory_mb) },
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

// ---------------------------------------------------------------------------------------------
// Events and rejections: history, newest first
// ---------------------------------------------------------------------------------------------

export const EVENT_KINDS = ['node', 'device', 'deployment'] as const;
export type EventKind = (typeof EVENT_KINDS)[number];

export interface EventView {
  frame_id: string;
  kind: EventKind;
  subject: string;
  reason: string;
  message: string;
  severity: (typeof SEVERITIES)[number];
  occurred_at: string;
  received_at: string;
  session_id: string;
  seq: number;
}

/** Newest first by arrival at the hub, then by frame id (a batch shares one arrival time). */
export type EventKey = readonly [received_at: string, frame_id: string];

interface EventRow extends Omit<EventView, 'seq' | 'frame_id'> {
  frame_id: string | null;
  seq: string;
  k_received_at: string;
}

const EVENTS_SQL = `
with ${CLUSTER_CTE},
page as (
  select t.frame_id, t.kind, t.subject, t.reason, t.message, t.severity, ${iso('t.occurred_at')} as occurred_at,
    ${iso('t.received_at')} as received_at, t.session_id, t.seq, ${keyTs('t.received_at')} as k_received_at
  from events t
  where t.cluster_uid = (select uid from cl)
    and ($2::text is null or t.kind = $2) and ($3::text is null or t.subject = $3)
    and ($4::timestamptz is null or (t.received_at, t.frame_id) < ($4::timestamptz, $5::text))
  order by t.received_at desc, t.frame_id desc limit $6
)
select p.* from cl left join page p on true
order by p.k_received_at desc, p.frame_id desc`;

export async function listEvents(
  sql: Sql,
  idOrName: string,
  opts: PageRequest<EventKey> & { kind: EventKind | null; subject: string | null },
): Promise<KeyedPage<EventView, EventKey> | null> {
  const { rows } = await sql.query<EventRow>(EVENTS_SQL, [
    idOrName,
    opts.kind,
    opts.subject,
    opts.after?.[0] ?? null,
    opts.after?.[1] ?? null,
    opts.limit + 1,
  ]);
  return toPage(
    rows,
    opts.limit,
    (r) => r.frame_id !== null,
    (r): EventView => ({
      frame_id: r.frame_id as string,
      kind: r.kind,
      subject: r.subject,
      reason: r.reason,
      message: r.message,
      severity: r.severity,
      occurred_at: r.occurred_at,
      received_at: r.received_at,
      session_id: r.session_id,
      seq: num(r.seq),
    }),
    (r) => [r.k_received_at, r.frame_id as string] as const,
  );
}

export interface RejectionView {
  id: number;
  session_id: string;
  seq: number;
  frame_id: string | null;
  type: string;
  reason: string;
  received_at: string;
}

/** Newest first by the table's serial id (its insertion order). */
export type RejectionKey = readonly [id: string];

interface RejectionRow {
  id: string | null;
  session_id: string;
  seq: string;
  frame_id: string | null;
  type: string;
  reason: string;
  received_at: string;
}

const REJECTIONS_SQL = `
with ${CLUSTER_CTE},
page as (
  select t.id, t.session_id, t.seq, t.frame_id, t.type, t.reason, ${iso('t.received_at')} as received_at
  from rejections t
  where t.cluster_uid = (select uid from cl) and ($2::bigint is null or t.id < $2)
  order by t.id desc limit $3
)
select p.* from cl left join page p on true
order by p.id desc`;

export async function listRejections(
  sql: Sql,
  idOrName: string,
  opts: PageRequest<RejectionKey>,
): Promise<KeyedPage<RejectionView, RejectionKey> | null> {
  const { rows } = await sql.query<RejectionRow>(REJECTIONS_SQL, [idOrName, opts.after?.[0] ?? null, opts.limit + 1]);
  return toPage(
    rows,
    opts.limit,
    (r) => r.id !== null,
    (r): RejectionView => ({
      id: num(r.id as string),
      session_id: r.session_id,
      seq: num(r.seq),
      frame_id: r.frame_id,
      type: r.type,
      reason: r.reason,
      received_at: r.received_at,
    }),
    (r) => [String(r.id)] as const,
  );
}

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

/** The stored states, plus `deadline_exceeded`, which is computed at read time and never stored. */
export const OPERATION_STATES = [
  'pending',
  'sent',
  'accepted',
  'running',
  'succeeded',
  'failed',
  'cancelled',
  'deadline_exceeded',
] as const;
export type OperationState = (typeof OPERATION_STATES)[number];

export const OPERATION_EVENT_KINDS = ['accepted', 'progress', 'result', 'error'] as const;

export interface OperationView {
  operation_id: string;
  cluster_uid: string;
  kind: OperationKind;
  target: string;
  params: Payload<'operation.start'>['params'];
  deadline: string;
  state: OperationState;
  outcome_message: string | null;
  created_at: string;
  sent_at: string | null;
  accepted_at: string | null;
  concluded_at: string | null;
}

export interface OperationHistoryEntry {
  frame_id: string;
  kind: (typeof OPERATION_EVENT_KINDS)[number];
  /** progress: the phase; result: the outcome; error: the error code. */
  phase: string | null;
  message: string;
  at: string;
  seq: number | null;
}

export interface OperationDetail extends OperationView {
  history: OperationHistoryEntry[];
}

/** Newest first by creation, then by id. */
export type OperationKey = readonly [created_at: string, operation_id: string];

interface OperationRow extends Omit<OperationView, 'operation_id'> {
  operation_id: string | null;
  k_created_at: string;
}

// An operation past its deadline with no conclusion is shown, not stored, as deadline_exceeded:
// a late result still concludes it (the hub records what the operator reports), and the state a
// client sees is computed against the database's clock in the same statement.
const OPERATION_COLS = `o.operation_id, o.cluster_uid, o.kind, o.target, o.params, ${iso('o.deadline')} as deadline,
  case when o.concluded_at is null and o.deadline < now() then 'deadline_exceeded' else o.state end as state,
  o.outcome_message, ${iso('o.created_at')} as created_at, ${iso('o.sent_at')} as sent_at,
  ${iso('o.accepted_at')} as accepted_at, ${iso('o.concluded_at')} as concluded_at`;

function toOperation(r: OperationRow): OperationView {
  return {
    operation_id: r.operation_id as string,
    cluster_uid: r.cluster_uid,
    kind: r.kind,
    target: r.target,
    params: r.params,
    deadline: r.deadline,
    state: r.state,
    outcome_message: r.outcome_message,
    created_at: r.created_at,
    sent_at: r.sent_at,
    accepted_at: r.accepted_at,
    concluded_at: r.concluded_at,
  };
}

/**
 * History in the order the operator reported it: by arrival time, then by the operator's seq
 * (frames applied in one batch share an arrival time, and seq is their order on the wire even if
 * the operator's frame ids are not monotonic), then by frame id.
 */
const OPERATION_SQL = `
select ${OPERATION_COLS},
  coalesce((
    select jsonb_agg(jsonb_build_object('frame_id', e.frame_id, 'kind', e.kind, 'phase', e.phase,
      'message', e.message, 'at', ${iso('e.at')}, 'seq', e.seq) order by e.at, e.seq, e.frame_id)
    from operation_events e where e.operation_id = o.operation_id
  ), '[]'::jsonb) as history
from operations o where o.operation_id = $1`;

export async function getOperation(sql: Sql, operationId: string): Promise<OperationDetail | null> {
  const { rows } = await sql.query<OperationRow & { history: OperationHistoryEntry[] }>(OPERATION_SQL, [operationId]);
  const r = rows[0];
  return r ? { ...toOperation(r), history: r.history } : null;
}

const OPERATIONS_SQL = `
with ${CLUSTER_CTE},
page as (
  select ${OPERATION_COLS}, ${keyTs('o.created_at')} as k_created_at
  from operations o
  where o.cluster_uid = (select uid from cl)
    and ($2::timestamptz is null or (o.created_at, o.operation_id) < ($2::timestamptz, $3::text))
  order by o.created_at desc, o.operation_id desc limit $4
)
select p.* from cl left join page p on true
order by p.k_created_at desc, p.operation_id desc`;

export async function listOperations(
  sql: Sql,
  idOrName: string,
  opts: PageRequest<OperationKey>,
): Promise<KeyedPage<OperationView, OperationKey> | null> {
  const { rows } = await sql.query<OperationRow>(OPERATIONS_SQL, [idOrName, opts.after?.[0] ?? null, opts.after?.[1] ?? null, opts.limit + 1]);
  return toPage(
    rows,
    opts.limit,
    (r) => r.operation_id !== null,
    toOperation,
    (r) => [r.k_created_at, r.operation_id as string] as const,
  );
}
