/**
 * A DELETE locks the cluster row FOR UPDATE, then the deployment FOR UPDATE (f80950c). Every
 * other writer of the two (single and bulk PUT, the operator's refusals and events
 * through ingest's fence, which holds the cluster FOR SHARE) runs concurrently with DELETEs of
 * the same deployments, by name and by uid: none may deadlock (40P01) or fail, and the stream the
 * operator receives ends in what Postgres holds.
 */
import { describe, expect, it } from 'vitest';
import { desired, eventually, FAST_TIMERS, node, useHub } from './support/hub';

const h = useHub({ ...FAST_TIMERS, IDLE_TIMEOUT_MS: '30000', PG_QUERY_TIMEOUT_MS: '8000' });

describe('DELETE of a deployment under concurrent writers', () => {
  it('no deadlock or failure among DELETE (by name and uid, absent ones too), PUT, bulk PUT and ingest (refusals, observed rows, events) of the same cluster', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const ids = ['a', 'b', 'c'];
    for (const id of ids) expect((await h.admin('PUT', `/clusters/${c.name}/deployments/${id}`, desired())).status).toBe(200);
    const firsts = [];
    for (const id of ids) firsts.push(await peer.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === id));
    let stop = false;
    // The operator refuses each deployment again and again and reports events: ingest statements
    // that hold the cluster FOR SHARE and update desired_deployments rows.
    const ingest = (async () => {
      let i = 0;
      while (!stop) {
        const d = firsts[i % firsts.length]!;
        peer.send('error', { code: 'invalid', message: `refused ${i}`, retryable: false }, { reply_to: d.id });
        peer.send('node.observed', node(`n${i % 5}`));
        peer.send('node.event', { subject: 'n1', reason: 'R', message: '', severity: 'info', occurred_at: new Date().toISOString() });
        i++;
        await new Promise((r) => setTimeout(r, 2));
      }
    })();
    const statuses: number[] = [];
    const bodies: unknown[] = [];
    for (let round = 0; round < 15; round++) {
      const reqs = [
        h.admin('DELETE', `/clusters/${c.name}/deployments/a`),
        h.admin('DELETE', `/clusters/${c.uid}/deployments/a`),
        h.admin('PUT', `/clusters/${c.name}/deployments/a`, desired({ workload_id: `w${round}` })),
        h.admin('PUT', `/clusters/${c.uid}/deployments`, { deployments: ids.map((id) => ({ deployment_id: id, ...desired({ workload_id: `bulk${round}` }) })) }),
        h.admin('DELETE', `/clusters/${c.uid}/deployments/b`),
        h.admin('DELETE', `/clusters/${c.name}/deployments/c`),
        h.admin('PUT', `/clusters/${c.name}/deployments/b`, desired()),
        h.admin('DELETE', `/clusters/${c.name}/deployments/absent-${round}`),
      ];
      for (const r of await Promise.all(reqs)) {
        statuses.push(r.status);
        if (r.status >= 500) bodies.push(r.json);
      }
      // a, b and c exist (live or withdrawn) from before the first round: every request naming
      // them is answered 200; only the deployment that never existed is not found.
      expect(statuses.slice(-reqs.length), `round ${round}`).toEqual([200, 200, 200, 200, 200, 200, 200, 404]);
    }
    stop = true;
    await ingest;
    expect(bodies).toEqual([]);
    // The last frame of each deployment the operator gets is what Postgres holds.
    const rows = await h.sql<{ deployment_id: string; revision: string; deleted: boolean; workload_id: string }>(
      'select deployment_id, revision, deleted, workload_id from desired_deployments where cluster_uid = $1',
      [c.uid],
    );
    // What the operator applied last for each deployment (frames in arrival order) is what
    // Postgres holds, within a moment (the pokes; the fleet poll runs every 300 ms here).
    const want = Object.fromEntries(rows.map((r) => [r.deployment_id, { revision: Number(r.revision), deleted: r.deleted, workload_id: r.workload_id }]));
    const lastSeen = () => {
      const last: Record<string, unknown> = {};
      for (const f of peer.frames) {
        if (f.type !== 'deployment.desired') continue;
        const p = f.payload as { deployment_id: string; revision: number; deleted: boolean; workload_id: string };
        last[p.deployment_id] = { revision: p.revision, deleted: p.deleted, workload_id: p.workload_id };
      }
      return last;
    };
    await eventually(async () => JSON.stringify(lastSeen()) === JSON.stringify(want) || undefined, 5_000).catch(() => undefined);
    expect(lastSeen()).toEqual(want);
    peer.close();
  }, 60_000);
});
