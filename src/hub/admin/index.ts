import { OpenAPIHono } from '@hono/zod-openapi';
import { HTTPException } from 'hono/http-exception';
import { classifyDbError, describeError, failureLine } from '../db/errors';
import { jsonError } from '../http-errors';
import { createLogger } from '../log';
import { adminAuth, errorResponse, requestPg, type AdminEnv } from './app';
import { jsonBodyGuard, MAX_BODY_BYTES } from './body-guard';
import { clustersRouter } from './clusters';
import { desiredRouter } from './desired';
import { diagnosticsRouter } from './diagnostics';
import { fleetRouter } from './fleet';
import { operationsRouter } from './operations';
import { pollCache } from './poll-cache';
import { readsRouter } from './reads';

const log = createLogger({ component: 'admin' });
/** workerd's refusal of an RPC value over its limit ("Serialized RPC arguments or return values are limited to 32MiB…"). */
const RPC_TOO_LARGE = /Serialized RPC arguments or return values are limited/;

/**
 * The body guard answers for every route that takes a JSON body, whichever router defines it:
 * its answers are documented on each such route here, in one place, as the guard is applied
 * (a route's own description of a status, if it has one, is kept).
 */
function documentBodyGuard(admin: OpenAPIHono<AdminEnv>): void {
  for (const def of admin.openAPIRegistry.definitions) {
    if (def.type !== 'route' || !def.route.request?.body) continue;
    def.route.responses = {
      413: errorResponse(`payload_too_large: the body is over ${MAX_BODY_BYTES} bytes`),
      415: errorResponse('unsupported_media_type: the body is not application/json'),
      ...def.route.responses,
    };
  }
}

/** The admin API under /admin: JSON in and out, bearer ADMIN_TOKEN. */
export function adminApp(): OpenAPIHono<AdminEnv> {
  const admin = new OpenAPIHono<AdminEnv>();
  // The description is public: it is registered before the auth middleware, and Hono runs
  // handlers in registration order, so GET /openapi.json answers before auth is consulted.
  // Nothing else is exempt. (Exempting by path suffix would also exempt e.g.
  // PUT /clusters/{id}/deployments/openapi.json, a valid deployment id.)
  admin.doc('/openapi.json', {
    openapi: '3.0.3',
    info: { title: 'Wingsmith Hub admin API', version: '1' },
    servers: [{ url: '/admin' }],
    security: [{ bearer: [] }],
  });
  admin.openAPIRegistry.registerComponent('securitySchemes', 'bearer', { type: 'http', scheme: 'bearer' });
  admin.use('*', adminAuth);
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
  admin.onError((err, c) => {
    // The framework's own refusals (a body it could not read, …) in the API's JSON shape.
    if (err instanceof HTTPException) {
      // A response of its own (a middleware that built one) is returned as it is.
      if (err.res) return err.getResponse();
      const status = err.status >= 400 && err.status < 500 ? err.status : 400;
      return jsonError(c, status as 400, status === 415 ? 'unsupported_media_type' : 'invalid', err.message || 'invalid request');
    }
    // A request the runtime cannot relay to a gateway shard (RPC carries 32 MiB at most): the
    // body guard's bound keeps bodies under it, so this is a backstop; a retry can never succeed.
    if (err instanceof Error && RPC_TOO_LARGE.test(err.message)) {
      log.warn('admin request too large to relay', { path: c.req.path, error: describeError(err) });
      return jsonError(c, 413, 'payload_too_large', 'the request is larger than the hub can relay to its database; send fewer items per request');
    }
    // The database refused the data itself (class 21/22/23): a retry can never succeed.
    if (classifyDbError(err) === 'permanent') {
      log.warn('admin request refused by the database', { path: c.req.path, error: describeError(err) });
      return jsonError(c, 400, 'invalid', `the database refused the request's data: ${describeError(err).slice(0, 300)}`);
    }
    // An outage (every write fails while Postgres is away) is a warning per request; a fault
    // (a schema behind the code, a bug) is an error: no retry mends it.
    const line = failureLine('admin request', err);
    log[line.level](line.message, { path: c.req.path, ...line.fields });
    return jsonError(c, 503, 'unavailable', 'the hub could not complete the request; retry');
  });
  admin.notFound((c) => jsonError(c, 404, 'not_found', `no route ${c.req.method} ${c.req.path}`));
  return admin;
}
