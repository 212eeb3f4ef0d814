import { createRoute, z } from '@hono/zod-openapi';
import { connectedStaleAfterMs, hubConfig } from '../config';
import { listConnections, MAX_GPU_MODELS, readFleet } from '../db/fleet';
import { COUNT_CAP } from '../db/capped-count';
import { jsonError } from '../http-errors';
import { OtherGpuModels } from './gpu-models';
import { adminRouter, commonResponses, errorResponse, TimestampSchema as Timestamp } from './app';
import { ClusterIdParam } from './clusters';
import { cursorCodec, KeyBigint, KeyText, LimitParam, pageRequest } from './paging';

/** Reads made for the dashboard: the fleet at a glance, and a cluster's connection history. */

const GpuModelCount = z
  .object({
    model: z.string(),
    count: z.number().int(),
    unhealthy: z.number().int().openapi({ description: 'GPUs of this model whose health is not healthy' }),
  })
  .openapi('GpuModelCount');


const SyncCounts = z
  .object({
    desired: z.number().int().openapi({ description: 'desired deployments (withdrawn ones excluded)' }),
    in_sync: z.number().int().openapi({ description: 'of those, observed at the desired revision' }),
    out_of_sync: z.number().int(),
  })
  .openapi('SyncCounts');

const FleetCluster = z
  .object({
    uid: z.string(),
    name: z.string(),
    disabled: z.boolean(),
    connected: z.boolean().openapi({ description: 'a session owns the cluster, is connected, and was heard from recently (its own check, or a sweep of the fleet poll it answered)' }),
    since: Timestamp.nullable().openapi({
      description: 'since when `connected` has held (the last connect, or the last disconnect or sign of life); null: never connected',
    }),
    region: z.string().nullable().openapi({ description: "the region the operator reports (cluster.observed); not the hub's own region, which is `region` in /admin/clusters (that cluster's `observed_region` is this value)" }),
    last_frame_at: Timestamp.nullable().openapi({
      description: 'when the owning session last applied a frame from its operator (kept to the second); pings the runtime answers for an idle session do not count',
    }),
    last_poll_at: Timestamp.nullable(),
    nodes: z.number().int(),
    nodes_ready: z.number().int(),
    gpus: z.number().int(),
    gpus_by_model: z.array(GpuModelCount).openapi({ description: `by model name; the ${MAX_GPU_MODELS} most numerous models at most (the operator names them), the rest summed in gpus_other_models` }),
    gpus_other_models: OtherGpuModels,
    deployments: SyncCounts,
    rejections_1h: z.number().int().openapi({ description: `frames rejected in the last hour, counted up to ${COUNT_CAP}: ${COUNT_CAP} means at least that many` }),
    refusals_1h: z.number().int().openapi({ description: "deployments whose latest refusal by the operator (an error answering deployment.desired) came in the last hour" }),
    operator_version: z.string().nullable().openapi({ description: 'of the session that last claimed the cluster' }),
    contention: z
      .object({ since: Timestamp, last_at: Timestamp, displacements: z.number().int() })
      .nullable()
      .openapi({ description: "the claim keeps changing hands, as the cluster view's `contention` (whose `sessions` name who); null: no episode" }),
    connections: z.object({
      connected_at_start: z.boolean().openapi({ description: 'the state when the window opened' }),
      changes: z.array(z.object({ at: Timestamp, connected: z.boolean() })).openapi({
        description: 'every connect (a session claimed the cluster) and disconnect inside the window, oldest first',
      }),
      truncated: z.boolean().openapi({ description: 'only the newest changes are listed' }),
    }),
  })
  .openapi('FleetCluster');

