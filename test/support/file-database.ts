/**
 * The database a test file's hub runs on: a copy of the run's migrated template of its own, so
 * that test files running side by side never share rows. Hubs on one database poll each other's
 * sessions and act on them (an object that does not carry a polled session takes it out of the
 * fleet poll), so two files' hubs on one database would break each other's liveness. With the
 * embedded PGlite (one database) every file shares the run's database, as the run then uses one
 * worker.
 */
import { expect, inject } from 'vitest';
import { copyDatabase } from '../../scripts/lib/dev-stack';
import { pgClient } from '../../scripts/lib/pg-node';
import type { Sql } from '../../src/hub/db/sql';

// By test file: the hub project shares one module graph among the files a worker runs
// (vitest `isolate: false`), so a module-level copy would hand the next file this one's rows.
const copies = new Map<string, Promise<string>>();

/**
 * This file's database URL (created on first use; dropped with the run's database). `name` gives
 * the file another database of its own: a database belongs to the first region whose hub reaches
 * it (migration 0025), so a hub of another region needs its own.
 */
export function fileDatabaseUrl(name = ''): Promise<string> {
  const template = inject('databaseTemplate');
  if (template === null) return Promise.resolve(inject('databaseUrl'));
  const key = `${expect.getState().testPath ?? ''}\0${name}`;
  let copy = copies.get(key);
  if (!copy) {
    copy = copyDatabase(inject('databaseUrl'), inject('pgWsProxy'), template);
    copies.set(key, copy);
  }
  return copy;
}

/**
 * Before a hub starts: on the embedded Postgres, one database for every file of the run (one at a
 * time) and hubs of every region, release the region the last file's hub claimed (migration 0025),
 * so this one claims it. A real server gives each file and region a database: nothing to do.
 */
export async function releaseSharedDatabaseRegion(): Promise<void> {
  if (inject('databaseTemplate') !== null) return;
  const client = pgClient(inject('databaseUrl'), inject('pgWsProxy'));
  await client.connect();
  try {
    await client.query('delete from hub_region');
  } finally {
    await client.end();
  }
}

/**
 * Run `fn` with a connection of its own to this file's database (the hub's driver, through the
 * run's proxy), closed afterwards: for tests of a statement module on real Postgres.
 */
export async function withFileSql<T>(fn: (sql: Sql) => Promise<T>): Promise<T> {
  const client = pgClient(await fileDatabaseUrl(), inject('pgWsProxy'));
  await client.connect();
  try {
    return await fn({ query: async (text, params) => (await client.query(text, params)) as never });
  } finally {
    await client.end();
  }
}
