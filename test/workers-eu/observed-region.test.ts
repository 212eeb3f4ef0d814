/**
 * Two regions, told apart (regions review): `cluster.observed` carries the operator's own region
 * (its cloud's, e.g. us-east4), and the hub has a region of its own (HUB_REGION, here eu). The
 * fleet list's `region` is the operator's; a cluster's answer carries the hub's as `region` and
 * the operator's as `observed_region`, so each field keeps one meaning.
 */
import { describe, expect, it } from 'vitest';
import { admin, connect, newCluster } from '../workers/support/peer';

describe("the operator's region and the hub's region (eu deployment)", () => {
  it("the fleet item's region is the operator's, the cluster's observed_region; the cluster's region is the hub's", async () => {
    const c = await newCluster('obsreg');
    const peer = await connect(c.token);
    await peer.hello({ cluster_id: c.name });
    await peer.next((f) => f.type === 'stream.end');
    peer.send('cluster.observed', { kubernetes_version: 'v1.31.2', provider: 'gke', region: 'us-east4', labels: {} });
    await peer.ackedThrough(1);
    peer.close();

    const view = (await admin('GET', `/clusters/${c.uid}`)).json;
    const fleet = (await admin('GET', '/fleet?limit=500')).json;
    const item = fleet.items.find((x: { uid: string }) => x.uid === c.uid);
    expect({ fleet: item.region, observed: view.observed_region, hub: view.region }).toEqual({ fleet: 'us-east4', observed: 'us-east4', hub: 'eu' });
  });
});
