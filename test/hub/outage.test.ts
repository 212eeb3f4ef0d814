/**
 * A Postgres outage, cut at the network: this hub reaches the database through a proxy the test
 * owns, and the test takes it down and brings it back on the same port.
 */
import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, node } from './support/hub';
import { useHubBehindProxy } from './support/proxy-hub';

const { h, proxyUp, proxyDown } = useHubBehindProxy({ ...FAST_TIMERS, HOLE_TIMEOUT_MS: '30000', IDLE_TIMEOUT_MS: '30000' });

describe('Postgres outage during ingest (spec: transient failure withholds; DESIGN decision 5)', () => {
  it('frames sent while the database is unreachable are not acknowledged, and apply without loss once it returns', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('before'));
    await peer.ackedThrough(1);
    await proxyDown();
    for (let i = 1; i <= 20; i++) peer.send('node.observed', node(`n${i}`));
    peer.send('ping', {});
    await new Promise((r) => setTimeout(r, 2_000));
    expect(peer.lastAck()).toBe(1);
    expect(peer.isClosed).toBe(false);
    await proxyUp();
    await peer.ackedThrough(21, 15_000);
    const rows = await h.sql<{ n: string }>('select count(*) as n from nodes where cluster_uid = $1', [c.uid]);
    expect(Number(rows[0]?.n)).toBe(21);
    peer.close();
  });

  it('a connect while the registry is unreachable is refused before the upgrade with 503 and a JSON body', async () => {
    const c = await h.newCluster();
    await proxyDown();
    try {
      await expect(h.connect(c.token)).rejects.toThrow(/HTTP 503/);
    } finally {
      await proxyUp();
    }
    const { peer } = await h.openFresh(c);
    expect(peer.isClosed).toBe(false);
    peer.close();
  });
});
