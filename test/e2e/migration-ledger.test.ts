/**
 * The migration ledger (schema_migrations) records the sha256 of each file it applied, and
 * `npm run migrate` refuses, naming the file, when an applied file's text has changed since,
 * instead of answering "up to date" over a schema that is not the one the file describes. A
 * ledger written before checksums were kept gets them on its first run (trust on first use). A
 * no-transaction migration (-- wingsmith:no-transaction) is recorded only once every step
 * succeeded. The first test came from a review and failed before (the edit went unnoticed).
 */
import { createHash } from 'node:crypto';
import { cp, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { migrate, MIGRATIONS_DIR, readMigrations } from '../../scripts/lib/migrations';
import { withDatabase, withPg } from '../../scripts/lib/pg-node';

const databaseUrl = inject('databaseUrl');
const proxy = inject('pgWsProxy');
const embedded = inject('embeddedPostgres');

const scratch = `migration_ledger_${process.pid}_${Date.now().toString(36)}`;
const serverUrl = withDatabase(databaseUrl, 'postgres');
const scratchUrl = withDatabase(databaseUrl, scratch);
const older = `${scratch}_older`;
const olderUrl = withDatabase(databaseUrl, older);
let dir: string;

describe.skipIf(embedded)('migration ledger', () => {
  beforeAll(async () => {
    await withPg(serverUrl, proxy, async (c) => {
      await c.query(`create database "${scratch}"`);
      await c.query(`create database "${older}"`);
    });
    dir = await mkdtemp(path.join(tmpdir(), 'migration-ledger-'));
    for (const f of await readdir(MIGRATIONS_DIR)) if (f.endsWith('.sql')) await cp(path.join(MIGRATIONS_DIR, f), path.join(dir, f));
  });

  afterAll(async () => {
    await withPg(serverUrl, proxy, async (c) => {
      await c.query(`drop database if exists "${scratch}" with (force)`);
      await c.query(`drop database if exists "${older}" with (force)`);
    }).catch(() => undefined);
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('a migration edited after it was applied is refused, naming the file, not reported "up to date"', { retry: 0 }, async () => {
    const first = await migrate(scratchUrl, proxy, dir);
    expect(first.applied.map((m) => m.file)).toContain('0018_operation_history_order.sql');

    // The applied file is changed in place (here: its index gets another column order), as an
    // edit to an already released migration would be.
    const file = path.join(dir, '0018_operation_history_order.sql');
    const text = await readFile(file, 'utf8');
    await writeFile(file, text.replace('(operation_id, at, seq, frame_id)', '(operation_id, seq, at, frame_id)'));

    // Now: resolves with applied [] ("up to date"), and the database keeps the old index.
    await expect(migrate(scratchUrl, proxy, dir)).rejects.toThrow(/0018_operation_history_order\.sql/);
  });

  it('a ledger from before checksums gets them on its first run, and an edit after that is refused', { retry: 0 }, async () => {
    const files = await readMigrations(MIGRATIONS_DIR);
    await migrate(olderUrl, proxy);
    // What a database migrated by the earlier runner holds: no checksum column.
    await withPg(olderUrl, proxy, (c) => c.query('alter table schema_migrations drop column checksum'));

    const first = await migrate(olderUrl, proxy);
    expect(first.applied).toEqual([]);
    expect(first.checksumsRecorded).toEqual(files.map((m) => m.version));
    const { rows } = await withPg(olderUrl, proxy, (c) => c.query<{ version: string; checksum: string }>('select version, checksum from schema_migrations order by version'));
    expect(rows).toEqual(files.map((m) => ({ version: m.version, checksum: m.checksum })));
    expect((await migrate(olderUrl, proxy)).checksumsRecorded).toEqual([]);

    const edited = await mkdtemp(path.join(tmpdir(), 'migration-ledger-edit-'));
    try {
      for (const m of files) await writeFile(path.join(edited, m.file), m.file.startsWith('0002_') ? `${m.sql}\n-- a comment is an edit too\n` : m.sql);
      await expect(migrate(olderUrl, proxy, edited)).rejects.toThrow(/^0002_sessions\.sql changed after this database applied it .*new migration/);
    } finally {
      await rm(edited, { recursive: true, force: true });
    }
  });

  it('a checkout with CRLF line endings (Git for Windows\' core.autocrlf) holds the same migrations, not an edit of every file', { retry: 0 }, async () => {
    // Migrated from this repository's LF text (by the test before, when it ran).
    await migrate(olderUrl, proxy);
    const crlf = await mkdtemp(path.join(tmpdir(), 'migration-ledger-crlf-'));
    const files = await readMigrations(MIGRATIONS_DIR);
    try {
      for (const m of files) await writeFile(path.join(crlf, m.file), m.sql.replaceAll('\n', '\r\n'));
      expect((await migrate(olderUrl, proxy, crlf)).applied).toEqual([]);
    } finally {
      await rm(crlf, { recursive: true, force: true });
    }
    // And a ledger an earlier runner wrote from a CRLF checkout (the checksums of that text) is
    // this repository's text too.
    const crlfSha = (sql: string) => createHash('sha256').update(sql.replaceAll('\n', '\r\n'), 'utf8').digest('hex');
    await withPg(olderUrl, proxy, async (c) => {
      for (const m of files) await c.query('update schema_migrations set checksum = $2 where version = $1', [m.version, crlfSha(m.sql)]);
    });
    expect((await migrate(olderUrl, proxy)).applied).toEqual([]);
  });

  it('a no-transaction migration whose step fails is not recorded; its earlier steps stay, and a rerun completes it', { retry: 0 }, async () => {
    const file = path.join(dir, '0099_two_steps.sql');
    const step1 = 'create index concurrently if not exists ledger_step_one on clusters (token_issued_at);';
    await writeFile(file, `-- wingsmith:no-transaction\n${step1}\n-- wingsmith:step\nselect 1 / 0;\n`);
    // The earlier test edited 0018 in this directory: put it back.
    await cp(path.join(MIGRATIONS_DIR, '0018_operation_history_order.sql'), path.join(dir, '0018_operation_history_order.sql'));
    await expect(migrate(scratchUrl, proxy, dir)).rejects.toThrow(/0099_two_steps\.sql failed: division by zero \(its first 1 of 2 steps are in place; a rerun continues\)/);
    const state = () =>
      withPg(scratchUrl, proxy, async (c) => {
        const { rows } = await c.query<{ recorded: boolean; one: boolean | null; two: boolean | null }>(
          `select exists (select 1 from schema_migrations where version = '0099') as recorded,
                  (select indisvalid from pg_index where indexrelid = to_regclass('ledger_step_one')) as one,
                  (select indisvalid from pg_index where indexrelid = to_regclass('ledger_step_two')) as two`,
        );
        return rows[0];
      });
    expect(await state()).toEqual({ recorded: false, one: true, two: null });

    await writeFile(file, `-- wingsmith:no-transaction\n${step1}\n-- wingsmith:step\ncreate index concurrently if not exists ledger_step_two on clusters (name, uid);\n`);
    const again = await migrate(scratchUrl, proxy, dir);
    expect(again.applied.map((m) => m.file)).toEqual(['0099_two_steps.sql']);
    expect(await state()).toEqual({ recorded: true, one: true, two: true });
  });
});
