/**
 * Numbered SQL migrations: `migrations/NNNN_name.sql`, applied in order, each at most once, and
 * recorded in `schema_migrations` with the sha256 of the file's text.
 *
 * A migration file holds plain statements, without BEGIN/COMMIT of its own, and runs in one
 * transaction together with its ledger row. A file whose first line is
 * `-- wingsmith:no-transaction` runs outside a transaction instead, for what cannot run inside
 * one (CREATE INDEX CONCURRENTLY): one statement per step, steps separated by a line
 * `-- wingsmith:step`, each step idempotent (`IF NOT EXISTS`), its ledger row written after the
 * last step succeeds. A step that failed is simply run again by the next migrate.
 *
 * Migrations run while the hub serves (README "Deploying"), so no statement of theirs waits long
 * for a lock: a lock request that waits holds every later statement on that table behind it.
 */
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Client } from '@neondatabase/serverless';
import { withPg } from './pg-node';
import { errorText } from './error-text';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));

export interface Migration {
  version: string;
  name: string;
  file: string;
  sql: string;
  /**
   * sha256 of `sql` with LF line endings, hex: what the ledger records, so an applied file edited
   * later is noticed. Line endings are not an edit: a checkout with CRLF (Git for Windows'
   * default core.autocrlf) would otherwise have every applied file refused.
   */
  checksum: string;
  /** False for a `-- wingsmith:no-transaction` file. */
  transaction: boolean;
  /** The statements to send one at a time (a no-transaction file); [sql] otherwise. */
  steps: string[];
}

export interface MigrationResult {
  applied: Migration[];
  /** Versions already recorded before this run. */
  alreadyApplied: string[];
  /** Versions recorded before the ledger kept checksums, whose checksum this run recorded. */
  checksumsRecorded: string[];
}

export interface MigrateOptions {
  /**
   * How long one lock request of a migration may wait (lock_timeout). The hub's own statements
   * wait up to PG_LOCK_TIMEOUT_MS (2 s by default) for theirs, and any that arrive behind a
   * queued migration wait at least this long: it stays well under that.
   */
  lockTimeoutMs?: number;
  /** How long one migration keeps retrying a lock it could not take, before giving up. */
  lockWaitMs?: number;
}

export const DEFAULT_LOCK_TIMEOUT_MS = 500;
export const DEFAULT_LOCK_WAIT_MS = 20_000;
const BACKOFF_FIRST_MS = 250;
const BACKOFF_CAP_MS = 4_000;

const FILE_PATTERN = /^(\d{4})_([a-z0-9_]+)\.sql$/;
const NO_TRANSACTION = '-- wingsmith:no-transaction';
const STEP = /^--\s*wingsmith:step\s*$/m;
const DIRECTIVE = /^--\s*wingsmith:(.*)$/gm;
/** CREATE INDEX CONCURRENTLY, and whether it says IF NOT EXISTS (then its name). */
const CONCURRENT_INDEX = /create\s+(?:unique\s+)?index\s+concurrently\s+(if\s+not\s+exists\s+)?"?([A-Za-z_][A-Za-z0-9_$]*)?/gi;

const sha256 = (text: string): string => createHash('sha256').update(text, 'utf8').digest('hex');
const lf = (text: string): string => text.replaceAll('\r\n', '\n');

/** Whether a step holds anything but comments and blanks (an empty query is not worth a round trip). */
const hasStatement = (sql: string): boolean => sql.split('\n').some((line) => line.trim() !== '' && !line.trim().startsWith('--'));

