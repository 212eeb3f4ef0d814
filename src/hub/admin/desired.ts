import { createRoute, z } from '@hono/zod-openapi';
import { Ident, ServingConfig, MAX_REPLICAS } from '../../protocol';
import { putDesiredDeployment, withdrawDesiredDeployment } from '../db/desired-admin';
import { jsonError } from '../http-errors';
import { adminRouter, commonResponses, errorResponse } from './app';
import { ClusterIdParam } from './clusters';
import { pokeOwner } from './poke';

const DeploymentParams = ClusterIdParam.extend({
  deployment_id: Ident,
});

const DesiredBody = z
  .object({
    workload_id: Ident,
    min_replicas: z.number().int().nonnegative().max(MAX_REPLICAS),
    max_replicas: z.number().int().nonnegative().max(MAX_REPLICAS),
    serving: ServingConfig,
  })
  .refine((b) => b.min_replicas <= b.max_replicas, { message: 'min_replicas exceeds max_replicas', path: ['min_replicas'] })
  .openapi('DesiredDeployment', {
    description: "This cluster's share of a workload's replicas and its serving configuration. Stored and sent exactly as given.",
  });

const DesiredWritten = z
  .object({ cluster_uid: z.string(), deployment_id: z.string(), revision: z.number(), deleted: z.boolean() })
  .openapi('DesiredWritten');

export const desiredRouter = adminRouter()
  .openapi(
    createRoute({
      method: 'put',
      path: '/clusters/{id}/deployments/{deployment_id}',
      summary: "Set a deployment's desired state on this cluster; pushed to the owning session",
      request: {
        params: DeploymentParams,
        body: { required: true, content: { 'application/json': { schema: DesiredBody } } },
      },
      responses: {
        ...commonResponses,
        200: { description: 'stored', content: { 'application/json': { schema: DesiredWritten } } },
        400: errorResponse('invalid body'),
        404: errorResponse('no such cluster'),
      },
    }),
    async (c) => {
      const { id, deployment_id } = c.req.valid('param');
      const body = c.req.valid('json');
      const w = await putDesiredDeployment(c.var.pg, id, { deployment_id, ...body });
      if (!w) return jsonError(c, 404, 'not_found', 'no such cluster') as never;
      pokeOwner(c.env, c.executionCtx, w.cluster_uid, w.owner_session, w.revision, {
        kind: 'deployment',
        revision: w.revision,
        payload: { deployment_id, ...body, revision: w.revision, deleted: false },
      });
      return c.json({ cluster_uid: w.cluster_uid, deployment_id, revision: w.revision, deleted: false }, 200);
    },
  )
  .openapi(
    createRoute({
      method: 'delete',
      path: '/clusters/{id}/deployments/{deployment_id}',
      summary: 'Withdraw a deployment from this cluster; the operator is told (deleted: true)',
      request: { params: DeploymentParams },
      responses: {
        ...commonResponses,
        200: { description: 'withdrawn', content: { 'application/json': { schema: DesiredWritten } } },
        400: errorResponse('invalid deployment_id'),
        404: errorResponse('no such cluster or deployment'),
      },
    }),
    async (c) => {
      const { id, deployment_id } = c.req.valid('param');
      const w = await withdrawDesiredDeployment(c.var.pg, id, deployment_id);
      if (!w) return jsonError(c, 404, 'not_found', 'no such cluster or deployment') as never;
      if (!w.already) {
        pokeOwner(c.env, c.executionCtx, w.cluster_uid, w.owner_session, w.revision, {
          kind: 'deployment',
          revision: w.revision,
          payload: {
            deployment_id,
            workload_id: w.workload_id,
            revision: w.revision,
            min_replicas: w.min_replicas,
            max_replicas: w.max_replicas,
            serving: null,
            deleted: true,
          },
        });
      }
      return c.json({ cluster_uid: w.cluster_uid, deployment_id, revision: w.revision, deleted: true }, 200);
    },
  );
