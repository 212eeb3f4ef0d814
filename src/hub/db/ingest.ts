import type { IngestBatch, IngestResult, SessionFence } from './ingest-types';
import { DEPLOYMENT_COLUMNS, DEVICE_COLUMNS, EVENT_COLUMNS, NODE_COLUMNS, deploymentRow, deviceRow, eventRow, json, nodeRow, positional } from './ingest-rows';
import { fenceCte } from './ownership';
import type { Sql } from './sql';

export type * from './ingest-types';


/**
 * What every ingest statement opens with: the claim's fence, the restore check, and the owner
 * row's count of this session's committed ingest statements (migration 0027) with the fleet
 * view's "last frame". `counted` is the count the session object knows committed: a database
 * holding less went back (restored from a backup) under a live session, which writes nothing
 * then (`went_back`: the session is cut for a full resync; the claim refuses to resume it).
 *
 * The fence locks the owner row for the write from the start: taken FOR SHARE and upgraded by the
 * write, it could deadlock with a fenced statement of the session's desired side (it holds the
 * row FOR SHARE and then updates an operation row this statement's reports may have locked
 * first). A claim or another fenced write of the cluster waits for this statement, as a claim did.
 */
function head(counted: string): string {
  return `with ${fenceCte({ cluster: '$1', session: '$2', generation: '$3', tokenHash: '$4', columns: 'o.ingest_commits', lock: 'for no key update of o for share of c' })},
went_back as (select coalesce((select ingest_commits < ${counted}::bigint from fence), false) as yes),
live as (select exists (select 1 from fence) and not (select yes from went_back) as ok),
seen as (
  update cluster_owners o set ingest_commits = o.ingest_commits + 1, last_frame_at = now() from live
  where live.ok and o.cluster_uid = $1
  returning o.ingest_commits
)`;
}

/** The result's columns every ingest statement ends with; the full one adds its counts. */
const TAIL = 'select (select ok from live) as fenced, (select yes from went_back) as went_back, (select ingest_commits from seen) as commits';

/**
 * The four row tables' writes, each reading one parameter (its number in the full statement):
 * self-contained, so a statement can carry only the ones a batch has rows for (`leanIngestSql`).
 */
