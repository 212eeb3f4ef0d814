import { z } from '@hono/zod-openapi';
import { routeKeyOf, sessionStub } from '../address';
import { connectedStaleAfterMs, hubConfig } from '../config';
import { withDeadline } from '../deadline';
import type { Sql } from '../db/sql';
import type { HubEnv } from '../env';
import { hintsWithin, LOCATION_HINTS, LocationHintSchema, placementHint } from '../region';
import { knownHint } from '../db/registry';
import type { LiveView } from '../session/live-view';
import { connectedSql } from '../db/connected-sql';
import { gpuModelsSql, MAX_GPU_MODELS } from '../db/fleet';
import { iso } from '../db/read-paging';
import { cappedCount, COUNT_CAP } from '../db/capped-count';
import { OtherGpuModels } from './gpu-models';

/**
 * A cluster as the admin API shows it: the registry row, the live session view (from the
 * session's last check, or asked of the session object itself), link drops, contention and the
 * operator's refusals, read in one statement.
 */

const SessionSchema = z
  .object({
    connected: z.boolean(),
    session_id: z.string(),
    generation: z.number(),
    claimed_at: z.string(),
    last_poll_at: z.string().nullable(),
    live: z.record(z.string(), z.unknown()).openapi({
      description:
        'the session object\'s view: hub_cursor, operator_cursor, last_sent_seq, replay_buffer_frames/bytes, send_queue_frames (frames waiting to be numbered, answers owed to the operator included), pending_apply, held_subjects, apply_statements_in_flight, last_frame_at, desired_watermark (the highest desired revision written into the session\'s stream: below desired_revision, changes not yet sent), operator_resyncs_open and operator_resync_open_since (the operator\'s own resync streams begun and not yet ended, and when the oldest began: one never ended is never pruned against), counters',
    }),
    source: z.enum(['object', 'poll']).openapi({ description: 'object: asked the session now; poll: its last ownership poll' }),
  })
  .openapi('Session');

const ContentionSchema = z
  .object({
    since: z.string(),
    last_at: z.string(),
    displacements: z.number().openapi({ description: 'claims taken from another connected session in this episode' }),
    sessions: z
      .array(z.object({ session_id: z.string(), remote_addr: z.string().nullable(), operator_version: z.string().nullable() }))
      .openapi({ description: 'the 10 newest sessions among the episode\'s 1,000 newest displacements, newest first' }),
  })
  .openapi('Contention', {
    description:
      'the claim of this cluster keeps changing hands (more than CONTENTION_THRESHOLD displacements within CONTENTION_WINDOW_MS): usually two operators running with one enrollment token; shown until CONTENTION_QUIET_MS without a displacement',
  });

const LinkSchema = z
  .object({
    epoch: z.string(),
    dropped_events: z.number(),
    evicted_frames: z.number(),
    replaced_frames: z.number(),
    handler_failures: z.number().nullable().openapi({ description: "the operator's transient failures to apply a hub frame (retried); null: not reported" }),
    dropped_progress: z.number().nullable().openapi({ description: 'operation.progress reports the operator dropped for want of room in its send queue; null: not reported' }),
    updated_at: z.string(),
  })
  .openapi('LinkStats');

export const HintSchema = LocationHintSchema.nullable().openapi({
  description:
    `where the cluster's new session objects are placed (a Durable Object location hint: ${LOCATION_HINTS.join(', ')}); ` +
    'null: near the first connection, as by default. Best effort, and fixed when an object is created: a change applies from ' +
    'the cluster\'s next connection, which starts a new session object (a fresh session with full resync). A deployment with ' +
    `a jurisdiction (HUB_JURISDICTION) refuses, with 400, a hint outside it, where its objects can never run: ` +
    `eu takes ${hintsWithin('eu').join(' and ')}; us, fedramp and fedramp-high take ${hintsWithin('us').join(' and ')}.`,
  example: 'weur',
});