const FleetSchema = z
  .object({
    window: z
      .object({ from: Timestamp, to: Timestamp, hours: z.number().int() })
      .openapi({ description: 'the connection-history window; it ends at the start of the current minute' }),
    totals: z
      .object({
        clusters: z.number().int(),
        connected: z.number().int(),
        disabled: z.number().int(),
        nodes: z.number().int(),
        gpus: z.number().int(),
        gpus_by_model: z.array(GpuModelCount).openapi({ description: `across the fleet, most numerous first; the ${MAX_GPU_MODELS} most numerous models at most, the rest summed in gpus_other_models` }),
        gpus_other_models: OtherGpuModels,
        deployments: SyncCounts,
        rejections_1h: z.number().int().openapi({ description: `counted up to ${COUNT_CAP}, as each cluster's` }),
      })
      .nullable()
      .openapi({ description: 'over the whole fleet, whichever page this is; null when asked with totals=false' }),
    items: z.array(FleetCluster),
    next_cursor: z.string().nullable().openapi({ description: 'pass as ?cursor= for the next page; null on the last page' }),
  })
  .openapi('Fleet');

const ConnectionEvent = z
  .object({
    id: z.number().int(),
    at: Timestamp,
    connected: z.boolean().openapi({ description: 'true: a session claimed the cluster (connect or resume); false: its connection ended' }),
    session_id: z.string(),
    generation: z.number().int(),
  })
  .openapi('ConnectionEvent');

const fleetCursor = cursorCodec<readonly [string]>('fl', z.tuple([KeyText]));
const connectionCursor = cursorCodec<readonly [string]>('cn', z.tuple([KeyBigint]));

export const fleetRouter = adminRouter()
  .openapi(
    createRoute({
      method: 'get',
      path: '/fleet',
      summary: 'Every cluster at a glance (state, GPUs by model, deployments in sync, rejections, connection history) with fleet totals',
      request: {
        query: z.strictObject({
          hours: z.coerce.number().int().min(1).max(168).default(6).openapi({ description: 'the connection-history window, in hours' }),
          limit: LimitParam,
          cursor: fleetCursor.param,
          totals: z
            .enum(['true', 'false'])
            .default('true')
            .openapi({
              description:
                'false: leave out the fleet-wide totals (`totals: null`), which cost ten aggregates over the whole fleet; a client walking every page needs them once, not per page',
            }),
        }),
      },
      responses: {
        ...commonResponses,
        200: { description: 'a page of clusters by uid, with totals over the whole fleet', content: { 'application/json': { schema: FleetSchema } } },
        400: errorResponse('invalid query parameter (the field is named)'),
      },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const req = pageRequest(fleetCursor, q);
      const cfg = hubConfig(c.env);
      const page = await readFleet(c.var.pg, {
        // The same staleness rule as the cluster view: three poll intervals without a poll.
        staleAfterMs: connectedStaleAfterMs(cfg),
        hours: q.hours,
        after: req.after?.[0] ?? null,
        limit: req.limit,
        totals: q.totals === 'true',
        contention: { windowMs: cfg.CONTENTION_WINDOW_MS, quietMs: cfg.CONTENTION_QUIET_MS },
      });
      const { next, ...rest } = page;
      return c.json({ ...rest, next_cursor: next === null ? null : fleetCursor.encode([next]) }, 200);
    },
  )
  .openapi(
    createRoute({
      method: 'get',
      path: '/clusters/{id}/connections',
      summary: "This cluster's connects and disconnects, newest first (kept for a week)",
      request: { params: ClusterIdParam, query: z.strictObject({ limit: LimitParam, cursor: connectionCursor.param }) },
      responses: {
        ...commonResponses,
        200: {
          description: 'a page, newest first',
          content: {
            'application/json': {
              schema: z.object({ items: z.array(ConnectionEvent), next_cursor: z.string().nullable() }).openapi('ConnectionEventPage'),
            },
          },
        },
        400: errorResponse('invalid query parameter (the field is named)'),
        404: errorResponse('no such cluster'),
      },
    }),
    async (c) => {
      const req = pageRequest(connectionCursor, c.req.valid('query'));
      const page = await listConnections(c.var.pg, c.req.valid('param').id, { after: req.after?.[0] ?? null, limit: req.limit });
      if (!page) return jsonError(c, 404, 'not_found', 'no such cluster') as never;
      return c.json({ items: page.items, next_cursor: page.next === null ? null : connectionCursor.encode([page.next]) }, 200);
    },
  );
