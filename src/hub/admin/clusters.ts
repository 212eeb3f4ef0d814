import { createRoute, z } from '@hono/zod-openapi';
import { ulid } from 'ulid';
import { hubConfig } from '../config';
import { CLUSTER_NAME_RE, createCluster, knownHint, rotateToken, setDisabled, setLocationHint, type ClusterRow } from '../db/registry';
import type { Sql } from '../db/sql';
import type { HubEnv } from '../env';
import { jsonError } from '../http-errors';
import { hintOutsideJurisdiction, placementHint, type LocationHint } from '../region';
import { generateEnrollmentToken, hashToken, toHex } from '../tokens';
import { adminRouter, commonResponses, errorResponse } from './app';
import { gatewaySql } from '../db/gateway-client';
import { arrivalDeadline } from '../db/arrival';
import { askSession, ClusterSchema, clusterView, HintSchema, LIST_SQL, viewParams, toView, type ClusterView, type ClusterViewRow } from './cluster-view';
import { cursorCodec, KeyText, LimitParam } from './paging';
import { cutLiveSession } from './revoke';

/**
 * Refused here, not by Postgres: text cannot hold U+0000, so such an id can never name a cluster,
 * and binding it would cost a round trip and come back as a database refusal without the field.
 * A 400 naming `id`, as an id over the length limit is.
 */
export const ClusterIdParam = z.object({
  id: z
    .string()
    .min(1)
    .max(253)
    .refine((s) => !s.includes('\0'), { message: 'a cluster uid or name never contains U+0000' })
    .openapi({ description: 'the cluster uid or name', example: 'gpu-east-1' }),
});

/** What a route with a cluster {id} answers for one that can never name a cluster. */
export const badClusterId = errorResponse('invalid {id} (over 253 characters, or a character no uid or name has); the field is `id`');

/**
 * When the token in the same answer was issued, as its write committed it: a client that keeps the
 * token (npm start keeps the demo cluster's) tells a later rotation by this time changing. Read back
 * by a GET instead, it may be the time of another rotation that committed in between.
 */
const TokenIssuedAt = z.string().openapi({ description: 'when the enrollment token of this answer was issued (the cluster view shows the current token\'s)' });

const CreatedSchema = z
  .object({
    uid: z.string(),
    name: z.string(),
    enrollment_token: z.string().openapi({ description: 'shown once; stored only as a hash' }),
    token_issued_at: TokenIssuedAt,
  })
  .openapi('ClusterCreated');

const clusterCursor = cursorCodec<readonly [uid: string]>('cl', z.tuple([KeyText]));

const ListQuery = z.strictObject({
  limit: LimitParam,
  cursor: clusterCursor.param,
  // Bound into the statement like a cursor's key (KeyText), so refused here what Postgres would.
  after: z
    .string()
    .max(64)
    .refine((s) => !s.includes('\0'), { message: 'a uid never contains U+0000' })
    .optional()
    .openapi({ description: 'deprecated (one release): the last uid of the previous page; use cursor', param: { deprecated: true } }),
});

