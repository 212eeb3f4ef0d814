import { createRoute, z } from '@hono/zod-openapi';
import { newId, OPERATION_KINDS, OperationParams, operationStartFrameBytes, ULID_RE } from '../../protocol';
import { hubConfig } from '../config';
import { gatewayWriteDesired } from '../db/gateway-client';
import { getOperation, listOperations, OPERATION_EVENT_KINDS, OPERATION_STATES, type OperationKey } from '../db/reads-history';
import { sendableFrameBytes } from '../frame-budget';
import { jsonError } from '../http-errors';
import { MAX_BODY_BYTES } from './body-guard';
import { adminRouter, commonResponses, errorResponse, TimestampSchema as Timestamp } from './app';
import { ClusterIdParam } from './clusters';
import { cursorCodec, KeyText, KeyTimestamp, LimitParam, pageRequest, pageSchema, toResponsePage } from './paging';

/** Operations: started here, delivered by the owning session, concluded by the operator. */

const OperationBody = z
  .strictObject({
    kind: z.enum(OPERATION_KINDS),
    target: z.string().min(1).max(512),
    params: OperationParams.default({}),
    // At least a second: a shorter deadline passes before the start frame could reach the
    // operator, so the operation would be accepted only to expire unsent.
    deadline_s: z.number().min(1).max(7 * 24 * 3600).openapi({ description: 'seconds the operator has to conclude it, 1 to 604800' }),
  })
  .openapi('OperationRequest');

const IdempotencyHeader = z.object({
  'idempotency-key': z
    .string()
    .regex(/^[\x21-\x7e]{1,255}$/, 'must be 1 to 255 printable ASCII characters without spaces')
    .optional()
    .openapi({
      description:
        'Makes the request safe to retry: while the operation lives, the same key on this cluster returns the operation it started instead of starting another. Compared with kind, target and params (not deadline_s)',
      example: '7f0c1d2e-drain-gpu-node-17',
    }),
});

/** A retry asks for what the key started: same kind, target and params (the deadline moves on). */
function sameOperation(prior: { kind: string; target: string; params: Record<string, unknown> }, body: { kind: string; target: string; params: Record<string, unknown> }): boolean {
  if (prior.kind !== body.kind || prior.target !== body.target) return false;
  const a = Object.keys(prior.params);
  const b = Object.keys(body.params);
  return a.length === b.length && b.every((k) => Object.hasOwn(prior.params, k) && prior.params[k] === body.params[k]);
}

const OperationIdParam = z.object({
  operation_id: z.string().regex(ULID_RE, 'must be a ULID').openapi({ example: '01J9X2C8W1F4TQ3R7MZK5N2B9D' }),
});

const OperationSchema = z
  .object({
    operation_id: z.string(),
    cluster_uid: z.string(),
    kind: z.enum(OPERATION_KINDS),
    target: z.string(),
    params: z.record(z.string(), z.union([z.string(), z.number(), z.boolean(), z.null()])),
    deadline: Timestamp,
    state: z.enum(OPERATION_STATES).openapi({
      description:
        'pending (not yet sent) → sent → accepted → running → succeeded | failed | cancelled; deadline_exceeded: not concluded by its deadline (computed when read, never stored: a conclusion the operator reached but could only deliver later, after a link outage say, replaces it, since the outcome is what happened in the cluster)',
    }),
    outcome_message: z.string().nullable(),
    created_at: Timestamp,
    sent_at: Timestamp.nullable(),
    accepted_at: Timestamp.nullable(),
    concluded_at: Timestamp.nullable(),
  })
  .openapi('Operation');

const HistoryEntry = z
  .object({
    frame_id: z.string().openapi({ description: "the operator's frame" }),
    kind: z.enum(OPERATION_EVENT_KINDS),
    phase: z.string().nullable().openapi({ description: 'progress: the phase; result: the outcome; error: the error code' }),
    message: z.string(),
    at: Timestamp.openapi({ description: 'when the hub applied it' }),
    seq: z.number().int().nullable(),
  })
  .openapi('OperationHistoryEntry');

const OperationDetailSchema = OperationSchema.extend({
  history: z.array(HistoryEntry).openapi({ description: 'the first 100 entries and the latest 100, in the order the operator reported them' }),
  history_omitted: z.number().int().openapi({ description: 'entries left out between the first and the latest 100 (0: history is all of it), counted up to 10,000' }),
  history_omitted_at_least: z.boolean().openapi({ description: 'more than 10,000 entries were left out: history_omitted is a lower bound' }),
}).openapi('OperationDetail');