interface RowSection {
  key: 'nodes' | 'devices' | 'deployments' | 'events';
  /** Its letter in a lean statement's prepared name (Postgres keeps 63 bytes of a name). */
  letter: 'n' | 'd' | 'p' | 'e';
  param: number;
  sql: string;
  /** The batch's rows of this table as that parameter's text. */
  encode(b: IngestBatch): string;
}
const NODE_ROWS: RowSection = {
  key: 'nodes',
  encode: (b) => json(b.nodes, nodeRow),
  letter: 'n',
  param: 6,
  sql: `n_in as (${positional('$6', NODE_COLUMNS)}),
n_up as (
  insert into nodes (cluster_uid, node_id, name, ready, schedulable, labels, taints, gpus, cpu_millis, memory_mb, obs_session, obs_seq, updated_at)
  select $1, node_id, name, ready, schedulable, labels, taints, gpus, cpu_millis, memory_mb, $2, seq, now()
  from n_in, live where live.ok
  on conflict (cluster_uid, node_id) do update set name = excluded.name, ready = excluded.ready,
    schedulable = excluded.schedulable, labels = excluded.labels, taints = excluded.taints, gpus = excluded.gpus,
    cpu_millis = excluded.cpu_millis, memory_mb = excluded.memory_mb, obs_session = excluded.obs_session,
    obs_seq = excluded.obs_seq, updated_at = now()
  returning 1
)`,
};
const DEVICE_ROWS: RowSection = {
  key: 'devices',
  encode: (b) => json(b.devices, deviceRow),
  letter: 'd',
  param: 8,
  sql: `dv_in as (${positional('$8', DEVICE_COLUMNS)}),
dv_up as (
  insert into devices (cluster_uid, device_id, node_id, vendor, model, memory_total_mb, health, driver_version, obs_session, obs_seq, updated_at)
  select $1, device_id, node_id, vendor, model, memory_total_mb, health, driver_version, $2, seq, now()
  from dv_in, live where live.ok
  on conflict (cluster_uid, device_id) do update set node_id = excluded.node_id, vendor = excluded.vendor,
    model = excluded.model, memory_total_mb = excluded.memory_total_mb, health = excluded.health,
    driver_version = excluded.driver_version, obs_session = excluded.obs_session, obs_seq = excluded.obs_seq,
    updated_at = now()
  returning 1
)`,
};
const DEPLOYMENT_ROWS: RowSection = {
  key: 'deployments',
  encode: (b) => json(b.deployments, deploymentRow),
  letter: 'p',
  param: 10,
  // The replica set is replaced with each deployment.observed: its rows come with the deployment's.
  sql: `dp_in as (${positional('$10', DEPLOYMENT_COLUMNS)}),
dp_up as (
  insert into observed_deployments (cluster_uid, deployment_id, observed_revision, phase, ready_replicas, message, obs_session, obs_seq, updated_at)
  select $1, deployment_id, observed_revision, phase, ready_replicas, message, $2, seq, now()
  from dp_in, live where live.ok
  on conflict (cluster_uid, deployment_id) do update set observed_revision = excluded.observed_revision,
    phase = excluded.phase, ready_replicas = excluded.ready_replicas, message = excluded.message,
    obs_session = excluded.obs_session, obs_seq = excluded.obs_seq, updated_at = now()
  returning 1
),
rp_in as (
  select d.deployment_id, r.replica_id from dp_in d cross join lateral jsonb_array_elements_text(d.replica_ids) as r(replica_id)
),
rp_add as (
  insert into replicas (cluster_uid, deployment_id, replica_id)
  select $1, deployment_id, replica_id from rp_in, live where live.ok
  on conflict do nothing
  returning 1
),
rp_drop as (
  delete from replicas t using dp_in d, live
  where live.ok and t.cluster_uid = $1 and t.deployment_id = d.deployment_id
    and not exists (select 1 from rp_in r where r.deployment_id = t.deployment_id and r.replica_id = t.replica_id)
  returning 1
)`,
};
const EVENT_ROWS: RowSection = {
  key: 'events',
  encode: (b) => json(b.events, eventRow),
  letter: 'e',
  param: 12,
  sql: `ev_in as (${positional('$12', EVENT_COLUMNS)}),
ev_add as (
  insert into events (cluster_uid, frame_id, kind, subject, reason, message, severity, occurred_at, session_id, seq)
  select $1, frame_id, kind, subject, reason, message, severity, occurred_at, $2, seq
  from ev_in, live
  where live.ok
  on conflict (cluster_uid, frame_id) do nothing
  returning 1
)`,
};
const ROW_SECTIONS: readonly RowSection[] = [NODE_ROWS, DEVICE_ROWS, DEPLOYMENT_ROWS, EVENT_ROWS];

/**
 * Apply one batch of observed state in one statement: every table the batch touches, the
 * replica-set replacement, events, link counters, operation progress, rejections and resync
 * prunes, all fenced by the session's claim. Data-modifying CTEs all see the same snapshot, so
 * a prune explicitly spares the subjects this very batch writes.
 */
