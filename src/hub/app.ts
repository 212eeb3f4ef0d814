import { Hono } from 'hono';
import { adminApp } from './admin';
import { adminHeaders } from './admin/app';
import { connect } from './connect';
import { dashboardApp } from './dashboard/route';
import type { HubEnv } from './env';
import { describeError, failureLine } from './db/errors';
import { createLogger } from './log';
import { jsonError } from './http-errors';
import { gatewaySql } from './db/gateway';
import { readSchemaState } from './db/schema-version';
import { claimDatabaseRegion } from './db/region-claim';
import { regionName } from './region';
import { checkAddressing } from './address';
import { checkDatabaseUrl, HubConfigError, hubConfig } from './config';

const log = createLogger({ component: 'healthz' });
const httpLog = createLogger({ component: 'http' });
const regionLog = createLogger({ component: 'db-region' });

/** One error line per isolate and problem: every request fails alike, and each would write one. */
const configLog = {
  logged: new Set<string>(),
  once(err: HubConfigError): void {
    if (this.logged.has(err.message)) return;
    this.logged.add(err.message);
    createLogger({ component: 'config' }).error('invalid hub configuration: every request is refused until it is fixed', { variable: err.variable, error: err.message });
  },
};

/**
 * The database's region as this isolate found it (db/region-claim.ts): read at its first request,
 * then only compared. A refusal is kept too (nothing but a new secret or the README's update
 * mends it, and either comes with a new isolate: a deploy, or the renamed region's). A failed
 * read is not an answer: kept neither way, read again at the next request.
 */
let regionChecked: { env: object; key: string; refusal: HubConfigError | null } | null = null;
let regionChecking: { key: string; done: Promise<void> } | null = null;
/** Failed region reads this isolate has logged, by what they said: an outage would write one per request. */
const regionReadFailures = new Set<string>();

/** Throws the refusal kept for this database; a promise only while the region is still to be read. */
function checkDatabaseRegion(env: HubEnv): Promise<void> | undefined {
  const checked = regionChecked;
  if (checked?.env !== env) return readDatabaseRegionOnce(env);
  if (checked.refusal) throw checked.refusal;
  return undefined;
}

async function readDatabaseRegionOnce(env: HubEnv): Promise<void> {
  const checked = regionChecked;
  const mine = regionName(hubConfig(env));
  const key = `${mine}\n${env.DATABASE_URL}`;
  if (checked?.key === key) {
    regionChecked = { ...checked, env };
    if (checked.refusal) throw checked.refusal;
    return;
  }
  if (regionChecking?.key !== key) {
    const done = readDatabaseRegion(env, mine, key).finally(() => {
      if (regionChecking?.done === done) regionChecking = null;
    });
    regionChecking = { key, done };
  }
  await regionChecking.done;
  if (regionChecked?.key === key && regionChecked.refusal) throw regionChecked.refusal;
}

async function readDatabaseRegion(env: HubEnv, mine: string, key: string): Promise<void> {
  let claimed: string | null;
  try {
    ({ claimed } = await claimDatabaseRegion(gatewaySql(env), mine));
  } catch (err) {
    // The request goes on to its route, which meets the database's state itself and answers as
    // it always has (an outage stays "unavailable", never "unconfigured").
    const line = failureLine('reading the database\'s region', err);
    if (regionReadFailures.size < 20 && !regionReadFailures.has(line.fields.error)) {
      regionReadFailures.add(line.fields.error);
      regionLog[line.level](`${line.message}; read again at the next request`, line.fields);
    }
    return;
  }
  // Unclaimed and refusing writes (/healthz says so): nothing can be claimed, or written, through
  // it until it is fixed; read again at the next request.
  if (claimed === null) return;
  const refusal =
    claimed === mine
      ? null
      : new HubConfigError(
          'DATABASE_URL',
          `this is the database of region ${claimed}, and this deployment serves region ${mine}: each region has its own ` +
            `database, and another region's clusters must not be served from here (set this region's own with ` +
            'wrangler secret put DATABASE_URL [--env <region>]; a region renamed on purpose: README "Configuration")',
        );
  regionChecked = { env, key, refusal };
}

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
    // And that the database is this region's: another region's would be served from here, its
    // sessions in this region's jurisdiction. A cached answer after the isolate's first request.
    const reading = checkDatabaseRegion(c.env);
    if (reading) await reading;
    await next();
  });
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
  // Readiness: the Worker is up, can reach the registry, and the registry has the migrations this
  // code needs (a deploy that skipped `npm run migrate` fails here, not in the first statement
  // that needs a new column). It also says which region this is, so a fleet view across regions
  // can tell an endpoint from another.
  app.get('/healthz', async (c) => {
    const region = hubConfig(c.env).HUB_REGION ?? null;
    try {
      const state = await readSchemaState(gatewaySql(c.env));
      if (state.schema !== 'ok') {
        log.error('the database is not migrated for this hub; run npm run migrate', { ...state });
        return c.json({ ok: false, database: 'ok', ...state, region }, 503);
      }
      if (state.read_only) {
        log.error('the database refuses writes (transaction_read_only is on): DATABASE_URL must name a writable primary, without default_transaction_read_only');
        return c.json({ ok: false, database: 'read_only', schema: state.schema, region }, 503);
      }
      return c.json({ ok: true, database: 'ok', schema: state.schema, region }, 200);
    } catch (err) {
      // Public: the driver's text can quote the secret DATABASE_URL (its role, database, host),
      // so the reason goes to the log only.
      const line = failureLine('healthz', err);
      log[line.level](line.message, line.fields);
      return c.json({ ok: false, database: 'unavailable', region }, 503);
    }
  });
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