export const clustersRouter = adminRouter()
  .openapi(
    createRoute({
      method: 'post',
      path: '/clusters',
      summary: 'Register a cluster; returns its enrollment token once',
      request: {
        body: {
          required: true,
          content: {
            'application/json': {
              schema: z.strictObject({
                name: z
                  .string()
                  .regex(CLUSTER_NAME_RE, 'lowercase letters, digits and -, 1–63 characters, starting and ending with a letter or digit')
                  .openapi({ example: 'gpu-east-1' }),
                location_hint: HintSchema.optional(),
              }),
            },
          },
        },
      },
      responses: {
        ...commonResponses,
        201: { description: 'registered', content: { 'application/json': { schema: CreatedSchema } } },
        400: errorResponse('invalid body (an unknown location hint, or one outside the deployment\'s jurisdiction, names location_hint)'),
        409: errorResponse(
          'the name is taken; also the answer to a retry of a create that committed (its answer lost, or a 503), whose token is not shown again: POST /clusters/{id}/rotate-token issues a new one',
        ),
      },
    }),
    async (c) => {
      const { name, location_hint } = c.req.valid('json');
      const outside = hintRefusal(c.env, location_hint ?? null);
      if (outside) return jsonError(c, 400, 'invalid', outside, 'location_hint') as never;
      const token = generateEnrollmentToken();
      const row = await createCluster(c.var.pg, ulid(), name, toHex(await hashToken(token)), location_hint ?? null, arrivalDeadline(hubConfig(c.env)));
      if (!row) return jsonError(c, 409, 'conflict', `a cluster named ${name} already exists`, 'name') as never;
      // The token is shown once: no cache on the way may keep a copy.
      c.header('cache-control', 'no-store');
      return c.json({ uid: row.uid, name: row.name, enrollment_token: token, token_issued_at: row.token_issued_at }, 201);
    },
  )
  .openapi(
    createRoute({
      method: 'get',
      path: '/clusters',
      summary: 'List clusters with their session view',
      request: { query: ListQuery },
      responses: {
        ...commonResponses,
        200: {
          description: 'a page of clusters, by uid',
          content: {
            'application/json': {
              schema: z
                .object({
                  items: z.array(ClusterSchema),
                  next_cursor: z.string().nullable().openapi({ description: 'pass as ?cursor= for the next page; null on the last page' }),
                  clusters: z.array(ClusterSchema).openapi({ description: 'deprecated (one release): the same as items', deprecated: true }),
                  next: z.string().nullable().openapi({ description: 'deprecated (one release): the last uid, for ?after=', deprecated: true }),
                })
                .openapi('ClusterPage'),
            },
          },
        },
        400: errorResponse('invalid query parameter (the field is named)'),
      },
    }),
    async (c) => {
      const { limit, cursor, after } = c.req.valid('query');
      const from = cursor !== undefined ? (clusterCursor.decode(cursor)?.[0] ?? null) : (after ?? null);
      const { rows } = await c.var.pg.query<ClusterViewRow>(
        LIST_SQL,
        [...viewParams(c.env), from, limit + 1],
      );
      const items = rows.slice(0, limit).map((r) => toView(r, c.env));
      const last = rows.length > limit ? (items[items.length - 1]?.uid ?? null) : null;
      return c.json({ items, next_cursor: last === null ? null : clusterCursor.encode([last]), clusters: items, next: last }, 200);
    },
  )
  .openapi(
    createRoute({
      method: 'get',
      path: '/clusters/{id}',
      summary: 'One cluster: registry and live session view',
      request: { params: ClusterIdParam },
      responses: {
        ...commonResponses,
        200: { description: 'the cluster', content: { 'application/json': { schema: ClusterSchema } } },
        404: errorResponse('no such cluster'),
      },
    }),
    async (c) => {
      const view = await clusterView(c.var.pg, c.env, c.req.valid('param').id);
      if (!view) return jsonError(c, 404, 'not_found', 'no such cluster') as never;
      if (view.session) {
        const live = await askSession(c.env, view.uid, view.session.session_id);
        if (live) view.session = { ...view.session, connected: live.connected, live: { ...live }, source: 'object' };
      }
      return c.json(view, 200);
    },
  )
  .openapi(
    createRoute({
      method: 'patch',
      path: '/clusters/{id}',
      summary: 'Change where the cluster\'s new session objects are placed',
      request: {
        params: ClusterIdParam,
        body: { required: true, content: { 'application/json': { schema: z.strictObject({ location_hint: HintSchema }) } } },
      },
      responses: {
        ...commonResponses,
        200: { description: 'the cluster as changed', content: { 'application/json': { schema: ClusterSchema } } },
        400: errorResponse('invalid body (an unknown location hint, or one outside the deployment\'s jurisdiction, names location_hint)'),
        404: errorResponse('no such cluster'),
      },
    }),
    async (c) => {
      const { location_hint } = c.req.valid('json');
      const outside = hintRefusal(c.env, location_hint);
      if (outside) return jsonError(c, 400, 'invalid', outside, 'location_hint') as never;
      const row = await setLocationHint(c.var.pg, c.req.valid('param').id, location_hint, arrivalDeadline(hubConfig(c.env)));
      if (row) c.set('committed', true);
      const view = row ? await clusterView(readBack(c.env), c.env, row.uid) : null;
      if (!row || !view) return jsonError(c, 404, 'not_found', 'no such cluster') as never;
      return c.json(asCommitted(view, row, c.env), 200);
    },
  )
  .openapi(
    createRoute({
      method: 'post',
      path: '/clusters/{id}/rotate-token',
      summary: 'Issue a new enrollment token; the old one stops working and a live session on it is cut',
      request: { params: ClusterIdParam },
      responses: {
        ...commonResponses,
        200: {
          description: 'the new token, shown once',
          content: { 'application/json': { schema: z.object({ enrollment_token: z.string(), token_issued_at: TokenIssuedAt }) } },
        },
        404: errorResponse('no such cluster'),
      },
    }),
    async (c) => {
      const token = generateEnrollmentToken();
      const row = await rotateToken(c.var.pg, c.req.valid('param').id, toHex(await hashToken(token)), arrivalDeadline(hubConfig(c.env)), readBack(c.env));
      if (!row) return jsonError(c, 404, 'not_found', 'no such cluster') as never;
      c.executionCtx.waitUntil(cutLiveSession(c.env, row.uid, row.live_session, 'token'));
      // The token is shown once: no cache on the way may keep a copy.
      c.header('cache-control', 'no-store');
      return c.json({ enrollment_token: token, token_issued_at: row.token_issued_at }, 200);
    },
  )
  .openapi(
    createRoute({
      method: 'post',
      path: '/clusters/{id}/disable',
      summary: 'Disable a cluster; a live session is cut at once (at the latest within one poll interval)',
      request: { params: ClusterIdParam },
      responses: {
        ...commonResponses,
        200: { description: 'disabled', content: { 'application/json': { schema: ClusterSchema } } },
        404: errorResponse('no such cluster'),
      },
    }),
    async (c) => toggle(c.var.pg, c.env, c.req.valid('param').id, true, () => c.set('committed', true), (p) => c.executionCtx.waitUntil(p)).then((v) =>
      v ? c.json(v, 200) : (jsonError(c, 404, 'not_found', 'no such cluster') as never),
    ),
  )
  .openapi(
    createRoute({
      method: 'post',
      path: '/clusters/{id}/enable',
      summary: 'Enable a disabled cluster',
      request: { params: ClusterIdParam },
      responses: {
        ...commonResponses,
        200: { description: 'enabled', content: { 'application/json': { schema: ClusterSchema } } },
        404: errorResponse('no such cluster'),
      },
    }),
    async (c) => toggle(c.var.pg, c.env, c.req.valid('param').id, false, () => c.set('committed', true)).then((v) =>
      v ? c.json(v, 200) : (jsonError(c, 404, 'not_found', 'no such cluster') as never),
    ),
  );

