/**
 * A claim whose TCP connection to Postgres is reset after it committed, before its answer reached
 * the hub: the hello is refused 1013 (the claim's outcome is unknown), but the claim granted a
 * fresh session id that no connection will ever carry. It must not be shown connected, and the
 * operator's next hello (fresh too: it was never welcomed) must not be recorded as taking the
 * cluster from it: no other operator ever held the cluster.
 */
import { describe, expect, it } from 'vitest';
import { answerResetRelay } from './support/answer-reset-relay';
import { useHubBehindRelay } from './support/proxy-hub';
import { eventually, FAST_TIMERS, sleep } from './support/hub';
import { releaseUnansweredClaim } from '../../src/hub/db/ownership';

const { h, relay } = useHubBehindRelay({ ...FAST_TIMERS, IDLE_TIMEOUT_MS: '30000', RETENTION_MS: '60000', LIVE_SWEEP_MS: '1000' }, answerResetRelay('wingsmith_claim_v'));

describe('a claim whose connection is reset after its commit, before its answer', () => {
  it("the refused claim's session is not shown connected, and the operator's next fresh hello is not recorded as displacing it", async () => {
    const c = await h.newCluster('reset-claim');
    const first = await h.connect(c.token);
    const reset = relay().resetNextAnswer();
    first.send('hello', { operator_version: '0.1.0', cluster_id: c.name, session_id: null, resume_from: null, lossy: false });
    await reset;
    expect((await first.closedWith(10_000)).code, 'refused: the claim may or may not have committed').toBe(1013);
    expect(first.frames.map((f) => f.type)).not.toContain('welcome');
    const owners = await h.sql<{ session_id: string; connected: boolean }>('select session_id, connected from cluster_owners where cluster_uid = $1', [c.uid]);
    expect(owners, 'the claim committed').toHaveLength(1);
    expect(owners[0]?.connected, 'no connection carries the refused claim').toBe(false);

    // The operator tries again, as told: a fresh hello (it has no session to resume).
    const { peer, sessionId } = await h.openFresh(c);
    expect(sessionId).not.toBe(owners[0]?.session_id);
    const displacements = await h.sql('select from_session, to_session from cluster_displacements where cluster_uid = $1', [c.uid]);
    expect(displacements, 'no other operator ever held the cluster').toEqual([]);
    peer.close();
  }, 40_000);

  it('a resume whose claim committed unanswered leaves the session neither shown connected nor polled, the next claim by another operator is no displacement, and the operator still resumes it', async () => {
    // Before, the claim (generation 2) was released by nothing: the session's object publishes its
    // disconnect at the generation it knows (1). The owner row stayed connected, the session stayed
    // in the fleet poll (its object woken at every poll until its retention), and another
    // operator's claim was recorded as displacing it.
    const c = await h.newCluster('reset-resume');
    const { peer, sessionId } = await h.openFresh(c);
    peer.close();
    await eventually(async () => (await h.sql<{ connected: boolean }>('select connected from cluster_owners where cluster_uid = $1', [c.uid]))[0]?.connected === false, 10_000);

    const again = await h.connect(c.token, sessionId);
    const reset = relay().resetNextAnswer();
    again.send('hello', { operator_version: '0.1.0', cluster_id: c.name, session_id: sessionId, resume_from: 0, lossy: false });
    await reset;
    expect((await again.closedWith(10_000)).code).toBe(1013);
    const owners = await h.sql<{ session_id: string; generation: string; connected: boolean }>('select session_id, generation::text, connected from cluster_owners where cluster_uid = $1', [c.uid]);
    expect(owners, 'the resume claim committed').toEqual([{ session_id: sessionId, generation: '2', connected: false }]);
    expect(await h.sql('select session_id from live_sessions where cluster_uid = $1', [c.uid]), 'nothing to poll').toEqual([]);
    // Polls run every 300 ms: none wakes the session's object for it.
    const wakes = async () => ((await h.admin('GET', `/clusters/${c.uid}/session/wakes`)).json?.by_kind?.check as number | undefined) ?? 0;
    const before = await wakes();
    await sleep(2_000);
    expect(await wakes(), 'checks of a session no connection carries').toBe(before);

    // The same operator comes back to its session: resumed, not a resync.
    const back = await h.connect(c.token, sessionId);
    const welcome = await back.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 0 });
    expect(welcome.payload).toMatchObject({ session_id: sessionId, full_resync: false });
    back.close();
    await eventually(async () => (await h.sql<{ connected: boolean }>('select connected from cluster_owners where cluster_uid = $1', [c.uid]))[0]?.connected === false, 10_000);

    // Another operator's claim after the lost one: no displacement.
    const other = await h.openFresh(c);
    expect(await h.sql('select from_session, to_session from cluster_displacements where cluster_uid = $1', [c.uid])).toEqual([]);
    other.peer.close();
  }, 60_000);

  it('a release landing after a claim by code older than migration 0028 (a rolling deploy, a rollback) leaves that claim alone, though it kept the released claim id', async () => {
    const c = await h.newCluster('release-old-claim');
    const { peer, sessionId } = await h.openFresh(c);
    peer.close();
    await eventually(async () => (await h.sql<{ connected: boolean }>('select connected from cluster_owners where cluster_uid = $1', [c.uid]))[0]?.connected === false, 10_000);
    // An older hub's claim (wingsmith_claim_v7): a new session and generation, claim_id untouched.
    await h.sql(`update cluster_owners set session_id = 'older-hub.session', generation = generation + 1, connected = true where cluster_uid = $1`, [c.uid]);
    await h.sql(`insert into live_sessions (session_id, cluster_uid, poll_shard, generation, token_hash, seen_revision)
                 select 'older-hub.session', cluster_uid, 0, generation, decode(repeat('00', 32), 'hex'), 0 from cluster_owners where cluster_uid = $1`, [c.uid]);
    const sql = { query: async <R,>(text: string, params?: unknown[]) => ({ rows: (await h.sql(text, params ?? [])) as R[], rowCount: null }) };
    // The release of the first claim's id (its answer lost), landing late.
    await releaseUnansweredClaim(sql, c.uid, sessionId);
    expect(await h.sql('select session_id, connected from cluster_owners where cluster_uid = $1', [c.uid])).toEqual([{ session_id: 'older-hub.session', connected: true }]);
    expect(await h.sql('select session_id from live_sessions where cluster_uid = $1', [c.uid])).toEqual([{ session_id: 'older-hub.session' }]);
  }, 40_000);
});
