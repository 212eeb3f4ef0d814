import { OpenAPIHono, z } from '@hono/zod-openapi';
import { HTTPException } from 'hono/http-exception';
import { classifyDbError, describeError, failureLine, isCodeError, NOT_AN_OUTAGE } from '../db/errors';
import { mayHaveCommitted } from '../db/gateway-client';
import { jsonError } from '../http-errors';
import { createLogger } from '../log';
import { adminAuth, APPLIED_UNREAD, errorResponse, OUTCOME_UNKNOWN, requestPg, type AdminEnv } from './app';
import { bodySizeGuard, jsonBodyGuard, MAX_BODY_BYTES } from './body-guard';
import { badClusterId, clustersRouter } from './clusters';
import { desiredRouter } from './desired';
import { diagnosticsRouter } from './diagnostics';
import { fleetRouter } from './fleet';
import { operationsRouter } from './operations';
import { pollCache } from './poll-cache';
import { HubConfigError } from '../config';
import { databaseRegion } from '../database-region';
import { readsRouter } from './reads';

const log = createLogger({ component: 'admin' });
/** workerd's refusal of an RPC value over its limit ("Serialized RPC arguments or return values are limited to 32MiB…"). */
const RPC_TOO_LARGE = /Serialized RPC arguments or return values are limited/;

/**
 * The body guard answers for every POST, PUT and PATCH, whichever router defines it: its answers
 * are documented on each such route here, in one place, as the guard is applied (a route's own
 * description of a status, if it has one, is kept). A route that takes no body is one of them: a
 * body sent to it anyway (a form post, a fetch without a content type) meets the guard too.
 */
function documentBodyGuard(admin: OpenAPIHono<AdminEnv>): void {
  for (const def of admin.openAPIRegistry.definitions) {
    if (def.type !== 'route' || !['post', 'put', 'patch'].includes(def.route.method)) continue;
    def.route.responses = {
      413: errorResponse(`payload_too_large: the body is over ${MAX_BODY_BYTES} bytes`),
      415: errorResponse('unsupported_media_type: the body is not application/json'),
      ...def.route.responses,
    };
  }
}

const IfNoneMatch = {
  'if-none-match': z.string().optional().openapi({ description: 'the ETag of an answer already held: 304 while it is still the answer' }),
};

/**
 * What answers for every GET, whichever router defines it, documented on each GET here: the poll
 * cache's ETag and 304 (poll-cache.ts), so a client generated from openapi.json can poll cheaply
 * (onError's 500 for an answer too large to relay is among every route's, app.ts commonResponses).
 */
function documentReads(admin: OpenAPIHono<AdminEnv>): void {
  for (const def of admin.openAPIRegistry.definitions) {
    if (def.type !== 'route' || def.route.method !== 'get') continue;
    const ok = def.route.responses[200];
    if (ok && !('$ref' in ok)) {
      def.route.responses[200] = {
        ...ok,
        headers: { etag: { description: 'a strong tag of this body: send it back as If-None-Match', schema: { type: 'string' } } },
      };
    }
    def.route.responses = {
      304: { description: 'not modified: If-None-Match names the ETag the answer would carry (no body)', headers: { etag: { description: 'the tag the answer still carries', schema: { type: 'string' } } } },
      ...def.route.responses,
    };
    // Documentation only: the route's validators were bound when it was defined.
    const request = def.route.request ?? {};
    const headers = request.headers;
    if (headers !== undefined && !(headers instanceof z.ZodObject)) continue;
    def.route.request = { ...request, headers: (headers ?? z.object({})).extend(IfNoneMatch) };
  }
}

/** ClusterIdParam refuses an {id} no cluster can have with a 400 naming `id`, on every route that takes one. */
function documentClusterId(admin: OpenAPIHono<AdminEnv>): void {
  for (const def of admin.openAPIRegistry.definitions) {
    if (def.type !== 'route' || !def.route.path.includes('{id}')) continue;
    def.route.responses = { 400: badClusterId, ...def.route.responses };
  }
}