const CountsSchema = z
  .object({
    nodes: z.number().int(),
    gpus: z.number().int(),
    gpus_by_model: z
      .array(z.object({ model: z.string(), count: z.number().int(), unhealthy: z.number().int() }))
      .openapi({ description: `by model name; the ${MAX_GPU_MODELS} most numerous models at most (the operator names them), the rest summed in gpus_other_models` }),
    gpus_other_models: OtherGpuModels,
    deployments: z.number().int().openapi({ description: 'rows of /deployments without include_withdrawn: desired (not withdrawn) or observed' }),
  })
  .openapi('ClusterCounts');

export const ClusterSchema = z
  .object({
    uid: z.string(),
    name: z.string(),
    region: z.string().nullable().openapi({ description: 'the region this hub serves (its HUB_REGION); null on the default deployment', example: 'eu' }),
    jurisdiction: z
      .string()
      .nullable()
      .openapi({ description: 'the Durable Object jurisdiction the cluster\'s session state is kept in; null: none', example: 'eu' }),
    location_hint: HintSchema,
    location_hint_ignored: LocationHintSchema.optional().openapi({
      description:
        'present only when the stored hint lies outside the jurisdiction (stored before the region had one): it is not used, and location_hint is null',
      example: 'wnam',
    }),
    created_at: z.string(),
    token_issued_at: z.string(),
    disabled: z.boolean(),
    disabled_at: z.string().nullable(),
    desired_revision: z.number().int(),
    operator_version: z.string().nullable().openapi({ description: 'of the session that last claimed the cluster' }),
    contention: ContentionSchema.nullable(),
    session: SessionSchema.nullable(),
    link: LinkSchema.nullable(),
    rejections: z.number().int().openapi({ description: `frames rejected in the retained history (30 days), counted up to ${COUNT_CAP}: ${COUNT_CAP} means at least that many` }),
    desired_refusals: z.number().openapi({ description: "the operator's refusals of desired state, over every deployment" }),
    observed_region: z.string().nullable().optional().openapi({
      description: 'the region the operator reports (cluster.observed), the same value as `region` of the cluster in /admin/fleet; null: not reported. Only in answers about one cluster, not in the list',
      example: 'us-east4',
    }),
    counts: CountsSchema.optional().openapi({ description: 'how many rows each of its lists holds in all, however many pages; only in answers about one cluster, not in the list' }),
  })
  .openapi('Cluster');
export type ClusterView = z.infer<typeof ClusterSchema>;

export interface ClusterViewRow {
  uid: string;
  name: string;
  location_hint: string | null;
  created_at: string;
  token_issued_at: string;
  disabled_at: string | null;
  desired_revision: string;
  session_id: string | null;
  generation: string | null;
  claimed_at: string | null;
  polled_at: string | null;
  connected: boolean | null;
  live: Record<string, unknown> | null;
  operator_version: string | null;
  contention: { since: string; last_at: string; displacements: string | number; sessions: NonNullable<ClusterView['contention']>['sessions'] } | null;
  epoch: string | null;
  dropped_events: string | null;
  evicted_frames: string | null;
  replaced_frames: string | null;
  handler_failures: string | null;
  dropped_progress: string | null;
  link_updated_at: string | null;
  rejections: string;
  desired_refusals: string;
}

/** The newest sessions of a contention episode a cluster view names… */
const CONTENTION_SESSIONS = 10;
/** …found among its newest displacements (a few sessions displacing each other make all of them). */
const CONTENTION_ROWS_READ = 1_000;

