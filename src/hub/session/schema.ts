/**
 * The session object's SQLite tables, created by the object's first write rather than by its
 * construction. A brand-new object is built for every fresh connection, before any hello; if
 * it created its tables there, the upgrade would wait for a commit of its own (a disk sync
 * locally, a replicated write in a deployment) that the hello's commit can carry instead.
 */
const SCHEMA = `
create table if not exists meta (
  k integer primary key check (k = 1),
  doc text not null
);
create table if not exists replay (
  seq integer primary key,
  frame text not null,
  bytes integer not null
);
create table if not exists wakes (k integer primary key check (k = 1), doc text not null);
create table if not exists sent_desired (
  frame_id text primary key,
  deployment_id text not null,
  revision integer not null
) without rowid;
create table if not exists owed (
  n integer primary key,
  id text not null,
  seq integer not null,
  doc text not null
);
`;

// An object written by an older schema lacks a newer table: counted as missing, so its next
// write runs SCHEMA (every statement is "if not exists") and adds only what it lacks.
const TABLES = ['meta', 'replay', 'wakes', 'sent_desired', 'owed'] as const;

type Binding = string | number | bigint | ArrayBuffer | null;

export class SessionSql {
  /** Some table is missing (a new object, or one written by an older schema). */
  private missing: boolean;
  /** No table at all: the object has never written. */
  private empty: boolean;

  constructor(private readonly raw: SqlStorage) {
    // One catalogue read: an idle session is constructed again at nearly every wake, and this
    // costs less than the DDL it skips.
    this.missing = this.empty = false;
    this.recheck();
  }

  /** Read the catalogue again: after a rolled-back transaction, the tables it made are gone. */
  recheck(): void {
    const have = this.raw
      .exec<{ n: number }>(`select count(*) as n from sqlite_master where type = 'table' and name in (${TABLES.map(() => '?').join(', ')})`, ...TABLES)
      .one().n;
    this.missing = have < TABLES.length;
    this.empty = have === 0;
  }

  /** Nothing was ever written: every table is empty by definition, and reads can skip SQLite. */
  get fresh(): boolean {
    return this.empty;
  }

  exec<T extends Record<string, SqlStorageValue>>(query: string, ...bindings: Binding[]): SqlStorageCursor<T> {
    if (this.missing) {
      // In the same implicit transaction as the statement that needs it: one commit for both.
      this.raw.exec(SCHEMA);
      this.missing = false;
      this.empty = false;
    }
    return this.raw.exec<T>(query, ...bindings);
  }

  /** After `deleteAll`, which drops the tables: the next write creates them again. */
  dropped(): void {
    this.missing = true;
    this.empty = true;
  }
}
