/**
 * The cluster list and the fleet view read each listed cluster's rows through an index, however
 * few clusters own the rows of a table.
 *
 * Both statements look up, per listed cluster (500 a page, the dashboard's page size), its nodes,
 * GPUs, desired deployments and rejections, by a uid the planner does not know when it plans (a
 * correlated subquery). Its estimate of the rows one uid holds is the table divided by the
 * distinct uids ANALYZE saw. When one big cluster owns all of a table (the others not connected
 * yet, deployments or a poisoning operator's rejections in one cluster), that is the whole table:
 * the planner then scans it whole once per listed cluster. Measured with 5,000 clusters and one
 * of 100,000 deployments and GPUs: a fleet page of 500 took 4.8 s in Postgres (one of 9 s on a
 * loaded machine, against a 10 s statement deadline), a cluster list page 2.7 s, every page of
 * the dashboard's poll alike, growing with the big cluster until each answers 503. Timing is not
 * asserted (noisy machines): the plans are.
 */
import { beforeAll, describe, expect, it } from 'vitest';
import { LIST_SQL } from '../../src/hub/admin/cluster-view';
import { readFleet } from '../../src/hub/db/fleet';
import type { Sql } from '../../src/hub/db/sql';
import { withFileSql } from '../support/file-database';

/** Sorts before the empty clusters, so the first page holds it. */
const BIG = '01REVIEWSCALE-BIG';
const ROWS = 20_000;
const EMPTY = 600;
const PAGE = 500;
const PER_CLUSTER = ['nodes', 'devices', 'desired_deployments', 'observed_deployments', 'rejections'];

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Plans?: PlanNode[];
}

/** The per-cluster tables the plan reads with a sequential scan. */
function seqScans(plan: PlanNode): string[] {
  const own = plan['Node Type'] === 'Seq Scan' && PER_CLUSTER.includes(plan['Relation Name'] ?? '') ? [plan['Relation Name'] as string] : [];
  return [...own, ...(plan.Plans ?? []).flatMap(seqScans)];
}

async function planOf(text: string, params: unknown[]): Promise<PlanNode> {
  const rows = await withFileSql(async (sql) => (await sql.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(`explain (format json) ${text}`, params)).rows);
  return rows[0]!['QUERY PLAN'][0].Plan;
}

beforeAll(async () => {
  await withFileSql(async (sql) => {
    await sql.query(
      `insert into clusters (uid, name, token_hash, token_issued_at)
       select '01REVIEWSCALE' || lpad(i::text, 6, '0'), 'review-scale-' || i, decode(md5('review-scale-' || i), 'hex'), now()
       from generate_series(1, ${EMPTY}) i
       union all select $1, 'review-scale-big', decode(md5('review-scale-big'), 'hex'), now()`,
      [BIG],
    );
    await sql.query(
      `insert into nodes (cluster_uid, node_id, name, ready, schedulable, labels, taints, gpus, cpu_millis, memory_mb, obs_session, obs_seq)
       select $1, 'node-' || i, 'node-' || i, true, true, '{}', '[]', 8, 64000, 512000, 's', i from generate_series(1, ${ROWS / 8}) i`,
      [BIG],
    );
    await sql.query(
      `insert into devices (cluster_uid, device_id, node_id, vendor, model, memory_total_mb, health, driver_version, obs_session, obs_seq)
       select $1, 'GPU-' || i, 'node-' || (i / 8 + 1), 'nvidia', 'H100', 81559, 'healthy', '550', 's', i from generate_series(1, ${ROWS}) i`,
      [BIG],
    );
    await sql.query(
      `insert into desired_deployments (cluster_uid, deployment_id, workload_id, revision, min_replicas, max_replicas, serving)
       select $1, 'dep-' || i, 'w', i, 1, 1, '{}' from generate_series(1, ${ROWS}) i`,
      [BIG],
    );
    await sql.query(
      `insert into observed_deployments (cluster_uid, deployment_id, observed_revision, phase, ready_replicas, message, obs_session, obs_seq)
       select $1, 'dep-' || i, i, 'Ready', 1, '', 's', i from generate_series(1, ${ROWS}) i`,
      [BIG],
    );
    await sql.query(
      `insert into rejections (cluster_uid, session_id, seq, frame_id, type, reason, received_at)
       select $1, 's', i, null, 'node.observed', 'invalid', now() - make_interval(secs => i) from generate_series(1, ${ROWS}) i`,
      [BIG],
    );
    // What autovacuum would have done by the time a fleet is this size: the statistics the planner
    // decides by.
    await sql.query(`vacuum analyze ${PER_CLUSTER.join(', ')}, clusters`);
  });
}, 60_000);

describe('per-cluster reads of the admin lists, when one cluster owns every row', () => {
  it('a page of the cluster list scans no per-cluster table whole', async () => {
    const plan = await planOf(LIST_SQL, [15_000, 60_000, 60_000, null, PAGE + 1]);
    expect(seqScans(plan)).toEqual([]);
  });

  it('a page of the fleet view (totals=false, as for every page after the first) scans no per-cluster table whole, and still counts the big cluster', async () => {
    let sent: { text: string; params: unknown[] } | null = null;
    const page = await withFileSql((sql) => {
      const recording: Sql = {
        query: (text, params) => {
          sent = { text, params: params ?? [] };
          return sql.query(text, params);
        },
      };
      return readFleet(recording, { staleAfterMs: 15_000, hours: 168, after: null, limit: PAGE, totals: false, contention: { windowMs: 60_000, quietMs: 60_000 } });
    });
    const big = page.items.find((i) => i.uid === BIG);
    expect({ nodes: big?.nodes, gpus: big?.gpus, deployments: big?.deployments }).toEqual({
      nodes: ROWS / 8,
      gpus: ROWS,
      deployments: { desired: ROWS, in_sync: ROWS, out_of_sync: 0 },
    });
    const plan = await planOf(sent!.text, sent!.params);
    expect(seqScans(plan)).toEqual([]);
  });
});
