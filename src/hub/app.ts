import { Hono } from 'hono';
import { adminApp } from './admin';
import { connect } from './connect';
import { dashboardApp } from './dashboard/route';
import type { HubEnv } from './env';
import { failureLine } from './db/errors';
import { createLogger } from './log';
import { jsonError } from './http-errors';
import { gatewaySql } from './db/gateway';
import { readSchemaState } from './db/schema-version';
import { hubConfig } from './config';

const log = createLogger({ component: 'healthz' });

export function hubApp(): Hono<{ Bindings: HubEnv }> {
  const app = new Hono<{ Bindings: HubEnv }>();
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
      const schema = await readSchemaState(gatewaySql(c.env));
      const ok = schema.schema === 'ok';
      if (!ok) log.error('the database is not migrated for this hub; run npm run migrate', { ...schema });
      return c.json({ ok, database: 'ok', ...schema, region }, ok ? 200 : 503);
    } catch (err) {
      // Public: the driver's text can quote the secret DATABASE_URL (its role, database, host),
      // so the reason goes to the log only.
      const line = failureLine('healthz', err);
      log[line.level](line.message, line.fields);
      return c.json({ ok: false, database: 'unavailable', region }, 503);
    }
  });
  app.notFound((c) => jsonError(c, 404, 'not_found', `no route ${c.req.method} ${c.req.path}`));
  return app;
}
