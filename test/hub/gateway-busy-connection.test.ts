/**
 * A statement the gateway relays is handed to its connection within what is left of its caller's
 * wait, or not at all, when the connection is busy too, not only when it is slow to open. Queued
 * in the driver behind a slow statement, a PUT was sent when that one ended, with a whole deadline
 * of its own on the server, and could commit after the Worker had answered 503 "retry".
 */
import { describe, expect, it } from 'vitest';
import { desired, FAST_TIMERS, holdLock, sleep, useHub, waitingOnLock } from './support/hub';

const T = 4_000;
const h = useHub({ ...FAST_TIMERS, PG_QUERY_TIMEOUT_MS: String(T), DB_GATEWAY_SHARDS: '1', DB_GATEWAY_CONNECTIONS: '1' });

describe('a statement relayed behind a busy one', () => {
  it('is not sent past its send-by time: a PUT answered 503 "retry" is not written later', async () => {
    const x = await h.newCluster('busy-x');
    const y = await h.newCluster('busy-y');
    // Open the shard's one connection first, so that only its being busy can hold the PUT.
    expect((await h.admin('PUT', `/clusters/${x.name}/deployments/warm`, desired())).status).toBe(200);

    const releaseX = await holdLock('select 1 from clusters where uid = $1 for update', [x.uid]);
    const releaseY = await holdLock('select 1 from clusters where uid = $1 for update', [y.uid]);
    const slow = h.admin('PUT', `/clusters/${x.name}/deployments/d-slow`, desired());
    for (let i = 0; i < 50 && (await waitingOnLock(h, '%desired_deployments%')) === 0; i++) await sleep(50);
    const late = h.admin('PUT', `/clusters/${y.name}/deployments/d-late`, desired());
    await sleep(2_500); // past the queued PUT's send-by time (1.5 s at this deadline)
    await releaseX(); // the slow one commits; the connection is free for whatever waited behind it
    expect((await slow).status).toBe(200);
    const r = await late;
    expect(r.status, JSON.stringify(r.json)).toBe(503);
    await releaseY(); // a statement sent after the slow one would commit now
    await sleep(1_500);
    expect(await h.sql('select deployment_id from desired_deployments where cluster_uid = $1', [y.uid]), 'a PUT answered 503 "retry" was written').toEqual([]);

    // The retry, on the connection now free, is written.
    const again = await h.admin('PUT', `/clusters/${y.name}/deployments/d-late`, desired());
    expect(again.status, JSON.stringify(again.json)).toBe(200);
    expect(await h.sql('select deployment_id from desired_deployments where cluster_uid = $1', [y.uid])).toEqual([{ deployment_id: 'd-late' }]);
  }, 40_000);

  it('a rotate-token answered 503 "retry" behind a busy connection leaves the token as it was', async () => {
    const x = await h.newCluster('busy-rx');
    const y = await h.newCluster('busy-ry');
    expect((await h.admin('PUT', `/clusters/${x.name}/deployments/warm`, desired())).status).toBe(200);
    const tokenOf = async () => (await h.sql<{ t: string }>(`select encode(token_hash, 'hex') as t from clusters where uid = $1`, [y.uid]))[0]?.t;
    const before = await tokenOf();

    const releaseX = await holdLock('select 1 from clusters where uid = $1 for update', [x.uid]);
    const releaseY = await holdLock('select 1 from clusters where uid = $1 for update', [y.uid]);
    const slow = h.admin('PUT', `/clusters/${x.name}/deployments/d-slow`, desired());
    for (let i = 0; i < 50 && (await waitingOnLock(h, '%desired_deployments%')) === 0; i++) await sleep(50);
    const rotate = h.admin('POST', `/clusters/${y.name}/rotate-token`);
    await sleep(2_500);
    await releaseX();
    expect((await slow).status).toBe(200);
    const r = await rotate;
    expect(r.status, JSON.stringify(r.json)).toBe(503);
    await releaseY(); // a rotation sent after the slow PUT would commit now
    await sleep(1_500);
    expect(await tokenOf(), 'a rotation answered 503 "retry" replaced the token, and nobody was shown the new one').toBe(before);
    // The operator's token still opens a session.
    const { peer } = await h.openFresh(y);
    peer.close();
  }, 40_000);
});