export const INGEST_SQL = `
${head('$19')},

cl_in as (
  select * from jsonb_to_recordset($5::jsonb)
    as x(kubernetes_version text, provider text, region text, labels jsonb, seq bigint)
),
cl_up as (
  insert into observed_clusters (cluster_uid, kubernetes_version, provider, region, labels, obs_session, obs_seq, updated_at)
  select $1, kubernetes_version, provider, region, labels, $2, seq, now() from cl_in, live where live.ok
  on conflict (cluster_uid) do update set kubernetes_version = excluded.kubernetes_version,
    provider = excluded.provider, region = excluded.region, labels = excluded.labels,
    obs_session = excluded.obs_session, obs_seq = excluded.obs_seq, updated_at = now()
  returning 1
),

${NODE_ROWS.sql},
n_gone as (select jsonb_array_elements_text($7::jsonb) as node_id),
n_del as (
  delete from nodes t using live where live.ok and t.cluster_uid = $1 and t.node_id in (select node_id from n_gone)
  returning 1
),

${DEVICE_ROWS.sql},
dv_gone as (select jsonb_array_elements_text($9::jsonb) as device_id),
dv_del as (
  delete from devices t using live where live.ok and t.cluster_uid = $1 and t.device_id in (select device_id from dv_gone)
  returning 1
),

${DEPLOYMENT_ROWS.sql},
dp_gone as (select jsonb_array_elements_text($11::jsonb) as deployment_id),
dp_del as (
  delete from observed_deployments t using live
  where live.ok and t.cluster_uid = $1 and t.deployment_id in (select deployment_id from dp_gone)
  returning 1
),
rp_del as (
  delete from replicas t using live
  where live.ok and t.cluster_uid = $1 and t.deployment_id in (select deployment_id from dp_gone)
  returning 1
),

${EVENT_ROWS.sql},

ls_up as (
  insert into link_stats (cluster_uid, epoch, dropped_events, evicted_frames, replaced_frames, handler_failures, dropped_progress, updated_at)
  select $1, epoch, dropped_events, evicted_frames, replaced_frames, handler_failures, dropped_progress, now()
  from jsonb_to_recordset($13::jsonb)
    as x(epoch text, dropped_events bigint, evicted_frames bigint, replaced_frames bigint, handler_failures bigint, dropped_progress bigint), live
  where live.ok
  on conflict (cluster_uid) do update set epoch = excluded.epoch, dropped_events = excluded.dropped_events,
    evicted_frames = excluded.evicted_frames, replaced_frames = excluded.replaced_frames,
    handler_failures = excluded.handler_failures, dropped_progress = excluded.dropped_progress, updated_at = now()
  returning 1
),

oe_in as (
  select coalesce(x.operation_id, o.operation_id) as operation_id, x.frame_id, x.kind, x.phase, x.message, x.seq
  from jsonb_to_recordset($15::jsonb)
    as x(operation_id text, reply_to text, frame_id text, kind text, phase text, message text, seq bigint)
  left join operations o on x.operation_id is null and o.cluster_uid = $1 and o.start_frame_ids @> array[x.reply_to]
),
oe_add as (
  insert into operation_events (operation_id, frame_id, kind, phase, message, session_id, seq)
  select e.operation_id, e.frame_id, e.kind, e.phase, e.message, $2, e.seq
  from oe_in e join operations o on o.operation_id = e.operation_id and o.cluster_uid = $1, live
  where live.ok
  on conflict do nothing
  returning 1
),
op_raw as (
  select operation_id, accepted, progressed, outcome, message, outcome_seq as ord
  from jsonb_to_recordset($14::jsonb) as x(operation_id text, accepted boolean, progressed boolean, outcome text, message text, outcome_seq bigint)
  union all
  -- An error answering an operation.start concludes it as failed (e.g. a deadline it cannot meet);
  -- it is a refusal, not an acceptance.
  select operation_id, false, false, 'failed', 'operator error ' || coalesce(phase, '') || ': ' || message, seq
  from oe_in where kind = 'error' and operation_id is not null
),
-- Within a batch as across batches, the first concluding frame (by seq) concludes.
op_first as (
  select operation_id, bool_or(accepted) as accepted, bool_or(progressed) as progressed,
    (array_agg(outcome order by ord) filter (where outcome is not null))[1] as outcome,
    (array_agg(message order by ord) filter (where outcome is not null))[1] as message,
    min(ord) filter (where outcome is not null) as outcome_ord
  from op_raw group by operation_id
),
-- took: the operator took the operation on (accepted it, reported progress, or ran it to a
-- result). It counts only frames up to the concluding one: what follows a conclusion (a result after
-- a refusal, in this batch or a later one) changes none of its timestamps.
op_agg as (
  select f.*, exists (select 1 from oe_in e where e.operation_id = f.operation_id and e.kind <> 'error'
                      and (f.outcome_ord is null or e.seq <= f.outcome_ord)) as took
  from op_first f
),
op_up as (
  update operations p set
    accepted_at = case when a.took and p.concluded_at is null then coalesce(p.accepted_at, now()) else p.accepted_at end,
    state = case
      when p.concluded_at is not null then p.state
      when a.outcome is not null then a.outcome
      when a.progressed then 'running'
      when a.accepted and p.state in ('pending', 'sent') then 'accepted'
      else p.state end,
    outcome_message = case when p.concluded_at is null and a.outcome is not null then a.message else p.outcome_message end,
    concluded_at = case when p.concluded_at is null and a.outcome is not null then now() else p.concluded_at end,
    updated_at = now()
  from op_agg a, live
  where live.ok and p.operation_id = a.operation_id and p.cluster_uid = $1
  returning 1
),

-- A frame about an operation this cluster does not have can never apply: a rejection, answered.
op_unknown as (
  select e.seq, e.frame_id, 'operation.' || e.kind as type,
    'operation ' || left(e.operation_id, 200) || ' is not known for this cluster' as reason
  from oe_in e
  where e.kind <> 'error'
    and not exists (select 1 from operations o where o.operation_id = e.operation_id and o.cluster_uid = $1)
),
rj_add as (
  insert into rejections (cluster_uid, session_id, seq, frame_id, type, reason)
  select $1, $2, r.seq, r.frame_id, r.type, r.reason
  from (
    select seq, frame_id, type, reason from jsonb_to_recordset($16::jsonb) as x(seq bigint, frame_id text, type text, reason text)
    union all
    select seq, frame_id, type, reason from op_unknown
  ) r, live
  where live.ok
  on conflict (cluster_uid, session_id, seq) do nothing
  returning seq
),

-- The operator's refusals of desired state: the last one per deployment, and a count.
-- A refusal applied past a hole is applied again when the operator replays it after a resume
-- (delivery is at-least-once), so each is counted once: last_refusal names the session and seq
-- of the last one counted, and within a session a deployment's refusals apply in seq order
-- (they share one ordering key), so one at or below it from the same session was counted.
dr_new as (
  select x.deployment_id, x.revision, x.code, x.message, x.seq
  from jsonb_to_recordset($18::jsonb) as x(deployment_id text, revision bigint, code text, message text, seq bigint)
  join desired_deployments d on d.cluster_uid = $1 and d.deployment_id = x.deployment_id
  where d.last_refusal is null or d.last_refusal->>'session_id' is distinct from $2::text
    or (d.last_refusal->>'seq')::bigint < x.seq
),
dr_in as (
  select deployment_id, count(*) as n,
    (array_agg(jsonb_build_object('revision', revision, 'code', code, 'message', message, 'seq', seq) order by seq desc))[1] as last
  from dr_new
  group by deployment_id
),
dr_up as (
  update desired_deployments d
  set last_refusal = r.last || jsonb_build_object('at', now(), 'session_id', $2), refusals = d.refusals + r.n
  from dr_in r, live
  where live.ok and d.cluster_uid = $1 and d.deployment_id = r.deployment_id
  returning r.n
),

pr as (select * from jsonb_to_recordset($17::jsonb) as x(kind text, begin_seq bigint)),
pr_cluster as (
  delete from observed_clusters t using pr, live
  where live.ok and pr.kind = 'cluster' and t.cluster_uid = $1
    and not (t.obs_session = $2 and t.obs_seq > pr.begin_seq) and not exists (select 1 from cl_in)
  returning 1
),
pr_nodes as (
  delete from nodes t using pr, live
  where live.ok and pr.kind = 'node' and t.cluster_uid = $1
    and not (t.obs_session = $2 and t.obs_seq > pr.begin_seq)
    and t.node_id not in (select node_id from n_in) and t.node_id not in (select node_id from n_gone)
  returning 1
),
pr_devices as (
  delete from devices t using pr, live
  where live.ok and pr.kind = 'device' and t.cluster_uid = $1
    and not (t.obs_session = $2 and t.obs_seq > pr.begin_seq)
    and t.device_id not in (select device_id from dv_in) and t.device_id not in (select device_id from dv_gone)
  returning 1
),
pr_deployments as (
  delete from observed_deployments t using pr, live
  where live.ok and pr.kind = 'deployment' and t.cluster_uid = $1
    and not (t.obs_session = $2 and t.obs_seq > pr.begin_seq)
    and t.deployment_id not in (select deployment_id from dp_in) and t.deployment_id not in (select deployment_id from dp_gone)
  returning t.deployment_id
),
pr_replicas as (
  delete from replicas t using live
  where live.ok and t.cluster_uid = $1 and t.deployment_id in (select deployment_id from pr_deployments)
  returning 1
)
${TAIL},
  (select count(*) from pr_cluster) + (select count(*) from pr_nodes) + (select count(*) from pr_devices)
    + (select count(*) from pr_deployments) as pruned,
  (select coalesce(jsonb_agg(jsonb_build_object('seq', seq, 'frame_id', frame_id, 'type', type, 'reason', reason)), '[]'::jsonb)
   from op_unknown) as unknown_ops,
  -- What this statement counted for the first time (a replayed frame was counted before).
  (select count(*) from rj_add where seq in (select seq from op_unknown)) as unknown_ops_recorded,
  (select coalesce(sum(n), 0) from dr_up) as refusals_counted
`;

