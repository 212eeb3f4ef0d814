import { createRoute, z } from '@hono/zod-openapi';
import { DEPLOYMENT_PHASES, DEVICE_HEALTH, Ident, SEVERITIES, ServingConfig } from '../../protocol';
import { listDeployments, listDevices, listNodes, type DeploymentKey, type DeviceKey, type NodeKey } from '../db/reads';
import { EVENT_KINDS, listEvents, listRejections, type EventKey, type RejectionKey } from '../db/reads-history';
import { jsonError } from '../http-errors';
import { adminRouter, commonResponses, errorResponse, TimestampSchema as Timestamp } from './app';
import { ClusterIdParam } from './clusters';
import { cursorCodec, KeyBigint, KeyText, KeyTimestamp, LimitParam, pageRequest, pageSchema, toResponsePage } from './paging';

/** Reads of one cluster's state as the hub holds it: observed state, desired state, history. */

// --- schemas -----------------------------------------------------------------------------------

const DesiredSide = z
  .object({
    workload_id: z.string(),
    revision: z.number().int(),
    min_replicas: z.number().int(),
    max_replicas: z.number().int(),
    serving: ServingConfig.nullable().openapi({
      description: 'the serving configuration; for a withdrawn entry, the one that was withdrawn (the operator is sent null)',
    }),
    deleted: z.boolean().openapi({ description: 'withdrawn (a tombstone); listed only with include_withdrawn=true' }),
    updated_at: Timestamp,
  })
  .openapi('DesiredSide');

const ObservedSide = z
  .object({
    observed_revision: z.number().int().nullable().openapi({ description: 'the desired revision last rendered; null before any' }),
    phase: z.enum(DEPLOYMENT_PHASES),
    ready_replicas: z.number().int(),
    message: z.string(),
    replica_ids: z.array(z.string()).openapi({ description: 'the whole replica set, in code-point order' }),
    updated_at: Timestamp,
  })
  .openapi('ObservedSide');

const DeploymentItem = z
  .object({
    deployment_id: z.string(),
    desired: DesiredSide.nullable().openapi({ description: 'null: nothing desired (or withdrawn, without include_withdrawn)' }),
    observed: ObservedSide.nullable().openapi({ description: 'null: the operator reports no such deployment' }),
    in_sync: z.boolean().openapi({ description: 'observed_revision equals the desired revision and the deployment is not withdrawn' }),
    last_refusal: z
      .object({
        at: Timestamp,
        revision: z.number().int(),
        code: z.string(),
        message: z.string(),
        seq: z.number().int(),
        session_id: z.string(),
      })
      .nullable()
      .openapi({ description: "the operator's last refusal of this deployment's desired state (an error frame answering it); compare its revision with the desired one" }),
    refusals: z.number().int().openapi({ description: 'how many times the operator has refused this deployment' }),
  })
  .openapi('DeploymentState');

const NodeItem = z
  .object({
    node_id: z.string(),
    name: z.string(),
    ready: z.boolean(),
    schedulable: z.boolean(),
    labels: z.record(z.string(), z.string()),
    taints: z.array(z.object({ key: z.string(), value: z.string().optional(), effect: z.enum(['NoSchedule', 'PreferNoSchedule', 'NoExecute']) })),
    allocatable: z.object({ gpus: z.number().int(), cpu_millis: z.number().int(), memory_mb: z.number().int() }),
    devices: z.number().int().openapi({ description: 'GPUs reported on this node; compare with allocatable.gpus' }),
    updated_at: Timestamp,
  })
  .openapi('Node');

const DeviceItem = z
  .object({
    device_id: z.string(),
    node_id: z.string(),
    vendor: z.string(),
    model: z.string(),
    memory_total_mb: z.number().int(),
    health: z.enum(DEVICE_HEALTH),
    driver_version: z.string(),
    updated_at: Timestamp,
  })
  .openapi('Device');

const EventItem = z
  .object({
    frame_id: z.string(),
    kind: z.enum(EVENT_KINDS),
    subject: z.string(),
    reason: z.string(),
    message: z.string(),
    severity: z.enum(SEVERITIES),
    occurred_at: Timestamp.openapi({ description: "when it happened, by the cluster's clock" }),
    received_at: Timestamp.openapi({ description: 'when the hub applied it; the list order' }),
    session_id: z.string(),
    seq: z.number().int(),
  })
  .openapi('Event');

const RejectionItem = z
  .object({
    id: z.number().int(),
    session_id: z.string(),
    seq: z.number().int(),
    frame_id: z.string().nullable(),
    type: z.string(),
    reason: z.string(),
    received_at: Timestamp,
  })
  .openapi('Rejection');

// --- cursors -----------------------------------------------------------------------------------

const deploymentCursor = cursorCodec<DeploymentKey>('dp', z.tuple([KeyText]));
const nodeCursor = cursorCodec<NodeKey>('nd', z.tuple([KeyText]));
const deviceCursor = cursorCodec<DeviceKey>('dv', z.tuple([KeyText]));
const eventCursor = cursorCodec<EventKey>('ev', z.tuple([KeyTimestamp, KeyText]));
const rejectionCursor = cursorCodec<RejectionKey>('rj', z.tuple([KeyBigint]));