/** The steps of a migration file; a mistake in its directives is refused here, before any database is touched. */
export function parseMigration(file: string, sql: string): Pick<Migration, 'transaction' | 'steps'> {
  const firstLine = sql.split('\n', 1)[0]?.trim() ?? '';
  const transaction = firstLine !== NO_TRANSACTION;
  for (const [line, directive] of sql.matchAll(DIRECTIVE)) {
    const known = (directive?.trim() === 'no-transaction' && line.trim() === firstLine && !transaction) || (directive?.trim() === 'step' && !transaction);
    // A misspelt directive would otherwise run the file in a transaction, or as one step.
    if (!known) throw new Error(`migration ${file}: "${line.trim()}" is not a directive here (${NO_TRANSACTION} as the first line; -- wingsmith:step only in such a file)`);
  }
  if (transaction) return { transaction, steps: [sql] };
  const steps = sql.split(STEP).filter(hasStatement);
  for (const m of sql.matchAll(CONCURRENT_INDEX)) {
    // A retry, or a run after the index was built by hand, must find its step already done.
    if (!m[1]) throw new Error(`migration ${file}: CREATE INDEX CONCURRENTLY needs IF NOT EXISTS (a step that is run again must succeed)`);
  }
  return { transaction, steps };
}

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
    const sql = await readFile(path.join(dir, file), 'utf8');
    migrations.push({ version, name, file, sql, checksum: sha256(lf(sql)), ...parseMigration(file, sql) });
  }
  return migrations;
}

function literal(value: string): string {
  return `'${value.replaceAll("'", "''")}'`;
}

function message(err: unknown): string {
  return errorText(err);
}

/** A lock not granted within lock_timeout (55P03), or a deadlock Postgres broke (40P01): worth another try. */
function isLockWait(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === '55P03' || code === '40P01';
}

/**
 * Why a migration must not run against this URL, or null. Neon's `-pooler` host is a
 * transaction-mode PgBouncer: the runner's session advisory lock (which serializes two migrates)
 * and its session settings would land on whichever server connection served that statement, the
 * lock leaking there and serializing nothing. Pure.
 */
export function poolerRefusal(databaseUrl: string): string | null {
  let host: string;
  try {
    host = new URL(databaseUrl).hostname;
  } catch {
    return null;
  }
  const first = host.split('.')[0] ?? '';
  if (!first.endsWith('-pooler')) return null;
  const direct = [first.slice(0, -'-pooler'.length), ...host.split('.').slice(1)].join('.');
  return `DATABASE_URL names a connection pooler (${host}); migrations need a session of their own (an advisory lock, lock_timeout), which a transaction-mode pooler does not keep: migrate through the direct host (${direct})`;
}

/**
 * Applies the pending migrations on an open connection.
 *
 * Serialized across processes by a session advisory lock, so two test runs or deploys that
 * migrate one database at once cannot both apply a file. A transactional file goes as one
 * simple-protocol message (BEGIN … COMMIT), one round trip: with the embedded single-backend
 * Postgres no other connection can interleave, and a failure leaves nothing half applied.
 *
 * Every lock a migration asks for is waited for at most lockTimeoutMs (a CONCURRENTLY step's
 * without limit: it blocks none of the hub's statements while it waits); a migration refused a
 * lock is rolled back and tried again with backoff for up to lockWaitMs, then reported, naming
 * the file. Before anything is applied, every applied file still present is checked against the
 * checksum the ledger recorded for it (rows from before checksums were kept get the file's
 * current one: trust on first use).
 */
