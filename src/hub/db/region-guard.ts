import type { HubConfig, HubConfigError } from '../config';
import { regionName } from '../region';
import { claimDatabaseRegion, foreignDatabase } from './region-claim';
import type { Sql } from './sql';

/**
 * Whether a Durable Object's own work (a gateway shard's alarm: the fleet poll, its pokes,
 * history retention) may run against this database. The Worker refuses every request once
 * DATABASE_URL names another region's database (database-region.ts), but an alarm is no request:
 * a region whose secret was set to another's by mistake kept polling that region's fleet and
 * poking its live sessions at objects of its own, which carry no such session and took them out
 * of the other region's poll. Read once per object and database (a gateway shard stays resident
 * while it polls); a failed read is no answer, and is read again next time.
 */
export class RegionGuard {
  private known: { key: string; refusal: HubConfigError | null } | null = null;
  private told = false;

  /** The refusal, once per object (`tell`: log it the first time). */
  async refusal(sql: Sql, cfg: HubConfig, databaseUrl: string | undefined, tell: (refusal: HubConfigError) => void): Promise<HubConfigError | null> {
    const mine = regionName(cfg);
    const key = `${mine}\n${databaseUrl ?? ''}`;
    if (this.known?.key !== key) {
      const r = await claimDatabaseRegion(sql, mine);
      // Unclaimed and refusing writes: nothing can be claimed or written there; the poll finds out.
      if (r.claimed === null) return null;
      this.known = { key, refusal: foreignDatabase(r.claimed, mine) };
      this.told = false;
    }
    const refusal = this.known.refusal;
    if (refusal && !this.told) {
      this.told = true;
      tell(refusal);
    }
    return refusal;
  }
}
