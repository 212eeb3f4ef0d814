/**
 * A database that takes no writes: a read replica's URL, or `default_transaction_read_only` set
 * on the database or role by its DBA. Every read works and every write of the hub's fails (25006):
 * no cluster can be made, no operator claimed, no frame applied. Before, /healthz (the deploy's
 * readiness check) answered 200 over it, and each failed write was logged at warn as "database
 * unavailable", an outage to wait out, when only a fixed DATABASE_URL mends it.
 */
import { describe, expect, inject, it } from 'vitest';
import { FAST_TIMERS, sleep, useHub } from './support/hub';
import { captureHubLines } from './support/hub-lines';

const EMBEDDED = inject('embeddedPostgres');
const lines = captureHubLines();

// Set on this file's own database before the hub starts; the embedded Postgres is one database
// shared by every file: left alone there.
const h = useHub({ ...FAST_TIMERS }, async () => {
  if (!EMBEDDED) {
    const db = (await h.sql<{ db: string }>('select current_database() as db'))[0]?.db;
    await h.sql(`alter database "${db}" set default_transaction_read_only = on`);
  }
  return {};
});

describe.skipIf(EMBEDDED)('a database with default_transaction_read_only = on', () => {
  it('/healthz answers 503 database "read_only", and says why at error', async () => {
    const r = await fetch(`${h.hub.url}/healthz`);
    expect({ status: r.status, body: await r.json() }).toEqual({ status: 503, body: { ok: false, database: 'read_only', schema: 'ok', region: null } });
    await sleep(300);
    expect(lines.filter((l) => l.component === 'healthz')[0]).toMatchObject({ level: 'error', msg: expect.stringContaining('refuses writes') });
  });

  it('a write refused for it (25006) is logged as a fault at error, not "database unavailable" at warn', async () => {
    const r = await h.admin('POST', '/clusters', { name: 'ro-1' });
    expect(r.status).toBe(503);
    await sleep(300);
    const line = lines.find((l) => l.component === 'admin' && String(l.error).startsWith('25006'));
    expect(line).toMatchObject({ level: 'error', msg: expect.stringContaining('not an outage') });
  });
});
