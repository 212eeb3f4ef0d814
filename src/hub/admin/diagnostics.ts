import { createRoute, z } from '@hono/zod-openapi';
import { routeKeyOf, sessionStub } from '../address';
import { jsonError } from '../http-errors';
import { adminRouter, commonResponses, errorResponse } from './app';
import { clusterView } from './cluster-view';
import { ClusterIdParam } from './clusters';

const WakeStatsSchema = z
  .object({
    session_id: z.string(),
    wakes: z.number().openapi({ description: 'events the runtime delivered to the session object (frames, closes, alarms, pokes)' }),
    constructions: z.number().openapi({ description: 'times the object was brought into memory (the first, and once after every eviction)' }),
    by_kind: z.record(z.string(), z.number()),
    recent: z.array(z.number()).openapi({ description: 'epoch ms of the most recent wakes, oldest first (at most 256)' }),
  })
  .openapi('SessionWakes');

/** Diagnostics: how often the owning session's object is woken (idle sessions should sleep). */
export const diagnosticsRouter = adminRouter().openapi(
  createRoute({
    method: 'get',
    path: '/clusters/{id}/session/wakes',
    summary: "How often the cluster's session object has been woken and rebuilt (reading this does not count as a wake)",
    request: { params: ClusterIdParam },
    responses: {
      ...commonResponses,
      200: { description: 'the owning session object\'s wake counters', content: { 'application/json': { schema: WakeStatsSchema } } },
      404: errorResponse('no such cluster, or it has no session'),
    },
  }),
  async (c) => {
    const view = await clusterView(c.var.pg, c.env, c.req.valid('param').id);
    const sessionId = view?.session?.session_id;
    const key = routeKeyOf(sessionId);
    if (!view || !sessionId || !key) return jsonError(c, 404, 'not_found', 'no such cluster, or it has no session') as never;
    const s = await sessionStub(c.env, { clusterUid: view.uid, routeKey: key }).wakeStats();
    return c.json({ session_id: sessionId, wakes: s.wakes, constructions: s.constructions, by_kind: s.byKind, recent: s.recent }, 200);
  },
);