// $1 stale-after ms, $2 contention window ms, $3 contention quiet ms; filters start at $4. Times
// leave as text made in SQL (read-paging.ts `iso`): the driver parses timestamptz only in
// DateStyle ISO, and the database's default may be another.
export const VIEW_SQL = `
  select c.uid, c.name, c.location_hint, ${iso('c.created_at')} as created_at, ${iso('c.token_issued_at')} as token_issued_at,
    ${iso('c.disabled_at')} as disabled_at, c.desired_revision,
    o.session_id, o.generation, ${iso('o.claimed_at')} as claimed_at, ${iso('o.polled_at')} as polled_at,
    ${connectedSql('o', '$1')} as connected,
    o.live, o.operator_version,
    ct.contention,
    ls.epoch, ls.dropped_events, ls.evicted_frames, ls.replaced_frames, ls.handler_failures, ls.dropped_progress, ${iso('ls.updated_at')} as link_updated_at,
    ${cappedCount('rejections r where r.cluster_uid = c.uid')} as rejections,
    (select coalesce(sum(refusals), 0) from desired_deployments dd where dd.cluster_uid = c.uid) as desired_refusals
  from clusters c
  left join cluster_owners o on o.cluster_uid = c.uid
  left join link_stats ls on ls.cluster_uid = c.uid
  left join lateral (
    -- Not materialized: counted by its index, and the sessions read from its newest rows only.
    -- Anyone holding the cluster's token can displace in a loop, a row each time, kept a day; the
    -- view named every session of the episode and the Worker kept ten, so a day of that made the
    -- answer larger than an RPC carries (a disable committed, then answered 500).
    with episode as not materialized (
      select * from cluster_displacements d
      where o.contention_since is not null
        and o.contention_last_at > now() - make_interval(secs => $3::double precision / 1000)
        and d.cluster_uid = c.uid
        and d.at >= o.contention_since - make_interval(secs => $2::double precision / 1000)
    ), newest as (
      select * from episode order by at desc limit ${CONTENTION_ROWS_READ}
    ), sessions as (
      select * from (
        select distinct on (session_id) session_id, remote_addr, operator_version, at from (
          select from_session as session_id, from_remote_addr as remote_addr, from_operator_version as operator_version, at from newest
          union all
          select to_session, to_remote_addr, to_operator_version, at from newest
        ) x order by session_id, at desc
      ) s order by at desc limit ${CONTENTION_SESSIONS}
    )
    select case when count(*) = 0 then null else jsonb_build_object(
      'since', ${iso('o.contention_since')}, 'last_at', ${iso('o.contention_last_at')}, 'displacements', count(*),
      'sessions', (select jsonb_agg(jsonb_build_object('session_id', session_id, 'remote_addr', remote_addr,
                                                      'operator_version', operator_version) order by at desc) from sessions))
      end as contention
    from episode
  ) ct on true`;

/** A page of the cluster list, by uid: $4 the last uid of the previous page (null: the first), $5 the row limit. */
export const LIST_SQL = `${VIEW_SQL} where ($4::text is null or c.uid > $4) order by c.uid limit $5`;

/**
 * One cluster's view plus what only a single-cluster answer carries: the operator's own region
 * and the size of each list, so a client that shows a capped number of pages still reports the
 * real totals. Wrapped around VIEW_SQL rather than added to it, so the list route (500 clusters a
 * page, polled by the dashboard) does not pay for four more aggregates per row.
 */
const ONE_SQL = `
  select v.*,
    (select oc.region from observed_clusters oc where oc.cluster_uid = v.uid) as observed_region,
    (select count(*) from nodes n where n.cluster_uid = v.uid) as n_nodes,
    gm.gpus as n_gpus, gm.gpus_by_model, gm.gpus_other_models,
    (select count(*) from (
       select dd.deployment_id from desired_deployments dd where dd.cluster_uid = v.uid and not dd.deleted
       union
       select od.deployment_id from observed_deployments od where od.cluster_uid = v.uid) x) as n_deployments
  from (${VIEW_SQL} where c.uid = $4 or c.name = $4) v
  cross join lateral (${gpuModelsSql('d.cluster_uid = v.uid', 'model')}) gm`;

