/**
 * Concurrent writers of one cluster reaching the gateway by different references (uid and name
 * hash to different shards, so their pokes race), a bulk and single PUTs and DELETEs naming the
 * same deployments: the operator must see revisions in increasing order and end on exactly what
 * Postgres holds, never a stale version winning.
 */
import { describe, expect, it } from 'vitest';
import { desired, useHub } from './support/hub';

const h = useHub();

describe('revision order across concurrent bulk and single writes', () => {
  it('the operator sees increasing revisions and ends on what Postgres holds for every deployment', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    // The writes below can outlast the 3 s silence limit on a loaded machine: the operator pings.
    const pinger = setInterval(() => peer.isClosed || peer.send('ping', {}, { ack: peer.hubCursor }), 500);
    const ids = ['d0', 'd1', 'd2', 'd3', 'd4'];
    for (let round = 0; round < 8; round++) {
      await Promise.all([
        h.admin('PUT', `/clusters/${c.uid}/deployments`, { deployments: ids.map((id) => ({ deployment_id: id, ...desired({ min_replicas: 0, max_replicas: 100 + round }) })) }),
        ...ids.map((id, i) => h.admin('PUT', `/clusters/${c.name}/deployments/${id}`, desired({ min_replicas: 1, max_replicas: 200 + round * 10 + i }))),
        h.admin('DELETE', `/clusters/${c.uid}/deployments/${ids[round % ids.length]}`),
      ]);
    }
    const rows = await h.sql<{ deployment_id: string; revision: string; max_replicas: number; deleted: boolean }>(
      'select deployment_id, revision, max_replicas, deleted from desired_deployments where cluster_uid = $1',
      [c.uid],
    );
    const top = Math.max(...rows.map((r) => Number(r.revision)));
    // Wait until the operator has seen the highest revision stored.
    await peer.next((f) => f.type === 'deployment.desired' && (f.payload.revision as number) >= top, 10_000).catch(() => null);
    await new Promise((r) => setTimeout(r, 800));
    const got = peer.frames.filter((f) => f.type === 'deployment.desired' && f.reply_to === null);
    const revs = got.map((f) => f.payload.revision as number);
    expect(revs).toEqual([...revs].sort((a, b) => a - b));
    expect(new Set(revs).size).toBe(revs.length);
    const last = new Map<string, Record<string, unknown>>();
    for (const f of got) last.set(f.payload.deployment_id as string, f.payload);
    for (const r of rows) {
      expect(last.get(r.deployment_id), r.deployment_id).toMatchObject({ revision: Number(r.revision), deleted: r.deleted, ...(r.deleted ? {} : { max_replicas: r.max_replicas }) });
    }
    expect(peer.isClosed).toBe(false);
    clearInterval(pinger);
    peer.close();
  }, 60_000);
});
