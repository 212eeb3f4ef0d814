import { HubConfigError } from '../config';
import { sqlState } from './errors';
import type { Sql } from './sql';

/**
 * Which region a database serves (migration 0025, DESIGN decision 11). The first hub to reach it
 * claims it for its own region; one of another region then refuses to serve it. Without that, two
 * regions given the same DATABASE_URL by mistake served each other's clusters, each through its
 * own route and in its own Durable Object jurisdiction, and nothing noticed.
 */
export type DatabaseRegion =
  | { claimed: string }
  /** A database that takes no writes (25006) and that no hub has claimed yet: it cannot be claimed now. */
  | { claimed: null };

/**
 * The region the database is claimed for, claiming it for `region` when no hub has yet: one
 * statement once claimed, a second only on the database's first contact. A database error is
 * thrown (it is not an answer: the caller retries on its next request).
 */
export async function claimDatabaseRegion(sql: Sql, region: string): Promise<DatabaseRegion> {
  const { rows } = await sql.query<{ region: string }>('select region from hub_region');
  if (rows[0]) return { claimed: rows[0].region };
  try {
    // The CTE's own insert is not visible to the statement's read: the coalesce takes it. Two hubs
    // claiming together: the second's insert waits for the first's and does nothing, and its read
    // (of a snapshot older than that commit) may find no row: thrown, and read next time.
    const claim = await sql.query<{ region: string | null }>(
      `with claimed as (insert into hub_region (region) values ($1) on conflict do nothing returning region)
       select coalesce((select region from claimed), (select region from hub_region)) as region`,
      [region],
    );
    const r = claim.rows[0]?.region;
    if (r == null) throw new Error('hub_region: the claim found no row');
    return { claimed: r };
  } catch (err) {
    // A read replica's URL or default_transaction_read_only: nothing can claim it, and nothing can
    // be written through it either; /healthz says it refuses writes.
    if (sqlState(err) === '25006') return { claimed: null };
    throw err;
  }
}

/** The refusal a hub of region `mine` gives a database claimed for `claimed`; null when it is its own. */
export function foreignDatabase(claimed: string, mine: string): HubConfigError | null {
  if (claimed === mine) return null;
  return new HubConfigError(
    'DATABASE_URL',
    `this is the database of region ${claimed}, and this deployment serves region ${mine}: each region has its own ` +
      `database, and another region's clusters must not be served from here (set this region's own with ` +
      'wrangler secret put DATABASE_URL [--env <region>]; a region renamed on purpose: README "Configuration")',
  );
}
