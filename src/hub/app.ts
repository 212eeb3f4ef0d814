import { Hono } from 'hono';
import { adminApp } from './admin';
import { connect } from './connect';
import { dashboardApp } from './dashboard/route';
import type { HubEnv } from './env';
import { failureLine } from './db/errors';
import { createLogger } from './log';
import { jsonError } from './http-errors';
import { gatewaySql } from './db/gateway';
import { hubConfig } from './config';

const log = createLogger({ component: 'healthz' });

export function hubApp(): Hono<{ Bindings: HubEnv }> {
  const app = new Hono<{ Bindings: HubEnv }>();
  app.get('/v1/connect', connect);
  app.route('/admin', adminApp());
  app.route('/', dashboardApp());
  // Readiness: the Worker is up and can reach the registry. It also says which region this is,
  // so a fleet view across regions can tell an endpoint from another.
  app.get('/healthz', async (c) => {
    const region = hubConfig(c.env).HUB_REGION ?? null;
    try {
      const { rows } = await gatewaySql(c.env).query<{ ok: number }>('select 1 as ok');
      return c.json({ ok: rows[0]?.ok === 1, database: 'ok', region });
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
