/**
 * DELETEs that wait on the cluster's row behind another write of the same deployment. The
 * withdrawal must act on the deployment as Postgres holds it once the wait is over: a PUT that
 * committed first is what the tombstone carries (its frame is what a fetch of that revision would
 * send), and a DELETE that committed first makes the second a no-op (no new revision, no second
 * deletion frame), as when the two run one after the other.
 */
import { describe, expect, it } from 'vitest';
import { desired, FAST_TIMERS, holdLock, sleep, useHub } from './support/hub';

const h = useHub({ ...FAST_TIMERS, PG_QUERY_TIMEOUT_MS: '8000' });

describe('a DELETE that waited behind another write of the same deployment', () => {
  it('carries the values of the PUT that committed while it waited, as Postgres holds them at its revision', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const first = await h.admin('PUT', `/clusters/${c.name}/deployments/x`, desired({ workload_id: 'old-w', min_replicas: 1, max_replicas: 2 }));
    expect(first.status).toBe(200);
    await peer.next((f) => f.type === 'deployment.desired' && f.payload.revision === first.json.revision);

    // Both writes queue on the cluster's row: the PUT first, then the DELETE (whose snapshot,
    // taken now, still sees old-w live).
    const release = await holdLock('select 1 from clusters where uid = $1 for update', [c.uid]);
    const put = h.admin('PUT', `/clusters/${c.name}/deployments/x`, desired({ workload_id: 'new-w', min_replicas: 3, max_replicas: 9 }));
    await sleep(400);
    const del = h.admin('DELETE', `/clusters/${c.name}/deployments/x`);
    await sleep(400);
    await release();
    const [p, d] = await Promise.all([put, del]);
    expect(p.status).toBe(200);
    expect(d.status).toBe(200);
    expect(d.json.revision).toBeGreaterThan(p.json.revision);

    const [row] = await h.sql<{ workload_id: string; min_replicas: number; max_replicas: number; revision: string; deleted: boolean }>(
      `select workload_id, min_replicas, max_replicas, revision, deleted from desired_deployments where cluster_uid = $1 and deployment_id = 'x'`,
      [c.uid],
    );
    expect(row).toMatchObject({ workload_id: 'new-w', min_replicas: 3, max_replicas: 9, deleted: true });
    expect(Number(row?.revision)).toBe(d.json.revision);

    const tomb = await peer.next((f) => f.type === 'deployment.desired' && f.payload.revision === d.json.revision, 5_000);
    // What Postgres holds at this revision (and what the fetch path would send for it).
    expect(tomb.payload).toEqual({
      deployment_id: 'x',
      workload_id: row?.workload_id,
      revision: d.json.revision,
      min_replicas: row?.min_replicas,
      max_replicas: row?.max_replicas,
      serving: null,
      deleted: true,
    });
    peer.close();
  }, 30_000);

  it('behind another DELETE of it, writes nothing: one new revision and one deletion frame in all', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments/x`, desired());
    expect(put.status).toBe(200);
    await peer.next((f) => f.type === 'deployment.desired' && f.payload.revision === put.json.revision);

    const release = await holdLock('select 1 from clusters where uid = $1 for update', [c.uid]);
    const a = h.admin('DELETE', `/clusters/${c.name}/deployments/x`);
    await sleep(300);
    const b = h.admin('DELETE', `/clusters/${c.name}/deployments/x`);
    await sleep(300);
    await release();
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra.status).toBe(200);
    expect(rb.status).toBe(200);

    const [cl] = await h.sql<{ desired_revision: string }>('select desired_revision from clusters where uid = $1', [c.uid]);
    await sleep(800); // pokes and a poll or two
    const deletions = peer.frames.filter((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'x' && f.payload.deleted === true);
    // Done sequentially, the second DELETE answers the first one's revision and writes nothing.
    expect.soft(Number(cl?.desired_revision)).toBe(put.json.revision + 1);
    expect.soft(rb.json.revision).toBe(ra.json.revision);
    expect(deletions).toHaveLength(1);
    peer.close();
  }, 30_000);
});
