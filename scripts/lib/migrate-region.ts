import { claimDatabaseRegion } from '../../src/hub/db/region-claim';
import type { Sql } from '../../src/hub/db/sql';
import { REGION_NAME_RE } from '../../src/hub/region';
import { withPg } from './pg-node';

/**
 * Claim a freshly migrated database for `region` (`HUB_REGION=eu npm run migrate`), as the first
 * hub of that region to reach it would. Claimed at migrate time, a database is already its
 * region's when the Workers' secrets are set, so secrets swapped between two regions are refused
 * (503 unconfigured) instead of each hub claiming the other's empty database at its first request.
 * Throws, naming both, when the database is already claimed for another region.
 */
export async function claimRegionAtMigrate(databaseUrl: string, proxyUrl: string | undefined, region: string): Promise<void> {
  // As a hub reads HUB_REGION (src/hub/config.ts): a name no hub could have would claim the database for none.
  if (!REGION_NAME_RE.test(region)) throw new Error(`HUB_REGION ${JSON.stringify(region)} is not a region name (lowercase letters, digits and -, at most 32 characters)`);
  const claimed = await withPg(databaseUrl, proxyUrl, (client) => {
    const sql: Sql = {
      async query<R>(text: string, params: unknown[] = []) {
        const r = await client.query(text, params);
        return { rows: r.rows as R[], rowCount: r.rowCount };
      },
    };
    return claimDatabaseRegion(sql, region);
  });
  if (claimed.claimed === null) throw new Error(`the database takes no writes (transaction_read_only): it cannot be claimed for region ${region}`);
  if (claimed.claimed !== region) {
    throw new Error(`this database serves region ${claimed.claimed}, not ${region}: check that DATABASE_URL is ${region}'s (a region's hub refuses another region's database)`);
  }
}
