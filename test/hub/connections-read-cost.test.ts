/**
 * A cluster's connection history (`GET /admin/clusters/{id}/connections`, polled every second by
 * an open cluster view) costs a page, not the cluster's week of history: found by a read-only
 * review of the dashboard's reads. Ordered by id, no index gave the order within a cluster:
 * Postgres either read all of the cluster's rows and sorted them, or walked the primary key back
 * through every newer row of every other cluster; ordered by (at, id) the page walks the table's
 * index of the cluster's rows and stops. Measured with EXPLAIN ANALYZE of the route's own
 * statement over a real Postgres; fails on the code before (100,205 rows read for a page of 201).
 */
import { describe, expect, it } from 'vitest';
import { CONNECTIONS_SQL } from '../../src/hub/db/fleet';
import { useHub } from './support/hub';

const h = useHub();

interface PlanNode {
  'Node Type': string;
  'Actual Rows': number;
  'Rows Removed by Filter'?: number;
  'Shared Hit Blocks'?: number;
  'Shared Read Blocks'?: number;
  Plans?: PlanNode[];
}

function nodes(p: PlanNode): PlanNode[] {
  return [p, ...(p.Plans ?? []).flatMap(nodes)];
}

/** The route's statement with its parameters written in (EXPLAIN takes no bind parameters here). */
const withParams = (uid: string, after: string | null, limit: number) =>
  CONNECTIONS_SQL.replaceAll('$1', `'${uid}'`).replaceAll('$2', after === null ? 'null' : after).replaceAll('$3', String(limit));

describe("a cluster's connection history", () => {
  it('reads one page of rows, sorting none, however long the history', async () => {
    const quiet = await h.newCluster('conn-mid');
    const busy = await h.newCluster('conn-busy');
    // A week of 3,000 changes for one cluster, and 100,000 newer ones of another's.
    await h.sql(
      `insert into connection_events (cluster_uid, at, connected, session_id, generation)
       select $1, now() - interval '6 days' + g * interval '1 second', g % 2 = 0, 's', g from generate_series(1, 3000) g`,
      [quiet.uid],
    );
    await h.sql(
      `insert into connection_events (cluster_uid, at, connected, session_id, generation)
       select $1, now() - interval '5 days' + g * interval '1 second', g % 2 = 0, 's', g from generate_series(1, 100000) g`,
      [busy.uid],
    );
    await h.sql('vacuum analyze connection_events');
    const explain = async (after: string | null) => {
      const [row] = await h.sql<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(`explain (analyze, buffers, format json) ${withParams(quiet.uid, after, 201)}`);
      return nodes((row?.['QUERY PLAN'][0] as { Plan: PlanNode }).Plan);
    };
    for (const after of [null, '2000']) {
      const plan = await explain(after === null ? null : String((await h.sql<{ id: string }>('select id from connection_events where cluster_uid = $1 order by at desc, id desc offset 1000 limit 1', [quiet.uid]))[0]?.id));
      const sorted = plan.filter((n) => n['Node Type'] === 'Sort').map((n) => n['Actual Rows']);
      const scanned = plan.filter((n) => /Scan/.test(n['Node Type'])).reduce((sum, n) => sum + n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0), 0);
      expect(Math.max(0, ...sorted), 'no sort over more than the page').toBeLessThanOrEqual(202);
      expect(scanned, 'rows read: about a page').toBeLessThan(500);
    }
    // And the route pages through it newest first, the cursor going on from the row it names.
    const first = await h.admin('GET', `/clusters/${quiet.name}/connections?limit=200`);
    expect(first.status).toBe(200);
    const items = first.json.items as { id: number; at: string }[];
    expect(items).toHaveLength(200);
    const second = await h.admin('GET', `/clusters/${quiet.name}/connections?limit=200&cursor=${encodeURIComponent(first.json.next_cursor)}`);
    const more = second.json.items as { id: number; at: string }[];
    expect(more).toHaveLength(200);
    const all = [...items, ...more];
    for (let i = 1; i < all.length; i++) expect(all[i - 1]!.at >= all[i]!.at).toBe(true);
    expect(new Set(all.map((e) => e.id)).size).toBe(400);
  }, 60_000);
});
