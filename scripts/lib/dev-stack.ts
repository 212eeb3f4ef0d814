/**
 * The database side of a local hub: a Postgres (given, or embedded PGlite), the WebSocket proxy
 * that workerd's Neon driver reaches it through, and the schema migrated. Shared by
 * `npm start`, the test global setup and anything else that needs a hub-ready database.
 */
import { randomBytes } from 'node:crypto';
import type { Client } from '@neondatabase/serverless';
import { startEmbeddedPostgres, type EmbeddedPostgres } from './embedded-pg';
import { migrate, type MigrationResult } from './migrations';
import { pgClient, pgTarget, probeTcp, redactUrl, withDatabase, withPg } from './pg-node';
import { startPgWsProxy, type PgWsProxy } from './pg-ws-proxy';

export interface DevStackOptions {
  /** An existing Postgres; unset means embedded PGlite under `dataDir`. */
  databaseUrl?: string;
  dataDir: string;
  /**
   * Create this database on the given server and use it instead of the URL's own (a real
   * server only: PGlite has one database, so pass a fresh `dataDir` for a fresh one).
   */
  createDatabase?: string;
  /**
   * With `createDatabase`: first drop the databases whose names start with this prefix and that
   * belong to no live stack (runs that were killed before their teardown). A live stack holds
   * an advisory lock named after its database for as long as it runs, so only orphans go.
   */
  reapStaleDatabases?: string;
  /**
   * With `createDatabase`: also keep a migrated copy, `<name>__tpl`, for `copyDatabase` to clone
   * (a template must have no connections, so the database in use cannot be one). Each copy is
   * `<name>__f<random>`; all of them go with `dropDatabase`.
   */
  template?: boolean;
}

export interface DevStack {
  /** The URL the hub gets as DATABASE_URL; its host is irrelevant behind the pinned proxy. */
  databaseUrl: string;
  /** `127.0.0.1:PORT`, the hub's PG_WS_PROXY. */
  pgWsProxy: string;
  embedded: boolean;
  migrations: MigrationResult;
  /** The migrated template copies are cloned from (see `template`), or null. */
  templateDatabase: string | null;
  /** Present when `createDatabase` created one: drops it (and its copies), closing their open connections. */
  dropDatabase?(): Promise<void>;
  close(): Promise<void>;
}

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/**
 * Between a stack database's name and the suffix of its template or a copy. Not a single
 * underscore: stack names end in random hex (`wingsmith_test_f1d6…`), and with `_f<hex>` as the
 * copies' suffix a stack whose name began its hex with an f was taken for a copy of a stack
 * called `wingsmith_test`. Its lease was then named after that, so another run's reaper found
 * the lease of its copies and template free and dropped them under the running suite, and two
 * such runs waited on one lease.
 */
const FAMILY_SEPARATOR = '__';

export async function startDevStack(options: DevStackOptions): Promise<DevStack> {
  let embedded: EmbeddedPostgres | undefined;
  let proxy: PgWsProxy | undefined;
  let lease: Client | undefined;
  try {
    let serverUrl: string;
    if (options.databaseUrl) {
      serverUrl = options.databaseUrl;
      const target = pgTarget(serverUrl);
      const unreachable = await probeTcp(target.host, target.port, 3_000);
      if (unreachable) {
        throw new Error(`cannot reach Postgres at ${target.host}:${target.port} (${redactUrl(serverUrl)}): ${unreachable.message}`);
      }
    } else {
      embedded = await startEmbeddedPostgres({ dataDir: options.dataDir });
      serverUrl = embedded.databaseUrl;
    }
    const target = pgTarget(serverUrl);
    proxy = await startPgWsProxy({ target });
    const proxyUrl = proxy.url;

    let databaseUrl = serverUrl;
    let dropDatabase: (() => Promise<void>) | undefined;
    const name = options.createDatabase;
    if (name !== undefined && !embedded) {
      if (!IDENTIFIER.test(name)) throw new Error(`not a plain database name: ${name}`);
      // The double underscore marks a template or copy (leaseOwner): in a stack's own name it
      // would make another stack's database look like one of this stack's.
      if (name.includes(FAMILY_SEPARATOR)) throw new Error(`a stack database's name may not contain "${FAMILY_SEPARATOR}": ${name}`);
      // Taken before the database exists, so no database of a live stack is ever lockless.
      lease = pgClient(serverUrl, proxyUrl);
      lease.on('error', () => undefined);
      await lease.connect();
      await lease.query('select pg_advisory_lock(hashtext($1))', [leaseKey(name)]);
      if (options.reapStaleDatabases) await reapStaleDatabases(lease, options.reapStaleDatabases, name);
      await lease.query(`create database "${name}"`);
      databaseUrl = withDatabase(serverUrl, name);
      dropDatabase = async () => {
        // FORCE: a hub still shutting down may hold connections; they must not keep it alive.
        await withPg(serverUrl, proxyUrl, async (c) => {
          const { rows } = await c.query<{ datname: string }>('select datname from pg_database where starts_with(datname, $1)', [`${name}${FAMILY_SEPARATOR}`]);
          for (const { datname } of rows) {
            if (IDENTIFIER.test(datname) && leaseOwner(datname) === name) await c.query(`drop database if exists "${datname}" with (force)`);
          }
          await c.query(`drop database if exists "${name}" with (force)`);
        });
      };
    }

    let migrations: MigrationResult;
    try {
      migrations = await migrate(databaseUrl, proxyUrl);
    } catch (err) {
      await dropDatabase?.().catch(() => undefined);
      throw err;
    }

    let templateDatabase: string | null = null;
    if (options.template && lease && name !== undefined) {
      // Right after the migration nothing is connected to the database, as a template requires.
      templateDatabase = `${name}${FAMILY_SEPARATOR}tpl`;
      await lease.query(`create database "${templateDatabase}" template "${name}"`);
    }

    const ownedEmbedded = embedded;
    const ownedProxy = proxy;
    const ownedLease = lease;
    const stack: DevStack = {
      databaseUrl,
      pgWsProxy: proxyUrl,
      embedded: ownedEmbedded !== undefined,
      migrations,
      templateDatabase,
      close: async () => {
        await ownedLease?.end().catch(() => undefined);
        await ownedProxy.close();
        await ownedEmbedded?.close();
      },
    };
    if (dropDatabase) stack.dropDatabase = dropDatabase;
    return stack;
  } catch (err) {
    await lease?.end().catch(() => undefined);
    await proxy?.close().catch(() => undefined);
    await embedded?.close().catch(() => undefined);
    throw err;
  }
}

