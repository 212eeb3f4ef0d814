import { OpenAPIHono, z } from '@hono/zod-openapi';
import type { MiddlewareHandler } from 'hono';
import { secureHeaders } from 'hono/secure-headers';
import type { HubEnv } from '../env';
import { jsonError } from '../http-errors';
import { gatewaySql } from '../db/gateway-client';
import type { Sql } from '../db/sql';

export type AdminEnv = {
  Bindings: HubEnv;
  /** `committed`: the request's write has committed (what fails after it must not answer "not applied"). */
  Variables: { pg: Sql; committed?: true };
};

/**
 * Admin statements run on the shared gateway connections: an admin call opens no connection. A
 * write's statements are sent within the Worker's wait or not at all (`DbGateway.query`): one
 * answered 503 "retry" never commits after the answer.
 */
export const requestPg: MiddlewareHandler<AdminEnv> = async (c, next) => {
  const method = c.req.method;
  c.set('pg', gatewaySql(c.env, method !== 'GET' && method !== 'HEAD' ? 'write' : 'read'));
  await next();
};

/**
 * Every admin answer is JSON meant for a script (the dashboard's, or a tool's), never a document
 * to show: no browser may sniff it into HTML, run anything in it, or show it inside another
 * site's page. The same middleware as the dashboard's headers (dashboard/route.ts), with a policy
 * that allows nothing. No CORS header is added: the API, openapi.json included, stays unreadable
 * from another origin's pages as before (tools outside a browser read it as before).
 */
export const adminHeaders: MiddlewareHandler = secureHeaders({
  contentSecurityPolicy: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] },
  xFrameOptions: 'DENY',
  referrerPolicy: 'no-referrer',
});

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

/** The message of a 504 `applied`: the write committed, and what was to be read back for the answer failed. */
export const APPLIED_UNREAD =
  'the change was applied, but the hub could not read the cluster back to answer with it: read it (GET /admin/clusters/{id})';

/** The message of a 504 `outcome_unknown`: a write sent and never answered. */
export const OUTCOME_UNKNOWN =
  'the database did not answer the write in time (or its connection was lost under it), so it may or may not have been applied: read it back, or repeat it (a PUT or DELETE sets the same state again; an operation repeated with the same Idempotency-Key is not started twice)';

/**
 * Failures every admin route can answer besides its own: documented on each route so a client
 * generated from openapi.json knows their shape.
 */
export const commonResponses = {
  401: {
    ...errorResponse('missing or wrong admin bearer token'),
    headers: { 'WWW-Authenticate': { description: 'a Bearer challenge', schema: { type: 'string' as const } } },
  },
  500: errorResponse(
    "internal: a fault of the hub's own, logged (a retry fails the same way until it is fixed); for a read, also an answer larger than the hub can relay from its database (ask for fewer items with ?limit=)",
  ),
  503: {
    ...errorResponse('the hub could not complete the request (database unreachable or slow) and nothing of it was applied; retry'),
    headers: { 'Retry-After': { description: 'seconds to wait before retrying', schema: { type: 'integer' as const } } },
  },
  504: errorResponse(`a write only: outcome_unknown, ${OUTCOME_UNKNOWN}; or applied, ${APPLIED_UNREAD}`),
} as const;

/** A sub-router whose validation failures answer 400 with the offending field named. */
export function adminRouter(): OpenAPIHono<AdminEnv> {
  return new OpenAPIHono<AdminEnv>({
    defaultHook: (result, c) => {
      if (!result.success) {
        const issue = result.error.issues[0];
        // An unknown key is named as the field itself: the object holding it is not what is wrong.
        const path = issue?.code === 'unrecognized_keys' ? [...issue.path, ...issue.keys.slice(0, 1)] : (issue?.path ?? []);
        const field = path.join('.') || undefined;
        return jsonError(c, 400, 'invalid', `${field ?? 'request'}: ${issue?.message ?? 'invalid'}`, field);
      }
      return undefined;
    },
  });
}

/**
 * A token a client can send unchanged in an HTTP header: printable ASCII, spaces only inside
 * (a header value's leading and trailing whitespace is not part of it, RFC 9110 5.5). Any such token is accepted; Hono's bearerAuth accepted
 * only RFC 6750's token68 characters, so a password-manager token (`!`, `#`, `$`) locked everyone
 * out with a 400 even when it was sent exactly.
 */
const SENDABLE_TOKEN = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/;
const BEARER = /^Bearer +(.+)$/i;

const utf8 = new TextEncoder();
/** The configured token's digest, taken once per isolate (and again if the token changes). */
let configured: { token: string; digest: Uint8Array } | null = null;

async function sha256(text: string): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest('SHA-256', utf8.encode(text)));
}

/**
 * Whether `sent` is the admin token. SHA-256 digests are compared, not the strings, so the time
 * taken says nothing of a common prefix (or of the token's length), and the comparison has no
 * early exit. Hono's timingSafeEqual does the same but digests both sides into hex on every
 * request: the configured side's digest is kept.
 */
async function isAdminToken(sent: string, token: string): Promise<boolean> {
  if (configured?.token !== token) configured = { token, digest: await sha256(token) };
  const want = configured.digest;
  const got = await sha256(sent);
  let diff = want.length ^ got.length;
  for (let i = 0; i < want.length; i++) diff |= (want[i] as number) ^ (got[i] ?? 0);
  return diff === 0;
}

/** Admin bearer auth: any failure is 401, and the token is compared in constant time. */
export const adminAuth: MiddlewareHandler<AdminEnv> = async (c, next) => {
  const token = c.env.ADMIN_TOKEN;
  if (!token) return jsonError(c, 503, 'unconfigured', 'ADMIN_TOKEN is not set on this hub');
  if (!SENDABLE_TOKEN.test(token)) {
    // Not a secret leak: says what is wrong with the configuration, not what the token is.
    return jsonError(c, 503, 'unconfigured', 'ADMIN_TOKEN has characters no HTTP header can carry (use printable ASCII, no leading or trailing space)');
  }
  // Trimmed here: local workerd hands the value on with the whitespace a client left after it.
  const sent = BEARER.exec(c.req.header('authorization')?.trim() ?? '')?.[1];
  if (sent === undefined || !(await isAdminToken(sent, token))) {
    c.header('www-authenticate', 'Bearer realm=""');
    return jsonError(c, 401, 'unauthorized', 'a valid admin bearer token is required');
  }
  await next();
};
