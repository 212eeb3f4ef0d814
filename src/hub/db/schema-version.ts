import { sqlState } from './errors';
import type { Sql } from './sql';

/**
 * The newest migration this code's statements need (`migrations/NNNN_*.sql`; a unit test keeps it
 * equal to the newest file there). The README's deploy order is migrate, then deploy, so a
 * database ahead of it is normal (the old Worker still serving while new code rolls out) and
 * only one behind it is not ready.
 */
export const SCHEMA_REQUIRED = '0032';

export type SchemaState =
  | { schema: 'ok'; read_only: boolean }
  | { schema: 'behind'; schema_applied: string; schema_required: string }
  | { schema: 'missing'; schema_required: string };

/**
 * Whether the database has the migrations this code needs, and whether it takes writes: one
 * statement on the migration ledger. A database that refuses writes (a read replica's URL, or
 * `default_transaction_read_only` set on the database or role) answers every read and fails every
 * write of the hub's (25006), which would otherwise look like an outage.
 */
export async function readSchemaState(sql: Sql): Promise<SchemaState> {
  try {
    const { rows } = await sql.query<{ latest: string | null; has: boolean | null; read_only: boolean }>(
      `select max(version) as latest, coalesce(bool_or(version = $1), false) as has,
         current_setting('transaction_read_only') = 'on' as read_only
       from schema_migrations`,
      [SCHEMA_REQUIRED],
    );
    const r = rows[0];
    if (r?.has) return { schema: 'ok', read_only: r.read_only === true };
    // A ledger with no row (a first migrate that failed after making it) is a database never migrated.
    if (r?.latest == null) return { schema: 'missing', schema_required: SCHEMA_REQUIRED };
    return { schema: 'behind', schema_applied: r.latest, schema_required: SCHEMA_REQUIRED };
  } catch (err) {
    // undefined_table: a database never migrated (no ledger at all); anything else is the database's.
    if (sqlState(err) === '42P01') return { schema: 'missing', schema_required: SCHEMA_REQUIRED };
    throw err;
  }
}
