/**
 * The fleet poll runs every POLL_INTERVAL_MS from each poll's start, however long its statement
 * takes. The interval bounds how late a live session sees a revocation or a displacement ("checked
 * at least every 5 s", DESIGN decision 4); armed from the end of the statement, the next poll came
 * an interval plus the statement's time later, every time: with a database across regions, or a
 * loaded one, the bound slipped by a round trip or more. Found by a read-only review of the token
 * lifecycle; fails on the code before.
 *
 * The database is 300 ms away each way (a latency relay); the poll's starts are read from
 * pg_stat_activity, where each backend keeps its last statement's start while it idles.
 */
import { describe, expect, it } from 'vitest';
import { useHubBehindRelay } from './support/proxy-hub';
import { latencyRelay } from './support/latency-relay';
import { FAST_TIMERS, sleep } from './support/hub';

const POLL = 1_000;
const { h } = useHubBehindRelay(
  {
    ...FAST_TIMERS,
    IDLE_TIMEOUT_MS: '30000',
    PING_INTERVAL_MS: '10000',
    RETENTION_MS: '60000',
    HANDSHAKE_TIMEOUT_MS: '10000',
    POLL_INTERVAL_MS: String(POLL),
    PG_QUERY_TIMEOUT_MS: '8000',
    DB_GATEWAY_SHARDS: '1',
  },
  latencyRelay(300),
);

describe('the fleet poll against a database 600 ms away', () => {
  it('starts a poll every interval, not every interval plus the round trip', async () => {
    const c = await h.newCluster('cadence');
    // A live session: the shard keeps polling.
    const { peer } = await h.openFresh(c);
    const starts = new Set<number>();
    const until = Date.now() + 9_000;
    while (Date.now() < until) {
      const rows = await h.sql<{ at: string }>(
        `select extract(epoch from query_start)::float8 * 1000 as at from pg_stat_activity
         where datname = current_database() and query like 'with checked_in as (%update live_sessions set checked_at%'`,
      );
      for (const r of rows) starts.add(Math.round(Number(r.at)));
      await sleep(20);
    }
    peer.close();
    const sorted = [...starts].sort((a, b) => a - b);
    const gaps = sorted.slice(1).map((t, i) => t - (sorted[i] as number));
    expect(gaps.length, `poll starts seen: ${sorted.length}`).toBeGreaterThanOrEqual(5);
    const median = [...gaps].sort((a, b) => a - b)[Math.floor(gaps.length / 2)] as number;
    // From the end of each statement, the gaps were the interval and a round trip (about 1.6 s).
    expect(median, `gaps between poll starts: ${gaps.join(', ')} ms`).toBeLessThan(POLL + 350);
  }, 60_000);
});
