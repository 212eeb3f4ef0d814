/**
 * Numbered SQL migrations: `migrations/NNNN_name.sql`, applied in order, each at most once,
 * each in one transaction together with its row in `schema_migrations`.
 *
 * A migration file holds plain statements, without BEGIN/COMMIT of its own (and so nothing that
 * cannot run in a transaction, such as CREATE INDEX CONCURRENTLY).
 */
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Client } from '@neondatabase/serverless';
import { withPg } from './pg-node';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));

export interface Migration {
  version: string;
  name: string;
  file: string;
  sql: string;
}

export interface MigrationResult {
  applied: Migration[];
  /** Versions already recorded before this run. */
  alreadyApplied: string[];
}

const FILE_PATTERN = /^(\d{4})_([a-z0-9_]+)\.sql$/;

export async function readMigrations(dir: string = MIGRATIONS_DIR): Promise<Migration[]> {
  const entries = (await readdir(dir)).filter((f) => f.endsWith('.sql')).sort();
  const seen = new Set<string>();
  const migrations: Migration[] = [];
  for (const file of entries) {
    const match = FILE_PATTERN.exec(file);
    // A misnamed file would otherwise be skipped silently and its schema never exist.
    if (!match) throw new Error(`migration file name must look like 0001_name.sql: ${file}`);
    const [, version, name] = match as unknown as [string, string, string];
    if (seen.has(version)) throw new Error(`two migrations share version ${version}`);
    seen.add(version);
    migrations.push({ version, name, file, sql: await readFile(path.join(dir, file), 'utf8') });
  }
  return migrations;
}

function literal(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}

/**
 * Applies the pending migrations on an open connection.
 *
 * Serialized across processes by a session advisory lock, so two test runs or deploys that
 * migrate one database at once cannot both apply a file. Each file goes as one simple-protocol
 * message (BEGIN … COMMIT), one round trip: with the embedded single-backend Postgres no other
 * connection can interleave, and a failure leaves nothing half applied.
 */
export async function applyMigrations(client: Client, migrations: Migration[]): Promise<MigrationResult> {
  await client.query(`select pg_advisory_lock(hashtext('wingsmith:schema_migrations'))`);
  try {
    await client.query(
      `create table if not exists schema_migrations (
         version text primary key,
         name text not null,
         applied_at timestamptz not null default now()
       )`,
    );
    const { rows } = await client.query<{ version: string }>('select version from schema_migrations order by version');
    const done = new Set(rows.map((r) => r.version));
    const applied: Migration[] = [];
    for (const m of migrations) {
      if (done.has(m.version)) continue;
      const text = [
        'begin;',
        m.sql,
        // A trailing `-- comment` without a newline must not swallow what follows.
        ';',
        `insert into schema_migrations (version, name, applied_at) values (${literal(m.version)}, ${literal(m.name)}, now());`,
        'commit;',
      ].join('\n');
      try {
        await client.query(text);
      } catch (err) {
        await client.query('rollback').catch(() => undefined);
        const reason = err instanceof Error ? err.message : String(err);
        throw new Error(`migration ${m.file} failed: ${reason}`, { cause: err });
      }
      applied.push(m);
    }
    return { applied, alreadyApplied: [...done] };
  } finally {
    await client.query(`select pg_advisory_unlock(hashtext('wingsmith:schema_migrations'))`).catch(() => undefined);
  }
}

/**
 * Connects through the proxy at `proxyUrl` (undefined: straight to Neon) and applies every
 * pending migration from `dir`.
 */
export async function migrate(databaseUrl: string, proxyUrl: string | undefined, dir: string = MIGRATIONS_DIR): Promise<MigrationResult> {
  const migrations = await readMigrations(dir);
  return withPg(databaseUrl, proxyUrl, (client) => applyMigrations(client, migrations));
}
