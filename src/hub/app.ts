import { Hono } from 'hono';
import { adminApp } from './admin';
import { connect } from './connect';
import type { HubEnv } from './env';
import { describeError } from './db/errors';
import { jsonError } from './http-errors';
import { gatewaySql } from './db/gateway';

export function hubApp(): Hono<{ Bindings: HubEnv }> {
  const app = new Hono<{ Bindings: HubEnv }>();
  app.get('/v1/connect', connect);
  app.route('/admin', adminApp());
  // Readiness: the Worker is up and can reach the registry.
  app.get('/healthz', async (c) => {
    try {
      const { rows } = await gatewaySql(c.env).query<{ ok: number }>('select 1 as ok');
      return c.json({ ok: rows[0]?.ok === 1, database: 'ok' });
    } catch (err) {
      return c.json({ ok: false, database: 'unavailable', error: describeError(err) }, 503);
    }
  });
  app.notFound((c) => jsonError(c, 404, 'not_found', `no route ${c.req.method} ${c.req.path}`));
  return app;
}