export async function applyMigrations(client: Client, migrations: Migration[], options: MigrateOptions = {}): Promise<MigrationResult> {
  const lockTimeoutMs = options.lockTimeoutMs ?? DEFAULT_LOCK_TIMEOUT_MS;
  const lockWaitMs = options.lockWaitMs ?? DEFAULT_LOCK_WAIT_MS;
  await takeMigrateLock(client);
  try {
    // Only what is missing: `create table if not exists` and `add column if not exists` take their
    // locks even when there is nothing to do, and the column's is ACCESS EXCLUSIVE, which waits
    // for any reader of the ledger (a backup) and holds the hub's own reads behind it.
    const { rows: ledger } = await client.query<{ column_name: string }>(
      `select column_name from information_schema.columns where table_schema = current_schema() and table_name = 'schema_migrations'`,
    );
    if (ledger.length === 0) {
      await client.query(
        `create table if not exists schema_migrations (
           version text primary key,
           name text not null,
           applied_at timestamptz not null default now(),
           checksum text
         )`,
      );
    } else if (!ledger.some((c) => c.column_name === 'checksum')) {
      // Ledgers written before checksums were kept.
      await client.query('alter table schema_migrations add column if not exists checksum text');
    }
    const { rows } = await client.query<{ version: string; checksum: string | null }>('select version, checksum from schema_migrations order by version');
    const byVersion = new Map(migrations.map((m) => [m.version, m]));
    const changed = rows.flatMap((r) => {
      const m = byVersion.get(r.version);
      // A ledger written from a CRLF checkout before line endings were ignored recorded that text's.
      return m && r.checksum !== null && r.checksum !== m.checksum && r.checksum !== sha256(lf(m.sql).replaceAll('\n', '\r\n')) ? [m.file] : [];
    });
    if (changed.length > 0) {
      throw new Error(
        `${changed.join(', ')} changed after this database applied ${changed.length === 1 ? 'it' : 'them'} ` +
          `(the ledger's sha256 differs), so the schema is not what the file says: restore the released text ` +
          `and put the change in a new migration`,
      );
    }
    const unrecorded = rows.flatMap((r) => {
      const m = byVersion.get(r.version);
      return m && r.checksum === null ? [m] : [];
    });
    if (unrecorded.length > 0) {
      await client.query(
        `update schema_migrations s set checksum = v.checksum
           from (values ${unrecorded.map((m) => `(${literal(m.version)}, ${literal(m.checksum)})`).join(', ')}) as v (version, checksum)
          where s.version = v.version and s.checksum is null`,
      );
    }
    const done = new Set(rows.map((r) => r.version));
    const applied: Migration[] = [];
    for (const m of migrations) {
      if (done.has(m.version)) continue;
      await (m.transaction ? applyInTransaction(client, m, lockTimeoutMs, lockWaitMs) : applyInSteps(client, m, lockTimeoutMs, lockWaitMs));
      applied.push(m);
    }
    return { applied, alreadyApplied: [...done], checksumsRecorded: unrecorded.map((m) => m.version) };
  } finally {
    await client.query(`select pg_advisory_unlock(hashtext('wingsmith:schema_migrations'))`).catch(() => undefined);
  }
}

/**
 * The advisory lock that keeps two migrates apart, taken by polling: a migrate blocked inside
 * `pg_advisory_lock` is a statement with a snapshot open, which the other's `CREATE INDEX
 * CONCURRENTLY` waits for while it holds the lock: a deadlock Postgres ends by failing one of them.
 */
async function takeMigrateLock(client: Client): Promise<void> {
  for (let n = 0; ; n++) {
    const { rows } = await client.query<{ ok: boolean }>(`select pg_try_advisory_lock(hashtext('wingsmith:schema_migrations')) as ok`);
    if (rows[0]?.ok === true) return;
    if (n === 10) console.error('migrate: waiting for another migrate of this database to finish');
    await new Promise((r) => setTimeout(r, Math.min(1_000, 50 * 2 ** Math.min(n, 5))));
  }
}

const ledgerRow = (m: Migration): string =>
  `insert into schema_migrations (version, name, applied_at, checksum) values (${literal(m.version)}, ${literal(m.name)}, now(), ${literal(m.checksum)})`;

/**
 * Runs `attempt` until it succeeds, retrying a lock it could not take with exponential backoff
 * (full jitter) for up to lockWaitMs; any other failure, or running out of time, is reported.
 */
async function withLockRetries(m: Migration, lockTimeoutMs: number, lockWaitMs: number, attempt: () => Promise<void>, partial: string): Promise<void> {
  const deadline = Date.now() + lockWaitMs;
  for (let n = 1; ; n++) {
    try {
      await attempt();
      return;
    } catch (err) {
      if (!isLockWait(err)) throw new Error(`migration ${m.file} failed: ${message(err)}${partial}`, { cause: err });
      const delay = Math.round(Math.random() * Math.min(BACKOFF_CAP_MS, BACKOFF_FIRST_MS * 2 ** (n - 1)));
      if (Date.now() + delay + lockTimeoutMs > deadline) {
        throw new Error(
          `migration ${m.file} could not take its locks in ${Math.round(lockWaitMs / 1000)} s (${n} tries, each waiting at most ` +
            `${lockTimeoutMs} ms so that the hub's own statements do not queue behind it; last: ${message(err)}): a long ` +
            `transaction holds a table it changes (a backup, a report, a session idle in transaction: see pg_stat_activity ` +
            `and pg_locks). Let it end or end it, then run the migration again${partial}`,
          { cause: err },
        );
      }
      await new Promise((r) => setTimeout(r, delay));
    }
  }
}

