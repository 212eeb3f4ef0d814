import type { Sql } from './sql';
import { connectedSql } from './connected-sql';
import { cappedCount } from './capped-count';

/**
 * The fleet at a glance, for the dashboard: per cluster the counts a person scans for (nodes,
 * GPUs by model, deployments in sync, recent rejections) and its connect/disconnect history over
 * a window, with fleet-wide totals, in one statement. Connection history comes from
 * connection_events (migration 0010), which a trigger on cluster_owners keeps.
 */

/** Timestamps leave as ISO 8601 UTC strings with milliseconds, whatever the driver's type parsing. */
const iso = (col: string) => `to_char(${col} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

/** A flapping cluster could write thousands of changes in a window; the strip needs the newest few hundred. */
export const MAX_CHANGES_PER_CLUSTER = 500;

export interface GpuModelCount {
  model: string;
  count: number;
  /** GPUs of this model whose reported health is not `healthy`. */
  unhealthy: number;
}

/**
 * Models listed per cluster and in the totals, at most. The operator names each GPU's model, one
 * per GPU if it likes: one enrollment token must not be able to make every dashboard's fleet
 * answer (all clusters' rows and the totals) megabytes long. The most numerous are listed; the
 * rest are summed in `gpus_other_models`.
 */
export const MAX_GPU_MODELS = 64;

/** The models left out of `gpus_by_model` (all zero when none were). */
export interface OtherGpuModels {
  models: number;
  count: number;
  unhealthy: number;
}

/**
 * `gpus`, `gpus_by_model` (the MAX_GPU_MODELS most numerous, listed by `order`) and
 * `gpus_other_models` over the devices `where` selects (on alias `d`), in one scan.
 */
export const gpuModelsSql = (where: string, order: 'model' | 'count'): string => `
  select coalesce(sum(g.n), 0) as gpus,
    coalesce(json_agg(json_build_object('model', g.model, 'count', g.n, 'unhealthy', g.bad)
      order by ${order === 'model' ? 'g.model' : 'g.n desc, g.model'}) filter (where g.rank <= ${MAX_GPU_MODELS}), '[]'::json) as gpus_by_model,
    json_build_object('models', count(*) filter (where g.rank > ${MAX_GPU_MODELS}),
      'count', coalesce(sum(g.n) filter (where g.rank > ${MAX_GPU_MODELS}), 0),
      'unhealthy', coalesce(sum(g.bad) filter (where g.rank > ${MAX_GPU_MODELS}), 0)) as gpus_other_models
  from (select d.model, count(*) as n, count(*) filter (where d.health <> 'healthy') as bad,
          row_number() over (order by count(*) desc, d.model) as rank
        from devices d where ${where} group by d.model) g`;

export interface ConnectionChange {
  at: string;
  connected: boolean;
}

export interface FleetCluster {
  uid: string;
  name: string;
  disabled: boolean;
  /** Connected now: the owner says so and polled within the staleness window. */
  connected: boolean;
  /** Since when `connected` has held: the last claim, the last disconnect, or the last sign of life. Null: never connected. */
  since: string | null;
  /** The region the operator reports (cluster.observed), if any. */
  region: string | null;
  last_frame_at: string | null;
  last_poll_at: string | null;
  nodes: number;
  nodes_ready: number;
  gpus: number;
  /** The MAX_GPU_MODELS most numerous models, by name. */
  gpus_by_model: GpuModelCount[];
  gpus_other_models: OtherGpuModels;
  deployments: { desired: number; in_sync: number; out_of_sync: number };
  rejections_1h: number;
  /** Deployments whose latest refusal by the operator (an error answering deployment.desired) came in the last hour. */
  refusals_1h: number;
  /** Of the session that last claimed the cluster. */
  operator_version: string | null;
  /** The claim keeps changing hands (the cluster view's contention, without its sessions). */
  contention: { since: string; last_at: string; displacements: number } | null;
  connections: {
    /** The state when the window opened (false when nothing was known then). */
    connected_at_start: boolean;
    /** Every claim (connected: true) and disconnect inside the window, oldest first. */
    changes: ConnectionChange[];
    /** True when changes were cut to the newest MAX_CHANGES_PER_CLUSTER. */
    truncated: boolean;
  };
}

export interface FleetTotals {
  clusters: number;
  connected: number;
  disabled: number;
  nodes: number;
  gpus: number;
  /** The MAX_GPU_MODELS most numerous models, most numerous first. */
  gpus_by_model: GpuModelCount[];
  gpus_other_models: OtherGpuModels;
  deployments: { desired: number; in_sync: number; out_of_sync: number };
  rejections_1h: number;
}

export interface FleetPage {
  window: { from: string; to: string; hours: number };
  /** Null when the caller did not ask for them (a later page of a walk that has them already). */
  totals: FleetTotals | null;
  items: FleetCluster[];
  /** The last uid of this page when more follow. */
  next: string | null;
}

interface FleetRow {
  now: string;
  window_from: string;
  t_clusters: string;
  t_connected: string;
  t_disabled: string;
  t_nodes: string;
  t_gpus: string;
  t_gpus_by_model: GpuModelCount[];
  t_gpus_other_models: OtherGpuModels;
  t_desired: string;
  t_in_sync: string;
  t_rejections_1h: string;
  uid: string | null;
  name: string;
  disabled: boolean;
  connected: boolean;
  since: string | null;
  region: string | null;
  last_frame_at: string | null;
  last_poll_at: string | null;
  nodes: string;
  nodes_ready: string;
  gpus: string;
  gpus_by_model: GpuModelCount[];
  gpus_other_models: OtherGpuModels;
  desired: string;
  in_sync: string;
  rejections_1h: string;
  refusals_1h: string;
  operator_version: string | null;
  contention: { since: string; last_at: string; displacements: string | number } | null;
  connected_at_start: boolean | null;
  changes: ConnectionChange[];
  change_count: string;
}

/** Live iff the owner says connected and polled within the staleness window ($1, ms), as the cluster view decides. */
const LIVE = connectedSql('o', '$1');

/** Fleet-wide totals: ten aggregates over every cluster, worth running once per walk, not per page. */
const TOTALS_SQL = `
  select
    (select count(*) from clusters) as t_clusters,
    (select count(*) from cluster_owners o where ${LIVE}) as t_connected,
    (select count(*) from clusters where disabled_at is not null) as t_disabled,
    (select count(*) from nodes) as t_nodes,
    tg.gpus as t_gpus, tg.gpus_by_model as t_gpus_by_model, tg.gpus_other_models as t_gpus_other_models,
    (select coalesce(sum(desired), 0) from insync) as t_desired,
    (select coalesce(sum(in_sync), 0) from insync) as t_in_sync,
    ${cappedCount("rejections where received_at > now() - interval '1 hour'")} as t_rejections_1h
  from (${gpuModelsSql('true', 'count')}) tg`;

const NO_TOTALS_SQL = `select null as t_clusters`;

/**
 * Deployments desired (not withdrawn) and in sync, by cluster, over the desired rows `where`
 * selects (on alias `d`). The totals count the whole fleet's once; a page without them counts
 * each listed cluster's by its uid (an index scan each), not by a join with the page, which the
 * planner answers by reading both tables whole whenever a few clusters own all the deployments.
 */
const syncSql = (where: string, byCluster: boolean): string => `
  select ${byCluster ? 'd.cluster_uid, ' : ''}count(*) as desired,
    count(*) filter (where od.observed_revision = d.revision) as in_sync
  from desired_deployments d
  left join observed_deployments od on od.cluster_uid = d.cluster_uid and od.deployment_id = d.deployment_id
  where not d.deleted and ${where}${byCluster ? ' group by d.cluster_uid' : ''}`;

const fleetSql = (withTotals: boolean) => `
-- The window ends at the start of the current minute: an unchanged fleet keeps its answer (and
-- its ETag) for a minute instead of a new one per statement.
with win as (select date_trunc('minute', now()) as now, date_trunc('minute', now()) - make_interval(hours => $2::int) as start),
page as (
  select c.uid, c.name, c.disabled_at from clusters c
  where ($3::text is null or c.uid > $3) order by c.uid limit $4
),
${withTotals ? `insync as (${syncSql('true', true)}),` : ''}
items as (
  select p.uid, p.name, p.disabled_at is not null as disabled,
    coalesce(${LIVE}, false) as connected,
    ${iso(`case
      when ${LIVE} then o.claimed_at
      when o.connected then o.polled_at
      else coalesce((select max(ce.at) from connection_events ce where ce.cluster_uid = p.uid and not ce.connected), o.polled_at)
    end`)} as since,
    oc.region,
    -- Only what the ingest statement records: the published live view's last_frame_at is the last
    -- sign of life (an answered ping, a resume's hello), which a session's check puts there too.
    ${iso('o.last_frame_at')} as last_frame_at,
    ${iso('o.polled_at')} as last_poll_at,
    (select count(*) from nodes n where n.cluster_uid = p.uid) as nodes,
    (select count(*) from nodes n where n.cluster_uid = p.uid and n.ready) as nodes_ready,
    gm.gpus, gm.gpus_by_model, gm.gpus_other_models,
    coalesce(s.desired, 0) as desired, coalesce(s.in_sync, 0) as in_sync,
    ${cappedCount("rejections r where r.cluster_uid = p.uid and r.received_at > now() - interval '1 hour'")} as rejections_1h,
    (select count(*) from desired_deployments dd where dd.cluster_uid = p.uid
       and (dd.last_refusal->>'at')::timestamptz > now() - interval '1 hour') as refusals_1h,
    o.operator_version,
    -- As the cluster view decides it ($5 contention window, $6 quiet period, ms); only a contended
    -- owner row reaches the count.
    (select case when count(*) = 0 then null else json_build_object('since', ${iso('o.contention_since')},
              'last_at', ${iso('o.contention_last_at')}, 'displacements', count(*)) end
       from cluster_displacements d
       where o.contention_since is not null
         and o.contention_last_at > now() - make_interval(secs => $6::double precision / 1000)
         and d.cluster_uid = p.uid
         and d.at >= o.contention_since - make_interval(secs => $5::double precision / 1000)) as contention,
    (select ce.connected from connection_events ce where ce.cluster_uid = p.uid and ce.at <= (select start from win)
       order by ce.at desc, ce.id desc limit 1) as connected_at_start,
    (select coalesce(json_agg(json_build_object('at', ${iso('x.at')}, 'connected', x.connected) order by x.at, x.id), '[]'::json)
       from (select ce.id, ce.at, ce.connected from connection_events ce
             where ce.cluster_uid = p.uid and ce.at > (select start from win)
             order by ce.at desc, ce.id desc limit ${MAX_CHANGES_PER_CLUSTER}) x) as changes,
    -- Only whether there are more than the listed ones: a cluster that reconnects in a loop has a row per change.
    ${cappedCount('connection_events ce where ce.cluster_uid = p.uid and ce.at > (select start from win)', MAX_CHANGES_PER_CLUSTER + 1)} as change_count
  from page p
  left join cluster_owners o on o.cluster_uid = p.uid
  left join observed_clusters oc on oc.cluster_uid = p.uid
  ${withTotals ? 'left join insync s on s.cluster_uid = p.uid' : `left join lateral (${syncSql('d.cluster_uid = p.uid', false)}) s on true`}
  cross join lateral (${gpuModelsSql('d.cluster_uid = p.uid', 'model')}) gm
),
totals as (${withTotals ? TOTALS_SQL : NO_TOTALS_SQL})
select ${iso('win.now')} as now, ${iso('win.start')} as window_from, t.*, i.*
from win cross join totals t left join items i on true
order by i.uid`;
const FLEET_SQL_TOTALS = fleetSql(true);
const FLEET_SQL_PAGE = fleetSql(false);

const n = (v: string | number): number => Number(v);

export async function readFleet(
  sql: Sql,
  opts: { staleAfterMs: number; hours: number; after: string | null; limit: number; totals: boolean; contention: { windowMs: number; quietMs: number } },
): Promise<FleetPage> {
  const { rows } = await sql.query<FleetRow>(opts.totals ? FLEET_SQL_TOTALS : FLEET_SQL_PAGE, [
    opts.staleAfterMs,
    opts.hours,
    opts.after,
    opts.limit + 1,
    opts.contention.windowMs,
    opts.contention.quietMs,
  ]);
  const first = rows[0];
  if (!first) throw new Error('fleet query returned no row');
  const hits = rows.filter((r) => r.uid !== null);
  const page = hits.slice(0, opts.limit);
  const sync = (desired: string, inSync: string) => ({ desired: n(desired), in_sync: n(inSync), out_of_sync: n(desired) - n(inSync) });
  return {
    window: { from: first.window_from, to: first.now, hours: opts.hours },
    totals: !opts.totals
      ? null
      : {
          clusters: n(first.t_clusters),
          connected: n(first.t_connected),
          disabled: n(first.t_disabled),
          nodes: n(first.t_nodes),
          gpus: n(first.t_gpus),
          gpus_by_model: first.t_gpus_by_model.map(countOf),
          gpus_other_models: otherOf(first.t_gpus_other_models),
          deployments: sync(first.t_desired, first.t_in_sync),
          rejections_1h: n(first.t_rejections_1h),
        },
    items: page.map(
      (r): FleetCluster => ({
        uid: r.uid as string,
        name: r.name,
        disabled: r.disabled,
        connected: r.connected,
        since: r.since,
        region: r.region,
        last_frame_at: r.last_frame_at,
        last_poll_at: r.last_poll_at,
        nodes: n(r.nodes),
        nodes_ready: n(r.nodes_ready),
        gpus: n(r.gpus),
        gpus_by_model: r.gpus_by_model.map(countOf),
        gpus_other_models: otherOf(r.gpus_other_models),
        deployments: sync(r.desired, r.in_sync),
        rejections_1h: n(r.rejections_1h),
        refusals_1h: n(r.refusals_1h),
        operator_version: r.operator_version,
        contention: r.contention === null ? null : { since: r.contention.since, last_at: r.contention.last_at, displacements: n(r.contention.displacements) },
        connections: {
          connected_at_start: r.connected_at_start === true,
          changes: r.changes,
          truncated: n(r.change_count) > r.changes.length,
        },
      }),
    ),
    next: hits.length > opts.limit ? (page[page.length - 1]?.uid ?? null) : null,
  };
}

const countOf = (g: GpuModelCount): GpuModelCount => ({ model: g.model, count: n(g.count), unhealthy: n(g.unhealthy) });
const otherOf = (o: OtherGpuModels): OtherGpuModels => ({ models: n(o.models), count: n(o.count), unhealthy: n(o.unhealthy) });

// ---------------------------------------------------------------------------------------------
// One cluster's connection history, newest first
// ---------------------------------------------------------------------------------------------

export interface ConnectionEventView {
  id: number;
  at: string;
  connected: boolean;
  session_id: string;
  generation: number;
}

interface ConnectionRow {
  id: string | null;
  at: string;
  connected: boolean;
  session_id: string;
  generation: string;
}

/**
 * Newest first by (at, id), the order of the table's one index after the cluster: a page reads
 * only its own rows. By id alone there is no index to walk within a cluster: the planner read all
 * of the cluster's week of rows and sorted them, or walked the primary key back through every
 * newer row of the other clusters (100,205 rows for a page of 201 beside a busy cluster:
 * test/hub/connections-read-cost.test.ts), every second the cluster view is open. The cursor
 * stays the last id shown: the page goes on from that row's place.
 */
export const CONNECTIONS_SQL = `
with cl as (select uid from clusters where uid = $1 or name = $1),
after as (select at, id from connection_events where id = $2::bigint),
page as (
  select t.id, t.at as at_raw, ${iso('t.at')} as at, t.connected, t.session_id, t.generation
  from connection_events t
  where t.cluster_uid = (select uid from cl)
    and ($2::bigint is null or (t.at, t.id) < (select at, id from after))
  order by t.at desc, t.id desc limit $3
)
select p.id, p.at, p.connected, p.session_id, p.generation from cl left join page p on true
order by p.at_raw desc, p.id desc`;

/** Null for an unknown cluster; `next` is the last id of the page when more follow. */
export async function listConnections(
  sql: Sql,
  idOrName: string,
  opts: { after: string | null; limit: number },
): Promise<{ items: ConnectionEventView[]; next: string | null } | null> {
  const { rows } = await sql.query<ConnectionRow>(CONNECTIONS_SQL, [idOrName, opts.after, opts.limit + 1]);
  if (rows.length === 0) return null;
  const hits = rows.filter((r) => r.id !== null);
  const page = hits.slice(0, opts.limit);
  return {
    items: page.map((r) => ({ id: n(r.id as string), at: r.at, connected: r.connected, session_id: r.session_id, generation: n(r.generation) })),
    next: hits.length > opts.limit ? String(page[page.length - 1]?.id ?? '') || null : null,
  };
}
