/**
 * A session's check (poked by the fleet poll) whose statement is held on its way to Postgres while
 * the session's connection ends: the disconnect, published on another gateway connection, commits
 * first; the check's statement arrives after it and commits, and its connection is reset before
 * the hub hears the answer. The check must not bring back "connected" for a session whose end was
 * already published: the disconnect also took it out of the fleet poll, so nothing would correct
 * it, and the operator's next fresh hello would be recorded as taking the cluster from it.
 */
import { describe, expect, it } from 'vitest';
import { answerResetRelay } from './support/answer-reset-relay';
import { useHubBehindRelay } from './support/proxy-hub';
import { desired, eventually, FAST_TIMERS } from './support/hub';

const { h, relay } = useHubBehindRelay({ ...FAST_TIMERS, IDLE_TIMEOUT_MS: '30000', RETENTION_MS: '60000', PG_QUERY_TIMEOUT_MS: '5000' }, answerResetRelay('wingsmith_session_check_v'));

describe("a session check that reaches Postgres after the session's disconnect was published", () => {
  it('does not show the ended session connected, and the next fresh hello is not recorded as displacing it', async () => {
    const c = await h.newCluster('check-late');
    const { peer, sessionId } = await h.openFresh(c);
    const held = relay().holdNext();
    // A desired change the session has not recorded seeing: the fleet poll pokes it to check.
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired())).status).toBe(200);
    await held;

    // The connection ends while the check is on its way; its disconnect commits first.
    peer.close();
    const owner = (): Promise<{ connected: boolean }[]> => h.sql('select connected from cluster_owners where cluster_uid = $1 and session_id = $2', [c.uid, sessionId]);
    await eventually(async () => (await owner())[0]?.connected === false);
    expect(await h.sql('select 1 from live_sessions where session_id = $1', [sessionId]), 'the session left the fleet poll').toEqual([]);

    await relay().releaseAndReset();
    expect((await owner())[0]?.connected, 'the late check does not show the ended session connected').toBe(false);

    // The operator comes back with a fresh hello: no other operator held the cluster.
    const again = await h.openFresh(c);
    const displacements = await h.sql('select from_session, to_session from cluster_displacements where cluster_uid = $1', [c.uid]);
    expect(displacements, 'the ended session was not displaced').toEqual([]);
    again.peer.close();
  }, 40_000);
});