async function applyInTransaction(client: Client, m: Migration, lockTimeoutMs: number, lockWaitMs: number): Promise<void> {
  const text = [
    'begin;',
    // Local to this transaction: nothing of it outlives the migration.
    `set local lock_timeout = ${Math.round(lockTimeoutMs)};`,
    m.sql,
    // A trailing `-- comment` without a newline must not swallow what follows.
    ';',
    `${ledgerRow(m)};`,
    'commit;',
  ].join('\n');
  await withLockRetries(m, lockTimeoutMs, lockWaitMs, async () => {
    try {
      await client.query(text);
    } catch (err) {
      await client.query('rollback').catch(() => undefined);
      throw err;
    }
  }, ' (nothing of it was applied)');
}

/**
 * A no-transaction file: each step on its own (CREATE INDEX CONCURRENTLY refuses to run in a
 * transaction, even the implicit one of a multi-statement message), then its ledger row.
 */
async function applyInSteps(client: Client, m: Migration, lockTimeoutMs: number, lockWaitMs: number): Promise<void> {
  try {
    for (const [i, step] of m.steps.entries()) {
      const partial = i === 0 ? '' : ` (its first ${i} of ${m.steps.length} steps are in place; a rerun continues)`;
      // A CONCURRENTLY build or drop waits without limit: it holds SHARE UPDATE EXCLUSIVE, which
      // none of the hub's reads and writes waits for, and it must outlive every transaction older
      // than it (each such wait is a lock wait). Under the lock timeout, any transaction open for
      // half a second (a backup, a report, an ingest statement waiting on a row) cancelled it, and
      // a build that takes longer than the retry budget was never done at all.
      await client.query(`set lock_timeout = ${/\bconcurrently\b/i.test(step) ? 0 : Math.round(lockTimeoutMs)}`);
      await withLockRetries(m, lockTimeoutMs, lockWaitMs, async () => {
        await dropInvalidIndexes(client, step);
        await client.query(step);
      }, partial);
    }
    await client.query(ledgerRow(m)).catch((err: unknown) => {
      throw new Error(`migration ${m.file} failed recording itself: ${message(err)} (its steps are in place; a rerun records it)`, { cause: err });
    });
  } finally {
    await client.query('reset lock_timeout').catch(() => undefined);
  }
}

/**
 * A CREATE INDEX CONCURRENTLY that failed part way (a lock it did not get, a cancel) leaves its
 * index behind, marked invalid, and IF NOT EXISTS would then take that for done: the index the
 * step creates is dropped first when it is invalid, so the step builds it again.
 */
async function dropInvalidIndexes(client: Client, step: string): Promise<void> {
  const names = [...step.matchAll(CONCURRENT_INDEX)].flatMap((m) => (m[2] ? [m[2].toLowerCase()] : []));
  if (names.length === 0) return;
  const { rows } = await client.query<{ name: string }>(
    `select c.relname as name from pg_index i join pg_class c on c.oid = i.indexrelid
      where not i.indisvalid and c.relname = any($1::text[]) and pg_table_is_visible(c.oid)`,
    [names],
  );
  for (const { name } of rows) await client.query(`drop index concurrently if exists "${name.replaceAll('"', '""')}"`);
}

/**
 * Connects through the proxy at `proxyUrl` (undefined: straight to Neon) and applies every
 * pending migration from `dir`.
 */
export async function migrate(databaseUrl: string, proxyUrl: string | undefined, dir: string = MIGRATIONS_DIR, options: MigrateOptions = {}): Promise<MigrationResult> {
  const refusal = poolerRefusal(databaseUrl);
  if (refusal) throw new Error(refusal);
  const migrations = await readMigrations(dir);
  return withPg(databaseUrl, proxyUrl, (client) => applyMigrations(client, migrations, options));
}