/** Prepared once per connection (bump the suffix when the text changes). */
const INGEST_STATEMENT = 'wingsmith_ingest_v11';

/** The full statement's parameters for one batch, in order ($1…$19). */
export function ingestParams(fence: SessionFence, b: IngestBatch): unknown[] {
  return [
    fence.clusterUid,
    fence.sessionId,
    fence.generation,
    fence.tokenHash,
    json(b.cluster ? [b.cluster] : []),
    NODE_ROWS.encode(b),
    json(b.nodeDeletes),
    DEVICE_ROWS.encode(b),
    json(b.deviceDeletes),
    DEPLOYMENT_ROWS.encode(b),
    json(b.deploymentDeletes),
    EVENT_ROWS.encode(b),
    json(b.linkStats ? [b.linkStats] : []),
    json(b.operationUpdates),
    json(b.operationEvents),
    json(b.rejections),
    json(b.prunes),
    json(b.desiredRefusals),
    fence.ingestCommits ?? 0,
  ];
}

/**
 * The row tables a batch can be written with alone, or null when it needs the full statement:
 * anything beside rows (a cluster report, a delete, link counters, operations, rejections,
 * refusals, a prune, which must also see the rows it spares) takes the full one.
 *
 * Every ingest statement is planned and started whole, so the full one pays for its seventeen
 * other writes even when they read `[]`: a fifth to a third of Postgres's CPU for a statement
 * of 100–400 rows (bench/MICRO.md). A steady stream of observed rows needs none of them. The lean
 * statements are at most fifteen (one per non-empty subset of the four tables), so a connection
 * prepares a bounded number of them whatever an operator sends.
 */