/** The admin API under /admin: JSON in and out, bearer ADMIN_TOKEN. */
export function adminApp(): OpenAPIHono<AdminEnv> {
  const admin = new OpenAPIHono<AdminEnv>();
  // The description is public: it is registered before the auth middleware, and Hono runs
  // handlers in registration order, so GET /openapi.json answers before auth is consulted.
  // Nothing else is exempt. (Exempting by path suffix would also exempt e.g.
  // PUT /clusters/{id}/deployments/openapi.json, a valid deployment id.)
  //
  // Generated once per isolate, at the first request (every route is registered by then): the
  // generator walks every schema (about 10 ms of CPU), and this route needs no token, so
  // generating per request let anyone spend the isolate's CPU ten milliseconds at a time.
  let description: string | null = null;
  admin.get('/openapi.json', (c) => {
    description ??= JSON.stringify(
      admin.getOpenAPIDocument({
        openapi: '3.0.3',
        info: { title: 'Wingsmith Hub admin API', version: '1' },
        servers: [{ url: '/admin' }],
        security: [{ bearer: [] }],
      }),
    );
    return c.body(description, 200, { 'content-type': 'application/json' });
  });
  admin.openAPIRegistry.registerComponent('securitySchemes', 'bearer', { type: 'http', scheme: 'bearer' });
  admin.use('*', adminAuth);
  // After the auth: a wrong token is refused without waiting on the database.
  admin.use('*', databaseRegion);
  admin.use('*', bodySizeGuard);
  admin.use('*', jsonBodyGuard);
  admin.use('*', requestPg);
  admin.use('*', pollCache);
  admin.route('/', clustersRouter);
  admin.route('/', desiredRouter);
  admin.route('/', readsRouter);
  admin.route('/', operationsRouter);
  admin.route('/', diagnosticsRouter);
  admin.route('/', fleetRouter);
  documentBodyGuard(admin);
  documentReads(admin);
  documentClusterId(admin);
  admin.onError((err, c) => {
    // A configuration the hub cannot serve with (the database another region's): the Worker's
    // own handler names the variable, for every route alike.
    if (err instanceof HubConfigError) throw err;
    // The framework's own refusals (a body it could not read, …) in the API's JSON shape.
    if (err instanceof HTTPException) {
      // A response of its own (a middleware that built one) is returned as it is.
      if (err.res) return err.getResponse();
      const status = err.status >= 400 && err.status < 500 ? err.status : 400;
      return jsonError(c, status as 400, status === 415 ? 'unsupported_media_type' : 'invalid', err.message || 'invalid request');
    }
    // A value the runtime cannot relay to or from a gateway shard (RPC carries 32 MiB at most).
    // A backstop both ways: the body guard bounds what a write sends, and the lists whose items
    // can be large (deployments, nodes) bound their pages in bytes. For a write it was the
    // request (413); a read sends nothing large, so it was the answer, the hub's fault and not
    // the client's (500: a retry of the same page fails the same way, a smaller ?limit= may not).
    if (err instanceof Error && RPC_TOO_LARGE.test(err.message)) {
      if (c.req.method === 'GET' || c.req.method === 'HEAD') {
        log.error('admin read answer too large to relay', { path: c.req.path, error: describeError(err) });
        return jsonError(c, 500, 'internal', 'the answer is larger than the hub can relay from its database; ask for fewer items (?limit=)');
      }
      log.warn('admin request too large to relay', { path: c.req.path, error: describeError(err) });
      return jsonError(c, 413, 'payload_too_large', 'the request is larger than the hub can relay to its database; send fewer items per request');
    }
    // The database refused the data itself (class 21/22/23, or 54: too large): a retry can never succeed.
    if (classifyDbError(err) === 'permanent') {
      log.warn('admin request refused by the database', { path: c.req.path, error: describeError(err) });
      return jsonError(c, 400, 'invalid', `the database refused the request's data: ${describeError(err).slice(0, 300)}`);
    }
    // A bug in the hub (a TypeError, say, here or relayed by name from a gateway shard): the same
    // request fails the same way until the code is fixed, so it is not "unavailable, retry" (a
    // script would retry it forever, and a proxy count it as an outage).
    if (isCodeError(err)) {
      log.error(`admin request failed: ${NOT_AN_OUTAGE}`, { path: c.req.path, error: describeError(err) });
      return jsonError(c, 500, 'internal', 'the hub failed to answer this request (a fault of its own, logged); retrying will not help');
    }
    // An outage (every write fails while Postgres is away) is a warning per request; a fault
    // (a schema behind the code) is an error: no retry mends it until a migration or deploy does.
    const line = failureLine('admin request', err);
    log[line.level](line.message, { path: c.req.path, ...line.fields });
    // A write whose statement was sent and not answered (its connection lost under it, or no
    // answer in time) may have committed: not "retry", which a script would take as "not
    // applied" and follow with a second operation. 503 stays for what surely was not applied.
    // And one that committed, whose answer then failed (the view read after a registry write).
    if (c.get('committed')) return jsonError(c, 504, 'applied', APPLIED_UNREAD);
    if (c.req.method !== 'GET' && c.req.method !== 'HEAD' && mayHaveCommitted(err)) {
      return jsonError(c, 504, 'outcome_unknown', OUTCOME_UNKNOWN);
    }
    // As the connect route says it: when to come back, so scripts and proxies back off on their own.
    c.header('Retry-After', '5');
    return jsonError(c, 503, 'unavailable', 'the hub could not complete the request; retry');
  });
  admin.notFound((c) => jsonError(c, 404, 'not_found', `no route ${c.req.method} ${c.req.path}`));
  return admin;
}
