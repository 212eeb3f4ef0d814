/**
 * Admin writes while Postgres is unreachable: each answers a typed 503 JSON error, nothing of
 * it is stored or sent, and the same cluster's writes work again (the PUT coalescer is not left
 * holding a dead queue) once the database is back.
 */
import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, desired } from './support/hub';
import { useHubBehindProxy } from './support/proxy-hub';

const { h, proxyUp, proxyDown } = useHubBehindProxy({ ...FAST_TIMERS, HOLE_TIMEOUT_MS: '30000', IDLE_TIMEOUT_MS: '30000' });

describe('admin writes during a Postgres outage (DESIGN: 503 documented on every route)', () => {
  it('every write answers 503 {error:{code:"unavailable"}}, nothing is stored or sent, and writes work again afterwards', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await proxyDown();
    let results: { status: number; json: any }[];
    let retryAfter: string | null = null;
    try {
      // When to come back, as the connect route says it.
      retryAfter = (await fetch(`${h.hub.url}/admin/clusters/${c.name}/deployments/a`, { method: 'PUT', headers: { authorization: `Bearer ${h.hub.adminToken}`, 'content-type': 'application/json' }, body: JSON.stringify(desired()) })).headers.get('retry-after');
      results = await Promise.all([
        h.admin('PUT', `/clusters/${c.name}/deployments/a`, desired()),
        h.admin('PUT', `/clusters/${c.name}/deployments/b`, desired()),
        h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments: [{ deployment_id: 'x', ...desired() }, { deployment_id: 'y', ...desired() }] }),
        h.admin('DELETE', `/clusters/${c.name}/deployments/a`),
        h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.cordon', target: 'n1', deadline_s: 60 }),
        h.admin('POST', `/clusters/${c.name}/rotate-token`),
        h.admin('POST', `/clusters/${c.name}/disable`),
        h.admin('POST', '/clusters', { name: `zz-outage-${Date.now().toString(36)}` }),
      ]);
    } finally {
      await proxyUp();
    }
    for (const r of results) {
      expect(r.status).toBe(503);
      expect(r.json.error.code).toBe('unavailable');
    }
    expect(retryAfter).toBe('5');
    const rows = await h.sql('select deployment_id from desired_deployments where cluster_uid = $1', [c.uid]);
    expect(rows).toEqual([]);
    expect(peer.frames.filter((f) => f.type === 'deployment.desired')).toEqual([]);
    // The same cluster, by the same reference (same gateway shard, same coalescer key), works again.
    const put = await h.admin('PUT', `/clusters/${c.name}/deployments/a`, desired());
    expect(put.status).toBe(200);
    const f = await peer.next((x) => x.type === 'deployment.desired', 8_000);
    expect(f.payload).toMatchObject({ deployment_id: 'a', revision: put.json.revision });
    expect(peer.isClosed).toBe(false);
    peer.close();
  }, 60_000);
});