const operationCursor = cursorCodec<OperationKey>('op', z.tuple([KeyTimestamp, KeyText]));

export const operationsRouter = adminRouter()
  .openapi(
    createRoute({
      method: 'post',
      path: '/clusters/{id}/operations',
      summary: 'Start an operation on this cluster (drain, cordon, restart, prefetch)',
      request: {
        params: ClusterIdParam,
        headers: IdempotencyHeader,
        body: { required: true, content: { 'application/json': { schema: OperationBody } } },
      },
      responses: {
        ...commonResponses,
        202: {
          description:
            'accepted; follow it at /admin/operations/{operation_id}. A request whose Idempotency-Key already started an operation on this cluster gets that one (and the header Idempotent-Replayed: true); nothing is started again',
          headers: { 'Idempotent-Replayed': { description: 'true: the Idempotency-Key had already started this operation; nothing was started now', schema: { type: 'string' } } },
          content: { 'application/json': { schema: z.object({ operation_id: z.string() }).openapi('OperationStarted') } },
        },
        400: errorResponse('invalid body or Idempotency-Key'),
        404: errorResponse('no such cluster'),
        413: errorResponse(`too_large: the operation.start frame would exceed max_frame_bytes (field: params); payload_too_large: the body is over ${MAX_BODY_BYTES} bytes`),
        422: errorResponse('idempotency_key_reused: the Idempotency-Key already started a different operation (kind, target or params) on this cluster'),
      },
    }),
    async (c) => {
      const body = c.req.valid('json');
      // The session could neither store nor send a larger start, and an operation cannot be
      // replaced or withdrawn: refused here, while the caller can still shorten it.
      const max = sendableFrameBytes(hubConfig(c.env));
      const bytes = operationStartFrameBytes(body);
      if (bytes > max) {
        return jsonError(c, 413, 'too_large', `params: its operation.start frame could be ${bytes} bytes, over the ${max} a frame may be (max_frame_bytes); JSON escapes count (a control character is 6 bytes)`, 'params') as never;
      }
      const key = c.req.valid('header')['idempotency-key'] ?? null;
      const operation = { operation_id: newId(), ...body, idempotency_key: key };
      const created = await gatewayWriteDesired(c.env, { op: 'operation', cluster: c.req.valid('param').id, operation });
      if (created?.op !== 'operation') return jsonError(c, 404, 'not_found', 'no such cluster') as never;
      if (created.prior) {
        if (!sameOperation(created.prior, body)) {
          const message = `this Idempotency-Key already started operation ${created.operation_id}, a different ${created.prior.kind} on ${created.prior.target}; use a new key for a new operation`;
          return jsonError(c, 422, 'idempotency_key_reused', message, 'Idempotency-Key') as never;
        }
        c.header('idempotent-replayed', 'true');
      }
      return c.json({ operation_id: created.operation_id }, 202);
    },
  )
  .openapi(
    createRoute({
      method: 'get',
      path: '/clusters/{id}/operations',
      summary: "This cluster's operations, newest first",
      request: { params: ClusterIdParam, query: z.strictObject({ limit: LimitParam, cursor: operationCursor.param }) },
      responses: {
        ...commonResponses,
        200: { description: 'a page, newest first', content: { 'application/json': { schema: pageSchema(OperationSchema, 'OperationPage') } } },
        400: errorResponse('invalid query parameter (the field is named)'),
        404: errorResponse('no such cluster'),
      },
    }),
    async (c) => {
      const page = await listOperations(c.var.pg, c.req.valid('param').id, pageRequest(operationCursor, c.req.valid('query')));
      if (!page) return jsonError(c, 404, 'not_found', 'no such cluster') as never;
      return c.json(toResponsePage(operationCursor, page), 200);
    },
  )
  .openapi(
    createRoute({
      method: 'get',
      path: '/operations/{operation_id}',
      summary: 'One operation: its state and the history the operator reported',
      request: { params: OperationIdParam },
      responses: {
        ...commonResponses,
        200: { description: 'the operation', content: { 'application/json': { schema: OperationDetailSchema } } },
        400: errorResponse('malformed operation_id'),
        404: errorResponse('no such operation (never started, or deleted OPERATIONS_RETENTION_MS after it concluded)'),
      },
    }),
    async (c) => {
      const op = await getOperation(c.var.pg, c.req.valid('param').operation_id);
      if (!op) return jsonError(c, 404, 'not_found', 'no such operation') as never;
      return c.json(op, 200);
    },
  );
