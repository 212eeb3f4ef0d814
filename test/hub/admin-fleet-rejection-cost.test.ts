/**
 * A fleet read costs Postgres what the last hour of rejections holds, not their whole history.
 *
 * The fleet view is polled every second by each open dashboard (README "Dashboard": "one request
 * a second on the fleet view (/admin/fleet)"), and its numbers about rejections are "in the last
 * hour" (`rejections_1h`, per cluster and in the totals). Rejections are never deleted, and a
 * poisoning operator writes one row per frame. The indexes of migration 0017 (rejections by
 * received_at, and by cluster and received_at) let both counts read only the last hour: a long
 * history of old rejections costs the read no sequential scan and no row.
 */
import { describe, expect, it } from 'vitest';
import { sleep, useHub } from './support/hub';

const h = useHub();

const OLD = 60_000;

async function rejectionReads(): Promise<{ seq: number; tuples: number }> {
  const [r] = await h.sql<{ seq_scan: string; seq_tup_read: string; idx_tup_fetch: string | null }>(
    `select seq_scan, seq_tup_read, coalesce(idx_tup_fetch, 0) as idx_tup_fetch from pg_stat_user_tables where relname = 'rejections'`,
  );
  return { seq: Number(r?.seq_scan), tuples: Number(r?.seq_tup_read) + Number(r?.idx_tup_fetch) };
}

describe('GET /admin/fleet reads only the last hour of rejections', () => {
  it('a fleet read over a cluster with a long rejection history (none in the last hour) neither scans the rejections table nor reads its old rows', async () => {
    const c = await h.newCluster('rej');
    await h.sql(
      `insert into rejections (cluster_uid, session_id, seq, frame_id, type, reason, received_at)
       select $1, 'old-session', g, null, 'node.observed', 'invalid: poison', now() - interval '2 days' - make_interval(secs => g)
       from generate_series(1, ${OLD}) g`,
      [c.uid],
    );
    // A history this old has long been vacuumed (autovacuum runs after every 1,000 or so inserts):
    // its pages are all-visible. That matters to the measure: to estimate "the last hour", the
    // planner looks up the newest entry of the received_at index (one tuple per statement, however
    // long the history), and only on a page not yet all-visible does that lookup read the row.
    await h.sql('vacuum analyze rejections');
    await sleep(1_000); // h.sql's own backend reported its statistics when it closed
    const before = await rejectionReads();

    const r = await h.admin('GET', '/fleet');
    expect(r.status).toBe(200);
    const mine = r.json.items.find((i: any) => i.uid === c.uid);
    expect(mine.rejections_1h).toBe(0);
    expect(r.json.totals.rejections_1h).toBe(0);

    // A busy backend reports its table statistics at most once a second, and an idle one up to
    // 10 s later (PGSTAT_IDLE_INTERVAL): the gateway's connections also carry the fleet poll.
    await sleep(11_500);
    const after = await rejectionReads();
    expect({ seq_scans: after.seq - before.seq, rows_read: after.tuples - before.tuples }).toEqual({ seq_scans: 0, rows_read: 0 });
  }, 60_000);
});
