/**
 * GET /healthz is the deploy's readiness check (README "Deploying": migrate, then deploy, then
 * curl /healthz). It answers 503 when the database lacks a migration this hub's statements need,
 * naming what is applied and what is required, instead of 200 over a registry whose first
 * statement touching a new column would fail. A database ahead of the hub (migrated for the next
 * release while this one still serves) is ready.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SCHEMA_REQUIRED } from '../../src/hub/db/schema-version';
import { startHub } from '../e2e/support/worker';
import { fileDatabaseUrl, withFileSql } from '../support/file-database';
import { FAST_TIMERS } from './support/hub';

let hub: Awaited<ReturnType<typeof startHub>>;
beforeAll(async () => {
  hub = await startHub({ vars: { ...FAST_TIMERS, DATABASE_URL: await fileDatabaseUrl() } });
}, 60_000);
afterAll(async () => {
  await hub?.stop();
});

async function health(): Promise<{ status: number; body: Record<string, unknown> }> {
  const r = await fetch(`${hub.url}/healthz`);
  return { status: r.status, body: (await r.json()) as Record<string, unknown> };
}

describe('GET /healthz and the schema', () => {
  it('is ready on a database migrated to this hub', async () => {
    expect(await health()).toEqual({ status: 200, body: { ok: true, database: 'ok', schema: 'ok', region: null } });
  });

  it('answers 503 "behind", naming applied and required, when the newest migration is not applied; ready again once it is', async () => {
    const row = await withFileSql(async (sql) => (await sql.query<Record<string, unknown>>('delete from schema_migrations where version = $1 returning *', [SCHEMA_REQUIRED])).rows[0]);
    expect(row, 'the test database records the required migration').toBeDefined();
    try {
      const h = await health();
      expect(h.status).toBe(503);
      expect(h.body).toMatchObject({ ok: false, database: 'ok', schema: 'behind', schema_required: SCHEMA_REQUIRED });
      expect(String(h.body.schema_applied) < SCHEMA_REQUIRED).toBe(true);
    } finally {
      await withFileSql((sql) =>
        sql.query('insert into schema_migrations (version, name, applied_at, checksum) values ($1, $2, $3, $4)', [row!.version, row!.name, row!.applied_at, row!.checksum]),
      );
    }
    expect((await health()).status).toBe(200);
  });

  it('is ready on a database ahead of the hub (the next release migrated first)', async () => {
    await withFileSql((sql) => sql.query(`insert into schema_migrations (version, name) values ('9999', 'from_the_future')`));
    try {
      expect(await health()).toMatchObject({ status: 200, body: { ok: true, schema: 'ok' } });
    } finally {
      await withFileSql((sql) => sql.query(`delete from schema_migrations where version = '9999'`));
    }
  });

  it('answers 503 "missing" on a database never migrated (no migration ledger)', async () => {
    await withFileSql((sql) => sql.query('alter table schema_migrations rename to schema_migrations_hidden'));
    try {
      const h = await health();
      expect(h).toEqual({ status: 503, body: { ok: false, database: 'ok', schema: 'missing', schema_required: SCHEMA_REQUIRED, region: null } });
    } finally {
      await withFileSql((sql) => sql.query('alter table schema_migrations_hidden rename to schema_migrations'));
    }
    expect((await health()).status).toBe(200);
  });

  it('answers 503 "missing" too when the ledger exists but records no migration (a first migrate that failed after making it)', async () => {
    await withFileSql((sql) => sql.query('create table schema_migrations_saved as select * from schema_migrations'));
    await withFileSql((sql) => sql.query('delete from schema_migrations'));
    try {
      expect(await health()).toEqual({ status: 503, body: { ok: false, database: 'ok', schema: 'missing', schema_required: SCHEMA_REQUIRED, region: null } });
    } finally {
      await withFileSql((sql) => sql.query('insert into schema_migrations select * from schema_migrations_saved'));
      await withFileSql((sql) => sql.query('drop table schema_migrations_saved'));
    }
    expect((await health()).status).toBe(200);
  });
});
