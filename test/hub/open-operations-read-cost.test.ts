/**
 * Whether a cluster has an open operation is read at every fresh session's claim, and its resync
 * reads them: the condition `concluded_at is null` was applied to every operation of the cluster
 * the index by revision found, the concluded ones kept for 90 days included, and with tens of
 * thousands of them the planner scanned the whole table. Migration 0031's partial index holds the
 * open ones only. Measured with EXPLAIN ANALYZE of the claim's own subquery over a real Postgres
 * (found by a read-only review of schema and retention; fails on the code before).
 */
import { describe, expect, it } from 'vitest';
import { OPEN_OPERATIONS } from '../../src/hub/db/desired';
import { useHub } from './support/hub';

const h = useHub();

interface PlanNode {
  'Node Type': string;
  'Actual Rows': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  Plans?: PlanNode[];
}
const nodes = (p: PlanNode): PlanNode[] => [p, ...(p.Plans ?? []).flatMap(nodes)];

describe("a cluster's open operations", () => {
  it('are found without reading its concluded ones', async () => {
    const c = await h.newCluster('open-ops');
    await h.sql(
      `insert into operations (operation_id, cluster_uid, kind, target, params, deadline, revision, state, concluded_at)
       select 'op-' || g, $1, 'node.drain', 'n', '{}'::jsonb, now() + interval '1 day', g, 'succeeded', now() - interval '1 day'
       from generate_series(1, 30000) g`,
      [c.uid],
    );
    await h.sql(`insert into operations (operation_id, cluster_uid, kind, target, params, deadline, revision) values ('op-open', $1, 'node.drain', 'n', '{}'::jsonb, now() + interval '1 day', 30001)`, [c.uid]);
    await h.sql('vacuum analyze operations');
    const text = `select ${OPEN_OPERATIONS.replaceAll('$1', `'${c.uid}'`).replaceAll('$3', '30001')} as open`;
    const [row] = await h.sql<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(`explain (analyze, format json) ${text}`);
    const plan = nodes((row?.['QUERY PLAN'][0] as { Plan: PlanNode }).Plan);
    const read = plan.filter((n) => /Scan/.test(n['Node Type'])).reduce((sum, n) => sum + n['Actual Rows'] + (n['Rows Removed by Filter'] ?? 0) + (n['Rows Removed by Index Recheck'] ?? 0), 0);
    expect(read, `rows read: ${JSON.stringify(plan.map((n) => n['Node Type']))}`).toBeLessThan(50);
    expect((await h.sql<{ open: boolean }>(text))[0]?.open).toBe(true);
  }, 60_000);
});
