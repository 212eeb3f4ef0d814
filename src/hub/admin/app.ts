import { OpenAPIHono, z } from '@hono/zod-openapi';
import { bearerAuth } from 'hono/bearer-auth';
import type { MiddlewareHandler } from 'hono';
import type { HubEnv } from '../env';
import { jsonError } from '../http-errors';
import { gatewaySql } from '../db/gateway';
import type { Sql } from '../db/sql';

export type AdminEnv = { Bindings: HubEnv; Variables: { pg: Sql } };

/** Admin statements run on the shared gateway connections: an admin call opens no connection. */
export const requestPg: MiddlewareHandler<AdminEnv> = async (c, next) => {
  c.set('pg', gatewaySql(c.env));
  await next();
};

/** Shared response schema of every admin failure. */
export const ErrorSchema = z
  .object({
    error: z.object({
      code: z.string().openapi({ example: 'invalid' }),
      message: z.string(),
      field: z.string().optional().openapi({ description: 'the request field at fault' }),
    }),
  })
  .openapi('Error');

export const errorResponse = (description: string) => ({
  description,
  content: { 'application/json': { schema: ErrorSchema } },
});

/** Every timestamp the admin API returns: ISO 8601, UTC, milliseconds. */
export const TimestampSchema = z.string().openapi({ format: 'date-time', example: '2026-08-19T14:02:11.482Z' });

/**
 * Failures every admin route can answer besides its own: documented on each route so a client
 * generated from openapi.json knows their shape.
 */
export const commonResponses = {
  401: errorResponse('missing or wrong admin bearer token'),
  503: errorResponse('the hub could not complete the request (database unreachable or slow); retry'),
} as const;

/** A sub-router whose validation failures answer 400 with the offending field named. */
export function adminRouter(): OpenAPIHono<AdminEnv> {
  return new OpenAPIHono<AdminEnv>({
    defaultHook: (result, c) => {
      if (!result.success) {
        const issue = result.error.issues[0];
        const field = issue?.path.join('.') || undefined;
        return jsonError(c, 400, 'invalid', `${field ?? 'request'}: ${issue?.message ?? 'invalid'}`, field);
      }
      return undefined;
    },
  });
}

/** Admin bearer auth: the token is compared in constant time (Hono hashes both sides). */
export const adminAuth: MiddlewareHandler<AdminEnv> = async (c, next) => {
  const token = c.env.ADMIN_TOKEN;
  if (!token) return jsonError(c, 503, 'unconfigured', 'ADMIN_TOKEN is not set on this hub');
  const unauthorized = { error: { code: 'unauthorized', message: 'a valid admin bearer token is required' } };
  const mw = bearerAuth({
    token,
    noAuthenticationHeader: { message: unauthorized },
    invalidAuthenticationHeader: { message: { error: { code: 'invalid', message: 'malformed Authorization header' } } },
    invalidToken: { message: unauthorized },
  }) as unknown as MiddlewareHandler<AdminEnv>;
  return mw(c, next);
};
