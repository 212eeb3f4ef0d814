/**
 * An index migration built CONCURRENTLY while the hub serves waits out the transactions older
 * than it instead of being cancelled by the lock timeout meant for the locks that block the hub.
 * Every wait of such a build is a lock wait: under the runner's 500 ms lock_timeout, any
 * transaction open that long anywhere in the database (a backup, a report, an ingest statement
 * waiting on a row) cancelled it, left its index invalid, and after the retry budget failed the
 * migration (found by a read-only review of the migrations; fails on the code before).
 */
import { cp, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { migrate, MIGRATIONS_DIR } from '../../scripts/lib/migrations';
import { pgClient, withDatabase, withPg } from '../../scripts/lib/pg-node';

const databaseUrl = inject('databaseUrl');
const proxy = inject('pgWsProxy');
const embedded = inject('embeddedPostgres');
const scratch = `migration_cic_${process.pid}_${Date.now().toString(36)}`;
const serverUrl = withDatabase(databaseUrl, 'postgres');
const scratchUrl = withDatabase(databaseUrl, scratch);
let before0031 = '';

describe.skipIf(embedded)('an index migration built concurrently', () => {
  beforeAll(async () => {
    await withPg(serverUrl, proxy, (c) => c.query(`create database "${scratch}"`));
    before0031 = await mkdtemp(path.join(tmpdir(), 'migration-cic-'));
    for (const f of await readdir(MIGRATIONS_DIR)) {
      if (f.endsWith('.sql') && f < '0031') await cp(path.join(MIGRATIONS_DIR, f), path.join(before0031, f));
    }
    await migrate(scratchUrl, proxy, before0031);
  }, 60_000);
  afterAll(async () => {
    await withPg(serverUrl, proxy, (c) => c.query(`drop database if exists "${scratch}" with (force)`)).catch(() => undefined);
    if (before0031) await rm(before0031, { recursive: true, force: true });
  });

  it('waits out a transaction older than it (3 s, past the retry budget of 1 s) and is applied, its index valid', { retry: 0, timeout: 60_000 }, async () => {
    // A report's snapshot, on a table the index does not touch.
    const reader = pgClient(scratchUrl, proxy);
    reader.on('error', () => undefined);
    await reader.connect();
    await reader.query('begin isolation level repeatable read');
    await reader.query('select count(*) from clusters');
    const ended = new Promise((r) => setTimeout(r, 3_000)).then(async () => {
      await reader.query('rollback');
      await reader.end();
    });
    try {
      const result = await migrate(scratchUrl, proxy, MIGRATIONS_DIR, { lockWaitMs: 1_000 });
      expect(result.applied.map((m) => m.file)).toContain('0031_open_operations.sql');
    } finally {
      await ended;
    }
    const [index] = await withPg(scratchUrl, proxy, async (c) =>
      (await c.query<{ valid: boolean }>(`select i.indisvalid as valid from pg_index i join pg_class c on c.oid = i.indexrelid where c.relname = 'operations_open'`)).rows,
    );
    expect(index).toEqual({ valid: true });
  });
});
