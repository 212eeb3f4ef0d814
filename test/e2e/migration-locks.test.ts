/**
 * `npm run migrate` against a live hub's database (README "Deploying": migrate first, then
 * deploy, while the hub serves). A migration's lock request that waits holds every later
 * statement on that table behind it, so the runner waits for each lock only briefly
 * (lock_timeout), rolls back and tries again with backoff for a bounded time, then fails naming
 * the migration and what to do. Migration 0016 (ALTER TABLE nodes: ACCESS EXCLUSIVE) behind a
 * long reader of `nodes` (a backup, a report) is the case: the hub's writes to `nodes` (which wait
 * PG_LOCK_TIMEOUT_MS, 2 s, for a lock) keep going, and the migration gives up instead of waiting
 * as long as the reader lives. The first test came from a review and failed before (the hub's
 * write timed out behind the migration, which waited without limit). The index migrations (0017,
 * 0018) are built CONCURRENTLY outside a transaction; one left invalid by a failed build is
 * built again.
 */
import { cp, mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { Client } from '@neondatabase/serverless';
import { migrate, MIGRATIONS_DIR } from '../../scripts/lib/migrations';
import { pgClient, withDatabase, withPg } from '../../scripts/lib/pg-node';

const databaseUrl = inject('databaseUrl');
const proxy = inject('pgWsProxy');
const embedded = inject('embeddedPostgres');

const scratch = `migration_locks_${process.pid}_${Date.now().toString(36)}`;
const serverUrl = withDatabase(databaseUrl, 'postgres');
const scratchUrl = withDatabase(databaseUrl, scratch);

let upTo0015: string;
let upTo0016: string;

async function open(url: string): Promise<Client> {
  const c = pgClient(url, proxy);
  c.on('error', () => undefined);
  await c.connect();
  return c;
}

describe.skipIf(embedded)('migrations against a live database', () => {
  beforeAll(async () => {
    await withPg(serverUrl, proxy, (c) => c.query(`create database "${scratch}"`));
    // The database as the release before 0016 left it, holding data.
    upTo0015 = await mkdtemp(path.join(tmpdir(), 'migration-locks-'));
    for (const f of await readdir(MIGRATIONS_DIR)) {
      if (f.endsWith('.sql') && f < '0016') await cp(path.join(MIGRATIONS_DIR, f), path.join(upTo0015, f));
    }
    upTo0016 = await mkdtemp(path.join(tmpdir(), 'migration-locks-'));
    for (const f of await readdir(MIGRATIONS_DIR)) {
      if (f.endsWith('.sql') && f < '0017') await cp(path.join(MIGRATIONS_DIR, f), path.join(upTo0016, f));
    }
    await migrate(scratchUrl, proxy, upTo0015);
    await withPg(scratchUrl, proxy, async (c) => {
      await c.query(`insert into clusters (uid, name, token_hash, token_issued_at) values ('c1', 'gpu-1', '\\x01', now())`);
      await c.query(
        `insert into nodes (cluster_uid, node_id, name, ready, schedulable, labels, taints, gpus, cpu_millis, memory_mb, obs_session, obs_seq)
         values ('c1', 'n1', 'n1', true, true, '{}', '[]', 8, 1000, 1000, 's', 1)`,
      );
    });
  });

  afterAll(async () => {
    await withPg(serverUrl, proxy, (c) => c.query(`drop database if exists "${scratch}" with (force)`)).catch(() => undefined);
    if (upTo0015) await rm(upTo0015, { recursive: true, force: true });
    if (upTo0016) await rm(upTo0016, { recursive: true, force: true });
  });

  it(
    'a migration waiting for a lock on a live table does not stall the hub\'s writes to it, and gives up with an error instead of waiting without limit',
    { retry: 0, timeout: 90_000 },
    async () => {
      // A long reader of `nodes` (a backup, a report): it holds ACCESS SHARE until it ends.
      const reader = await open(scratchUrl);
      await reader.query('begin');
      await reader.query('select count(*) from nodes');

      let settled: { ok: boolean; error?: string } | null = null;
      const started = Date.now();
      const migration = migrate(scratchUrl, proxy).then(
        () => (settled = { ok: true }),
        (err: unknown) => (settled = { ok: false, error: err instanceof Error ? err.message : String(err) }),
      );
      try {
        // Let the ALTER of 0016 reach its lock request.
        await new Promise((r) => setTimeout(r, 1_000));

        // What a session's ingest does: an upsert of a node, waiting at most 2 s for a lock.
        const hub = await open(scratchUrl);
        let write: string;
        try {
          await hub.query(`set lock_timeout = 2000`);
          await hub.query(
            `insert into nodes (cluster_uid, node_id, name, ready, schedulable, labels, taints, gpus, cpu_millis, memory_mb, obs_session, obs_seq)
             values ('c1', 'n1', 'n1', true, true, '{}', '[]', 8, 1000, 1000, 's', 2)
             on conflict (cluster_uid, node_id) do update set obs_seq = excluded.obs_seq`,
          );
          write = 'ok';
        } catch (err) {
          write = `${(err as { code?: string }).code ?? ''} ${err instanceof Error ? err.message : String(err)}`;
        } finally {
          await hub.end().catch(() => undefined);
        }
        // Now: "55P03 canceling statement due to lock timeout": the hub's write waited behind the
        // migration's queued ACCESS EXCLUSIVE request.
        expect(write).toBe('ok');

        // The migration must not wait for as long as the reader lives: it gives up with an error.
        while (settled === null && Date.now() - started < 30_000) await new Promise((r) => setTimeout(r, 200));
        expect(settled, 'migrate() was still waiting for its lock after 30 s').not.toBeNull();
        expect(settled).toMatchObject({ ok: false });
      } finally {
        await reader.query('rollback').catch(() => undefined);
        await reader.end().catch(() => undefined);
        await migration;
      }
    },
  );

  /** A transaction reading `nodes` (ACCESS SHARE until it ends). */
  async function longReader(): Promise<Client> {
    const reader = await open(scratchUrl);
    await reader.query('begin');
    await reader.query('select count(*) from nodes');
    return reader;
  }

  const sql = async <R extends Record<string, unknown>>(text: string): Promise<R[]> =>
    withPg(scratchUrl, proxy, async (c) => (await c.query<R>(text)).rows);

  it('the error names the migration and what to do, and leaves nothing of it applied', { retry: 0, timeout: 30_000 }, async () => {
    const reader = await longReader();
    try {
      await expect(migrate(scratchUrl, proxy, upTo0016, { lockWaitMs: 2_000 })).rejects.toThrow(
        /^migration 0016_observed_counts_bigint\.sql could not take its locks in 2 s \(\d+ tries, each waiting at most 500 ms .*pg_stat_activity.*run the migration again \(nothing of it was applied\)$/s,
      );
    } finally {
      await reader.query('rollback').catch(() => undefined);
      await reader.end().catch(() => undefined);
    }
    expect(await sql(`select exists (select 1 from schema_migrations where version = '0016') as recorded, format_type(atttypid, atttypmod) as gpus
                        from pg_attribute where attrelid = 'nodes'::regclass and attname = 'gpus'`)).toEqual([{ recorded: false, gpus: 'integer' }]);
  });

  it('a lock held for a moment is waited out: the migration is tried again and applies', { retry: 0, timeout: 30_000 }, async () => {
    const reader = await longReader();
    const release = new Promise((r) => setTimeout(r, 1_500)).then(async () => {
      await reader.query('rollback');
      await reader.end();
    });
    const result = await migrate(scratchUrl, proxy, upTo0016);
    await release;
    expect(result.applied.map((m) => m.file)).toEqual(['0016_observed_counts_bigint.sql']);
    expect(await sql(`select format_type(atttypid, atttypmod) as gpus from pg_attribute where attrelid = 'nodes'::regclass and attname = 'gpus'`)).toEqual([{ gpus: 'bigint' }]);
  });

  it('the index migrations build their indexes concurrently, again when a failed build left one invalid, and fine when one exists already', { retry: 0, timeout: 30_000 }, async () => {
    // Two rejections at one instant, so that a unique build of rejections_by_time fails part way,
    // as a CREATE INDEX CONCURRENTLY cut by a lock timeout or a cancel does: it leaves the index
    // behind, marked invalid, where IF NOT EXISTS alone would take it for done.
    await sql(`insert into rejections (cluster_uid, session_id, seq, type, reason, received_at)
               values ('c1', 's', 1, 'node.observed', 'x', '2026-01-01Z'), ('c1', 's', 2, 'node.observed', 'x', '2026-01-01Z')`);
    await expect(sql('create unique index concurrently rejections_by_time on rejections (received_at)')).rejects.toThrow(/duplicate key|could not create unique index/);
    // Built by hand before the deploy: the migration must not trip over it.
    await sql('create index concurrently operation_events_in_order on operation_events (operation_id, at, seq, frame_id)');

    const result = await migrate(scratchUrl, proxy);
    // Every migration after 0016 (the two index migrations first), whatever later ones exist.
    const after0016 = (await readdir(MIGRATIONS_DIR)).filter((f) => f.endsWith('.sql') && f > '0017').sort();
    expect(after0016.slice(0, 2)).toEqual(['0017_rejections_by_time.sql', '0018_operation_history_order.sql']);
    expect(result.applied.map((m) => m.file)).toEqual(after0016);
    const indexes = await sql<{ name: string; valid: boolean; def: string }>(
      `select c.relname as name, i.indisvalid as valid, pg_get_indexdef(i.indexrelid) as def from pg_index i join pg_class c on c.oid = i.indexrelid
        where c.relname in ('rejections_by_cluster_time', 'rejections_by_time', 'operation_events_in_order') order by 1`,
    );
    expect(indexes.map(({ name, valid }) => ({ name, valid }))).toEqual([
      { name: 'operation_events_in_order', valid: true },
      { name: 'rejections_by_cluster_time', valid: true },
      { name: 'rejections_by_time', valid: true },
    ]);
    expect(indexes.find((x) => x.name === 'rejections_by_time')?.def).not.toMatch(/UNIQUE/);
    // Recorded: a rerun has nothing to do.
    expect((await migrate(scratchUrl, proxy)).applied).toEqual([]);
  });
});

describe.skipIf(embedded)('migrate beside another migrate and beside a reader of the ledger', () => {
  const created: string[] = [];
  const fresh = async (tag: string): Promise<string> => {
    const db = `migration_locks_${tag}_${process.pid}_${Date.now().toString(36)}`;
    created.push(db);
    await withPg(serverUrl, proxy, (c) => c.query(`create database "${db}"`));
    return withDatabase(databaseUrl, db);
  };
  afterAll(async () => {
    for (const db of created) await withPg(serverUrl, proxy, (c) => c.query(`drop database if exists "${db}" with (force)`)).catch(() => undefined);
  });

  // README "Deploying": the advisory lock keeps two migrates apart; migrate is idempotent. The
  // one waiting sat inside pg_advisory_lock, a statement the other's CREATE INDEX CONCURRENTLY
  // (0017, 0018, 0020) waited for: "deadlock detected" failed one of them, every time.
  it('two migrates of a fresh database at once both succeed, the second finding everything applied', { retry: 0, timeout: 90_000 }, async () => {
    const url = await fresh('conc');
    const results = await Promise.allSettled([migrate(url, proxy), migrate(url, proxy)]);
    expect(results.flatMap((r) => (r.status === 'rejected' ? [String((r.reason as Error)?.message ?? r.reason)] : []))).toEqual([]);
  });

  // A backup holds ACCESS SHARE on the ledger while it runs. The ledger's own
  // `add column if not exists`, run every time, asked for ACCESS EXCLUSIVE with no time limit:
  // migrate waited as long as the backup, and the hub's read of the ledger (/healthz) behind it.
  it("an up-to-date migrate neither waits behind a backup's read of the ledger nor holds the hub's read of it", { retry: 0, timeout: 60_000 }, async () => {
    const url = await fresh('ledger');
    await migrate(url, proxy);
    const reader = await open(url);
    await reader.query('begin isolation level repeatable read');
    await reader.query('select count(*) from schema_migrations');
    const run = migrate(url, proxy).then(
      () => ({ ok: true }),
      (err: unknown) => ({ ok: false, error: err instanceof Error ? err.message : String(err) }),
    );
    try {
      await new Promise((r) => setTimeout(r, 1_000));
      // What /healthz runs (src/hub/db/schema-version.ts), with the hub's 2 s lock wait.
      const hub = await open(url);
      try {
        await hub.query('set lock_timeout = 2000');
        expect((await hub.query('select max(version) as latest from schema_migrations')).rows).toHaveLength(1);
      } finally {
        await hub.end().catch(() => undefined);
      }
      expect(await Promise.race([run, new Promise((r) => setTimeout(() => r('still waiting after 20 s'), 20_000))])).toEqual({ ok: true });
    } finally {
      await reader.query('rollback').catch(() => undefined);
      await reader.end().catch(() => undefined);
      await run;
    }
  });
});