/**
 * The view read that answers a registry write, once the write has committed: a read, so it
 * queues on a gateway connection as reads do rather than being held to a write's send-by time
 * (refused unsent behind a busy connection, it failed a request whose change had been applied).
 */
function readBack(env: HubEnv): Sql {
  return gatewaySql(env);
}

/** A hint this deployment cannot honour: one outside its jurisdiction (null, clearing it, always can). */
function hintRefusal(env: HubEnv, hint: LocationHint | null): string | null {
  return hint ? hintOutsideJurisdiction(hint, hubConfig(env).HUB_JURISDICTION) : null;
}

async function toggle(
  sql: Sql,
  env: HubEnv,
  id: string,
  disabled: boolean,
  committed: () => void,
  background?: (p: Promise<void>) => void,
): Promise<ClusterView | null> {
  const row = await setDisabled(sql, id, disabled, arrivalDeadline(hubConfig(env)), readBack(env));
  if (!row) return null;
  committed();
  if (disabled) background?.(cutLiveSession(env, row.uid, row.live_session, 'disabled'));
  const view = await clusterView(readBack(env), env, row.uid);
  return view && asCommitted(view, row, env);
}

/**
 * The answer to a registry write (PATCH, disable, enable) is the cluster as that write committed
 * it: its registry fields come from the write's own RETURNING. The view around them is read by a
 * later statement, after which a racing write of the cluster may have committed too: an opposite
 * toggle (a disable answered "enabled"), another PATCH's hint, or a PATCH's hint in a disable's
 * answer while the PATCH answered that disable's `disabled: true`, each seeing the other, which no
 * order of the two produces. (The session, counts and revision are the live view, as in a GET.)
 */
function asCommitted(view: ClusterView, row: ClusterRow, env: HubEnv): ClusterView {
  const placement = placementHint(knownHint(row.location_hint), hubConfig(env).HUB_JURISDICTION);
  const { location_hint_ignored: _, ...rest } = view;
  return {
    ...rest,
    name: row.name,
    location_hint: placement.hint,
    ...(placement.ignored ? { location_hint_ignored: placement.ignored } : {}),
    created_at: row.created_at,
    token_issued_at: row.token_issued_at,
    disabled: row.disabled_at !== null,
    disabled_at: row.disabled_at,
  };
}
