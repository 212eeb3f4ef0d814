/**
 * "An outage is warn, a fault someone must fix is error": a connection the server refuses for what
 * the DATABASE_URL says (SQLSTATE class 28: a role that does not exist, a wrong password) is a
 * fault. Pg.connect keeps the server's SQLSTATE on the ConnectionLostError it raises, so the
 * readiness check logs it at error, not "database unavailable" at warn forever as if the database
 * were merely down (retrying is unchanged: classifyDbError still calls it transient).
 *
 * Real workerd, real PostgreSQL 15; the hub's DATABASE_URL names a role the server does not have.
 * The hub's JSON lines are read from the Node process (wrangler relays the worker's console).
 */
import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, sleep, useHub } from './support/hub';
import { captureHubLines } from './support/hub-lines';

const lines = captureHubLines();

const h = useHub({ ...FAST_TIMERS, DATABASE_URL: 'postgresql://rv_no_such_role@127.0.0.1:5432/test' });

describe('a misconfigured database is a fault, not an outage', () => {
  it('a role the server refuses (SQLSTATE 28000) is logged at error, not "database unavailable" at warn', async () => {
    const r = await fetch(`${h.hub.url}/healthz`);
    expect(r.status).toBe(503);
    await sleep(500);
    const healthz = lines.filter((l) => l.component === 'healthz');
    expect(healthz.length, 'the failed readiness check is logged').toBeGreaterThan(0);
    expect(healthz[0], 'the line for an authorization failure').toMatchObject({ level: 'error' });
  }, 30_000);
});