export function leanSections(b: IngestBatch): readonly RowSection[] | null {
  if (b.cluster !== null || b.linkStats !== null) return null;
  if (b.nodeDeletes.length + b.deviceDeletes.length + b.deploymentDeletes.length > 0) return null;
  if (b.operationUpdates.length + b.operationEvents.length + b.rejections.length + b.prunes.length + b.desiredRefusals.length > 0) return null;
  const present = ROW_SECTIONS.filter((s) => b[s.key].length > 0);
  return present.length > 0 ? present : null;
}

/** The lean statement for these row sections: the full one's writes, renumbered, nothing else. */
export function leanIngestSql(sections: readonly RowSection[]): string {
  const parts = sections.map((s, i) => s.sql.replace(new RegExp(`\\$${s.param}(?!\\d)`, 'g'), `$${5 + i}`));
  const n = 5 + sections.length;
  return `\n${head(`$${n}`)},\n\n${parts.join(',\n\n')}\n${TAIL}, 0 as pruned, '[]'::jsonb as unknown_ops\n`;
}

const LEAN_STATEMENT = 'wingsmith_ingest_rows_v3';
const leanCache = new Map<string, string>();

/** The statement for a batch: its text, its parameters and its prepared name. */
export function ingestStatement(fence: SessionFence, b: IngestBatch): { text: string; params: unknown[]; name: string } {
  const sections = leanSections(b);
  if (sections === null) return { text: INGEST_SQL, params: ingestParams(fence, b), name: INGEST_STATEMENT };
  const key = sections.map((s) => s.letter).join('');
  let text = leanCache.get(key);
  if (text === undefined) {
    text = leanIngestSql(sections);
    leanCache.set(key, text);
  }
  return {
    text,
    params: [fence.clusterUid, fence.sessionId, fence.generation, fence.tokenHash, ...sections.map((s) => s.encode(b)), fence.ingestCommits ?? 0],
    name: `${LEAN_STATEMENT}_${key}`,
  };
}

interface IngestRow {
  fenced: boolean;
  went_back: boolean;
  commits: string | number | null;
  pruned: string | number;
  unknown_ops: IngestResult['unknownOperations'] | null;
  /** Only from the full statement: a lean one carries neither an operation frame nor a refusal. */
  unknown_ops_recorded?: string | number;
  refusals_counted?: string | number;
}

export async function applyIngestBatch(sql: Sql, fence: SessionFence, b: IngestBatch): Promise<IngestResult> {
  const statement = ingestStatement(fence, b);
  const { rows } = await sql.query<IngestRow>(statement.text, statement.params, statement.name);
  const r = rows[0];
  const fenced = r?.fenced === true;
  const result: IngestResult = {
    fenced,
    pruned: Number(r?.pruned ?? 0),
    unknownOperations: fenced ? (r?.unknown_ops ?? []).map((u) => ({ ...u, seq: Number(u.seq) })) : [],
  };
  if (r?.went_back === true) result.wentBack = true;
  if (fenced && r?.commits !== null && r?.commits !== undefined) result.commits = Number(r.commits);
  if (fenced && r?.unknown_ops_recorded !== undefined) result.unknownOperationsRecorded = Number(r.unknown_ops_recorded);
  if (fenced && r?.refusals_counted !== undefined) result.desiredRefusalsCounted = Number(r.refusals_counted);
  return result;
}
