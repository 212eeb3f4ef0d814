import { createRoute, z } from '@hono/zod-openapi';
import type { Context } from 'hono';
import { desiredFrameBytes, Ident, ServingConfig, MAX_REPLICAS } from '../../protocol';
import { hubConfig } from '../config';
import { gatewayWriteDesired } from '../db/gateway-client';
import { sendableFrameBytes } from '../frame-budget';
import { jsonError } from '../http-errors';
import { adminRouter, commonResponses, errorResponse, type AdminEnv } from './app';
import { MAX_BODY_BYTES } from './body-guard';
import { ClusterIdParam } from './clusters';

const DeploymentParams = ClusterIdParam.extend({
  deployment_id: Ident,
});

// Strict, unlike the wire (whose receivers ignore unknown fields): a key the hub would drop is
// refused by name, so `deleted: true` put back from a read, or a misspelt field, is not a
// silent 200 that writes something else.
const desiredFields = {
  workload_id: Ident,
  min_replicas: z.number().int().nonnegative().max(MAX_REPLICAS),
  max_replicas: z.number().int().nonnegative().max(MAX_REPLICAS),
  serving: ServingConfig.strict(),
};
const replicasInOrder: [(b: { min_replicas: number; max_replicas: number }) => boolean, { message: string; path: string[] }] = [
  (b) => b.min_replicas <= b.max_replicas,
  { message: 'min_replicas exceeds max_replicas', path: ['min_replicas'] },
];

const DesiredBody = z
  .strictObject(desiredFields)
  .refine(...replicasInOrder)
  .openapi('DesiredDeployment', {
    description:
      "This cluster's share of a workload's replicas and its serving configuration. Stored and sent as given, except that a JSON object's keys (env's included) come in Postgres's jsonb order (shorter first, then by bytes) on every path: a JSON object has no order, and one revision is sent with the same bytes live and in a resync.",
  });

/** Most deployments one bulk request may carry. */
export const BULK_MAX = 5_000;

const BulkBody = z
  .strictObject({
    deployments: z
      .array(z.strictObject({ deployment_id: Ident, ...desiredFields }).refine(...replicasInOrder))
      .min(1)
      .max(BULK_MAX)
      .superRefine((items, ctx) => {
        const seen = new Map<string, number>();
        items.forEach((d, i) => {
          const first = seen.get(d.deployment_id);
          if (first !== undefined) {
            ctx.addIssue({ code: 'custom', path: [i, 'deployment_id'], message: `deployment_id ${d.deployment_id} is also item ${first}` });
          } else seen.set(d.deployment_id, i);
        });
      }),
  })
  .openapi('DesiredDeployments', {
    description: `Many deployments at once (at most ${BULK_MAX}), each validated as a single PUT is; one statement, one commit, and the frames leave for the operator together.`,
  });

/**
 * A deployment whose deployment.desired frame would be larger than a frame may be (with the
 * longest revision, stream position and envelope it could be sent with): the session could
 * neither store nor send it, so it is refused here, while the caller can still shorten it. The
 * schema's own bounds allow several MB once escaped (128 env values of 4096 characters, each
 * up to 6 bytes as JSON), so this, not the schema, is the bound.
 */
function tooLargeServing(c: Context<AdminEnv>, serving: unknown, field: string): Response | null {
  const max = sendableFrameBytes(hubConfig(c.env));
  const bytes = desiredFrameBytes(serving);
  if (bytes <= max) return null;
  return jsonError(
    c,
    413,
    'too_large',
    `${field}: its deployment.desired frame could be ${bytes} bytes, over the ${max} a frame may be (max_frame_bytes); JSON escapes count (a control character is 6 bytes)`,
    field,
  );
}

const tooLargeResponse = errorResponse(
  `too_large: the deployment.desired frame would exceed max_frame_bytes (field: serving, or deployments.N.serving in a bulk PUT); payload_too_large: the body is over ${MAX_BODY_BYTES} bytes`,
);

const BulkWritten = z
  .object({
    cluster_uid: z.string(),
    items: z.array(z.object({ deployment_id: z.string(), revision: z.number().int() })),
  })
  .openapi('DesiredDeploymentsWritten');

const DesiredWritten = z
  .object({ cluster_uid: z.string(), deployment_id: z.string(), revision: z.number().int(), deleted: z.boolean() })
  .openapi('DesiredWritten');

export const desiredRouter = adminRouter()
  .openapi(
    createRoute({
      method: 'put',
      path: '/clusters/{id}/deployments',
      summary: 'Set many deployments at once: one statement, one commit, frames out together',
      request: {
        params: ClusterIdParam,
        body: { required: true, content: { 'application/json': { schema: BulkBody } } },
      },
      responses: {
        ...commonResponses,
        200: { description: 'stored, each with its revision in the order given', content: { 'application/json': { schema: BulkWritten } } },
        400: errorResponse('invalid body: the field names the item (deployments.3.min_replicas)'),
        404: errorResponse('no such cluster'),
        413: tooLargeResponse,
      },
    }),
    async (c) => {
      const { deployments } = c.req.valid('json');
      for (let i = 0; i < deployments.length; i++) {
        const refused = tooLargeServing(c, deployments[i]?.serving, `deployments.${i}.serving`);
        if (refused) return refused as never;
      }
      const w = await gatewayWriteDesired(c.env, { op: 'put', cluster: c.req.valid('param').id, items: deployments });
      if (w?.op !== 'put') return jsonError(c, 404, 'not_found', 'no such cluster') as never;
      const items = deployments.map((d, i) => ({ deployment_id: d.deployment_id, revision: w.revisions[i] as number }));
      return c.json({ cluster_uid: w.cluster_uid, items }, 200);
    },
  )
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
        413: tooLargeResponse,
      },
    }),
    async (c) => {
      const { id, deployment_id } = c.req.valid('param');
      const body = c.req.valid('json');
      const refused = tooLargeServing(c, body.serving, 'serving');
      if (refused) return refused as never;
      const w = await gatewayWriteDesired(c.env, { op: 'put', cluster: id, items: [{ deployment_id, ...body }] });
      if (w?.op !== 'put') return jsonError(c, 404, 'not_found', 'no such cluster') as never;
      return c.json({ cluster_uid: w.cluster_uid, deployment_id, revision: w.revisions[0] as number, deleted: false }, 200);
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
      const w = await gatewayWriteDesired(c.env, { op: 'withdraw', cluster: id, deploymentId: deployment_id });
      if (w?.op !== 'withdraw') return jsonError(c, 404, 'not_found', 'no such cluster or deployment') as never;
      return c.json({ cluster_uid: w.cluster_uid, deployment_id, revision: w.revision, deleted: true }, 200);
    },
  );