function leaseKey(database: string): string {
  return `wingsmith:dev-stack:${leaseOwner(database)}`;
}

/** The stack database a name belongs to: its own, or the one it is the template or a copy of. */
function leaseOwner(database: string): string {
  return database.replace(/__(?:tpl|f[0-9a-f]+)$/, '');
}

/**
 * A fresh copy of a stack's template (`template: true`), for one user that must not share rows
 * with others (a test file's hub: hubs on one database poll, and act on, each other's sessions).
 * Returns its URL; the stack's `dropDatabase` drops it.
 */
export async function copyDatabase(databaseUrl: string, proxyUrl: string, templateDatabase: string): Promise<string> {
  const copy = `${leaseOwner(templateDatabase)}${FAMILY_SEPARATOR}f${randomBytes(4).toString('hex')}`;
  if (!IDENTIFIER.test(copy) || !IDENTIFIER.test(templateDatabase)) throw new Error(`not a plain database name: ${copy}`);
  await withPg(databaseUrl, proxyUrl, (c) => c.query(`create database "${copy}" template "${templateDatabase}"`));
  return withDatabase(databaseUrl, copy);
}

async function reapStaleDatabases(lease: Client, prefix: string, keep: string): Promise<void> {
  const { rows } = await lease.query<{ datname: string }>(
    'select datname from pg_database where starts_with(datname, $1) and datname <> $2',
    [prefix, keep],
  );
  for (const { datname } of rows) {
    if (!IDENTIFIER.test(datname)) continue;
    // A template or copy belongs to its stack's database: it goes only when that stack is gone.
    const { rows: got } = await lease.query<{ ok: boolean }>('select pg_try_advisory_lock(hashtext($1)) as ok', [
      leaseKey(datname),
    ]);
    if (!got[0]?.ok) continue;
    try {
      await lease.query(`drop database if exists "${datname}" with (force)`);
    } finally {
      await lease.query('select pg_advisory_unlock(hashtext($1))', [leaseKey(datname)]);
    }
  }
}

export const LOCAL_TEST_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/postgres';

/**
 * The server the tests should use: DATABASE_URL, else the local Postgres when it accepts a TCP
 * connection quickly, else undefined (embedded PGlite).
 */
export async function pickDatabaseUrlForTests(): Promise<string | undefined> {
  const fromEnv = process.env.DATABASE_URL;
  if (fromEnv) return fromEnv;
  const unreachable = await probeTcp('127.0.0.1', 5432, 500);
  return unreachable ? undefined : LOCAL_TEST_DATABASE_URL;
}

export const TEST_DATABASE_PREFIX = 'wingsmith_test_';

/** `wingsmith_test_<random>`: unique per run, so parallel runs on one server never collide. */
export function testDatabaseName(): string {
  return `${TEST_DATABASE_PREFIX}${randomBytes(6).toString('hex')}`;
}