const notFound = errorResponse('no such cluster');
const badQuery = errorResponse('invalid query parameter (the field is named)');
const noCluster = 'no such cluster';

// --- routes ------------------------------------------------------------------------------------

export const readsRouter = adminRouter()
  .openapi(
    createRoute({
      method: 'get',
      path: '/clusters/{id}/deployments',
      summary: 'Desired and observed deployments side by side, by deployment_id, with replica ids',
      request: {
        params: ClusterIdParam,
        query: z.strictObject({
          include_withdrawn: z
            .enum(['true', 'false'])
            .default('false')
            .openapi({ description: 'also list withdrawn desired entries (tombstones)' }),
          limit: LimitParam,
          cursor: deploymentCursor.param,
        }),
      },
      responses: {
        ...commonResponses,
        200: { description: 'a page, by deployment_id', content: { 'application/json': { schema: pageSchema(DeploymentItem, 'DeploymentPage') } } },
        400: badQuery,
        404: notFound,
      },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const page = await listDeployments(c.var.pg, c.req.valid('param').id, {
        ...pageRequest(deploymentCursor, q),
        includeWithdrawn: q.include_withdrawn === 'true',
      });
      if (!page) return jsonError(c, 404, 'not_found', noCluster) as never;
      return c.json(toResponsePage(deploymentCursor, page), 200);
    },
  )
  .openapi(
    createRoute({
      method: 'get',
      path: '/clusters/{id}/nodes',
      summary: 'Observed nodes, by node_id',
      request: { params: ClusterIdParam, query: z.strictObject({ limit: LimitParam, cursor: nodeCursor.param }) },
      responses: {
        ...commonResponses,
        200: { description: 'a page, by node_id', content: { 'application/json': { schema: pageSchema(NodeItem, 'NodePage') } } },
        400: badQuery,
        404: notFound,
      },
    }),
    async (c) => {
      const page = await listNodes(c.var.pg, c.req.valid('param').id, pageRequest(nodeCursor, c.req.valid('query')));
      if (!page) return jsonError(c, 404, 'not_found', noCluster) as never;
      return c.json(toResponsePage(nodeCursor, page), 200);
    },
  )
  .openapi(
    createRoute({
      method: 'get',
      path: '/clusters/{id}/devices',
      summary: 'Observed GPUs, by device_id',
      request: {
        params: ClusterIdParam,
        query: z.strictObject({
          node_id: Ident.optional().openapi({ description: 'only the GPUs attached to this node' }),
          limit: LimitParam,
          cursor: deviceCursor.param,
        }),
      },
      responses: {
        ...commonResponses,
        200: { description: 'a page, by device_id', content: { 'application/json': { schema: pageSchema(DeviceItem, 'DevicePage') } } },
        400: badQuery,
        404: notFound,
      },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const page = await listDevices(c.var.pg, c.req.valid('param').id, { ...pageRequest(deviceCursor, q), nodeId: q.node_id ?? null });
      if (!page) return jsonError(c, 404, 'not_found', noCluster) as never;
      return c.json(toResponsePage(deviceCursor, page), 200);
    },
  )
  .openapi(
    createRoute({
      method: 'get',
      path: '/clusters/{id}/events',
      summary: 'Node, GPU and deployment events, newest first',
      request: {
        params: ClusterIdParam,
        query: z.strictObject({
          kind: z.enum(EVENT_KINDS).optional().openapi({ description: 'only events of this kind' }),
          subject: Ident.optional().openapi({ description: 'only events about this node, GPU or deployment id' }),
          limit: LimitParam,
          cursor: eventCursor.param,
        }),
      },
      responses: {
        ...commonResponses,
        200: { description: 'a page, newest first', content: { 'application/json': { schema: pageSchema(EventItem, 'EventPage') } } },
        400: badQuery,
        404: notFound,
      },
    }),
    async (c) => {
      const q = c.req.valid('query');
      const page = await listEvents(c.var.pg, c.req.valid('param').id, {
        ...pageRequest(eventCursor, q),
        kind: q.kind ?? null,
        subject: q.subject ?? null,
      });
      if (!page) return jsonError(c, 404, 'not_found', noCluster) as never;
      return c.json(toResponsePage(eventCursor, page), 200);
    },
  )
  .openapi(
    createRoute({
      method: 'get',
      path: '/clusters/{id}/rejections',
      summary: 'Poison frames from this cluster (accepted, acknowledged, dropped), newest first',
      request: { params: ClusterIdParam, query: z.strictObject({ limit: LimitParam, cursor: rejectionCursor.param }) },
      responses: {
        ...commonResponses,
        200: { description: 'a page, newest first', content: { 'application/json': { schema: pageSchema(RejectionItem, 'RejectionPage') } } },
        400: badQuery,
        404: notFound,
      },
    }),
    async (c) => {
      const page = await listRejections(c.var.pg, c.req.valid('param').id, pageRequest(rejectionCursor, c.req.valid('query')));
      if (!page) return jsonError(c, 404, 'not_found', noCluster) as never;
      return c.json(toResponsePage(rejectionCursor, page), 200);
    },
  );
