/**
 * A statement the gateway relays is sent within what is left of its caller's wait, or not at all.
 * After a slow connect (a database restarting, slow to accept) a statement was sent with a whole
 * deadline of its own, on the server too, and could commit after the Worker had answered 503
 * "retry": here a PUT, sent when the connection opened 3.3 s into a 4 s deadline, waited on a row
 * lock and was written 1.5 s after its 503 (found by review; the test fails on the code before).
 */
import { describe, expect, it } from 'vitest';
import { useHubBehindRelay } from './support/proxy-hub';
import { startStallRelay } from './support/stall-relay';
import { desired, FAST_TIMERS, holdLock, sleep } from './support/hub';

const T = 4_000;
const { h, relay } = useHubBehindRelay({ ...FAST_TIMERS, PG_QUERY_TIMEOUT_MS: String(T), DB_GATEWAY_SHARDS: '1', DB_GATEWAY_CONNECTIONS: '1' }, startStallRelay);

describe('a statement relayed after a slow connect', () => {
  it('a PUT answered 503 "retry" is not written later; the next one, on the connection now open, is', async () => {
    const c = await h.newCluster('slow-connect');
    const release = await holdLock('select 1 from clusters where uid = $1 for update', [c.uid]);
    relay().restartSlowly(); // open links cut, new ones held until released
    await sleep(300); // the shard's connection has seen its link end: the PUT needs a new one
    const put = h.admin('PUT', `/clusters/${c.name}/deployments/d-late`, desired());
    await sleep(3_300);
    relay().releaseHeld(); // the connection opens 3.3 s after the statement was asked for
    const r = await put;
    expect(r.status, JSON.stringify(r.json)).toBe(503);
    await release(); // the lock goes after the answer: a statement sent would commit now
    await sleep(1_500);
    expect(await h.sql('select deployment_id from desired_deployments where cluster_uid = $1', [c.uid]), 'a PUT answered 503 "retry" was written').toEqual([]);

    // The connect went on for the statements after it: the retry is written.
    const again = await h.admin('PUT', `/clusters/${c.name}/deployments/d-late`, desired());
    expect(again.status, JSON.stringify(again.json)).toBe(200);
    expect(await h.sql('select deployment_id from desired_deployments where cluster_uid = $1', [c.uid])).toEqual([{ deployment_id: 'd-late' }]);
  }, 40_000);
});
