import { Hono } from 'hono';
import { adminApp } from './admin';
import { adminHeaders } from './admin/app';
import { connect, refuseWithoutEnrollmentToken } from './connect';
import { dashboardApp } from './dashboard/route';
import type { HubEnv } from './env';
import { describeError } from './db/errors';
import { createLogger } from './log';
import { jsonError } from './http-errors';
import { healthz } from './healthz';
import { databaseRegion } from './database-region';
import { checkAddressing } from './address';
import { checkDatabaseUrl, HubConfigError, hubConfig } from './config';

const httpLog = createLogger({ component: 'http' });

/** One error line per isolate and problem: every request fails alike, and each would write one. */
const configLog = {
  logged: new Set<string>(),
  once(err: HubConfigError): void {
    if (this.logged.has(err.message)) return;
    this.logged.add(err.message);
    createLogger({ component: 'config' }).error('invalid hub configuration: every request is refused until it is fixed', { variable: err.variable, error: err.message });
  },
};

export function hubApp(): Hono<{ Bindings: HubEnv }> {
  const app = new Hono<{ Bindings: HubEnv }>();
  // First, so every /admin answer carries them, the configuration's refusals below included.
  app.use('/admin/*', adminHeaders);
  // Every request checks the configuration first (parsed once per env), so a var out of its
  // bounds fails every route the same way, naming the var, rather than each route its own way
  // (an admin read took it for a database outage, /healthz answered a bare 500).
  app.use('*', async (c, next) => {
    hubConfig(c.env);
    // So are the database secret and the jurisdiction: without them every route failed at its
    // first statement, reported as a database outage.
    checkDatabaseUrl(c.env);
    checkAddressing(c.env);
    await next();
  });
  // A connect without an enrollment token is refused before any database work, the region's
  // read below included (connect.ts).
  app.use('/v1/connect', refuseWithoutEnrollmentToken);
  // And that the database is this region's: another region's would be served from here, its
  // sessions in this region's jurisdiction. Only where the database is used: the admin API reads
  // it after its auth (admin/index.ts), and the dashboard's page and files need no database, so a
  // stalled one does not hold them for the read's deadline.
  app.use('/v1/connect', databaseRegion);
  app.use('/healthz', databaseRegion);
  app.onError((err, c) => {
    if (err instanceof HubConfigError) {
      configLog.once(err);
      return jsonError(c, 503, 'unconfigured', err.message, err.variable);
    }
    // What no route answered itself: still a typed body, and a line saying what it was.
    httpLog.error('request failed', { path: c.req.path, error: describeError(err) });
    return jsonError(c, 500, 'internal', 'the hub failed to answer this request');
  });
  app.get('/v1/connect', connect);
  app.route('/admin', adminApp());
  app.route('/', dashboardApp());
  app.get('/healthz', healthz);
  app.notFound((c) => {
    // Hono answers a known path with an unknown method as it answers an unknown path; a client
    // (or a generated one) needs to tell "wrong method" from "no such resource" (RFC 9110 15.5.6).
    const allow = allowedMethods(app, c.req.path);
    if (allow.length === 0) return jsonError(c, 404, 'not_found', `no route ${c.req.method} ${c.req.path}`);
    c.header('Allow', allow.join(', '));
    return jsonError(c, 405, 'method_not_allowed', `${c.req.method} is not allowed on ${c.req.path}; allowed: ${allow.join(', ')}`);
  });
  return app;
}

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;

/**
 * The methods some route takes at `path`. Middleware (`use`, method ALL) matches every path and
 * method, so it does not count. HEAD is served by the GET route (Hono runs GET for it).
 */
function allowedMethods(app: Hono<{ Bindings: HubEnv }>, path: string): string[] {
  const routed = (method: string) => app.router.match(method, path)[0].some(([[, route]]) => route.method !== 'ALL');
  return METHODS.filter((m) => routed(m === 'HEAD' ? 'GET' : m));
}
