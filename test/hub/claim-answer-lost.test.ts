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
import { FAST_TIMERS } from './support/hub';

const { h, relay } = useHubBehindRelay({ ...FAST_TIMERS, IDLE_TIMEOUT_MS: '30000', RETENTION_MS: '60000' }, answerResetRelay('wingsmith_claim_v'));

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
});
