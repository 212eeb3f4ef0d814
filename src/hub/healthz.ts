import type { Context } from 'hono';
import { hubConfig } from './config';
import { failureLine } from './db/errors';
import { gatewaySql } from './db/gateway-client';
import { readSchemaState, type SchemaState } from './db/schema-version';
import type { HubEnv } from './env';
import { createLogger } from './log';

const log = createLogger({ component: 'healthz' });

/**
 * The read under way, shared by every readiness check that arrives while it runs. The route is
 * public, so without this a flood of checks was a flood of statements on the gateway's few
 * connections, queued in front of token lookups, claims and the fleet poll; now each isolate has
 * at most one in flight, and its answer is never older than that one statement. Nothing is kept
 * once it settles: the next check reads again.
 */
let reading: { env: object; read: Promise<SchemaState> } | null = null;

/** The read to answer from, and whether this check started it (it alone logs the outcome). */
function sharedSchemaRead(env: HubEnv): { read: Promise<SchemaState>; started: boolean } {
  if (reading?.env === env) return { read: reading.read, started: false };
  const read = readSchemaState(gatewaySql(env, 'public')).finally(() => {
    if (reading?.read === read) reading = null;
  });
  reading = { env, read };
  return { read, started: true };
}

/**
 * Readiness: the Worker is up, can reach the registry, and the registry has the migrations this
 * code needs (a deploy that skipped `npm run migrate` fails here, not in the first statement that
 * needs a new column). It also says which region this is, so a fleet view across regions can tell
 * an endpoint from another. A failure is logged once per read, not once per check that shared it.
 */
export async function healthz(c: Context<{ Bindings: HubEnv }>): Promise<Response> {
  const region = hubConfig(c.env).HUB_REGION ?? null;
  const { read, started: first } = sharedSchemaRead(c.env);
  // The checks sharing it wait on this request's I/O: it runs to its end even if this client
  // goes away first.
  if (first) c.executionCtx.waitUntil(read.catch(() => undefined));
  try {
    const state = await read;
    if (state.schema !== 'ok') {
      if (first) log.error('the database is not migrated for this hub; run npm run migrate', { ...state });
      return c.json({ ok: false, database: 'ok', ...state, region }, 503);
    }
    if (state.read_only) {
      if (first) log.error('the database refuses writes (transaction_read_only is on): DATABASE_URL must name a writable primary, without default_transaction_read_only');
      return c.json({ ok: false, database: 'read_only', schema: state.schema, region }, 503);
    }
    return c.json({ ok: true, database: 'ok', schema: state.schema, region }, 200);
  } catch (err) {
    // Public: the driver's text can quote the secret DATABASE_URL (its role, database, host),
    // so the reason goes to the log only.
    if (first) {
      const line = failureLine('healthz', err);
      log[line.level](line.message, line.fields);
    }
    return c.json({ ok: false, database: 'unavailable', region }, 503);
  }
}