interface OneClusterRow extends ClusterViewRow {
  observed_region: string | null;
  n_nodes: string;
  n_gpus: string;
  gpus_by_model: { model: string; count: string | number; unhealthy: string | number }[];
  gpus_other_models: { models: string | number; count: string | number; unhealthy: string | number };
  n_deployments: string;
}

export function toView(r: ClusterViewRow, env: HubEnv): ClusterView {
  const cfg = hubConfig(env);
  // The hint the connect route actually creates objects with (connect.ts logs the one it ignores).
  const placement = placementHint(knownHint(r.location_hint), cfg.HUB_JURISDICTION);
  return {
    uid: r.uid,
    name: r.name,
    region: cfg.HUB_REGION ?? null,
    jurisdiction: cfg.HUB_JURISDICTION ?? null,
    location_hint: placement.hint,
    ...(placement.ignored ? { location_hint_ignored: placement.ignored } : {}),
    created_at: r.created_at,
    token_issued_at: r.token_issued_at,
    disabled: r.disabled_at !== null,
    disabled_at: r.disabled_at,
    desired_revision: Number(r.desired_revision),
    operator_version: r.operator_version,
    contention:
      r.contention === null
        ? null
        : {
            since: r.contention.since,
            last_at: r.contention.last_at,
            displacements: Number(r.contention.displacements),
            sessions: r.contention.sessions,
          },
    session:
      r.session_id === null
        ? null
        : {
            connected: r.connected === true,
            session_id: r.session_id,
            generation: Number(r.generation),
            claimed_at: r.claimed_at as string,
            last_poll_at: r.polled_at,
            live: r.live ?? {},
            source: 'poll',
          },
    link:
      r.epoch === null
        ? null
        : {
            epoch: r.epoch,
            dropped_events: Number(r.dropped_events),
            evicted_frames: Number(r.evicted_frames),
            replaced_frames: Number(r.replaced_frames),
            handler_failures: r.handler_failures === null ? null : Number(r.handler_failures),
            dropped_progress: r.dropped_progress === null ? null : Number(r.dropped_progress),
            updated_at: r.link_updated_at as string,
          },
    rejections: Number(r.rejections),
    desired_refusals: Number(r.desired_refusals),
  };
}

/** VIEW_SQL's first parameters: a connection is live if its session polled within three poll intervals. */
export function viewParams(env: HubEnv): [number, number, number] {
  const cfg = hubConfig(env);
  return [connectedStaleAfterMs(cfg), cfg.CONTENTION_WINDOW_MS, cfg.CONTENTION_QUIET_MS];
}

export async function clusterView(sql: Sql, env: HubEnv, idOrName: string): Promise<ClusterView | null> {
  const { rows } = await sql.query<OneClusterRow>(ONE_SQL, [...viewParams(env), idOrName]);
  const r = rows[0];
  if (!r) return null;
  return {
    ...toView(r, env),
    observed_region: r.observed_region,
    counts: {
      nodes: Number(r.n_nodes),
      gpus: Number(r.n_gpus),
      gpus_by_model: r.gpus_by_model.map((g) => ({ model: g.model, count: Number(g.count), unhealthy: Number(g.unhealthy) })),
      gpus_other_models: { models: Number(r.gpus_other_models.models), count: Number(r.gpus_other_models.count), unhealthy: Number(r.gpus_other_models.unhealthy) },
      deployments: Number(r.n_deployments),
    },
  };
}

/** The session object's own view, fresher than its last poll; null if it does not answer quickly. */
export async function askSession(env: HubEnv, clusterUid: string, sessionId: string): Promise<LiveView | null> {
  const key = routeKeyOf(sessionId);
  if (!key) return null;
  const stub = sessionStub(env, { clusterUid, routeKey: key });
  try {
    const view = await withDeadline(stub.status(), 2_000, () => null);
    return view && view.session_id === sessionId ? (view as LiveView) : null;
  } catch {
    return null;
  }
}

