import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, node, useHub } from './support/hub';

const h = useHub({ ...FAST_TIMERS, RETENTION_MS: '1500' });

describe('retention (DESIGN decision 2)', () => {
  it('a session object with no connection for the retention period deletes its storage: the next resume is a fresh session', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    peer.close();
    await peer.closed;
    await new Promise((r) => setTimeout(r, 4_000));
    const again = await h.connect(c.token, sessionId);
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    expect(w.payload.full_resync).toBe(true);
    expect(w.payload.session_id).not.toBe(sessionId);
    // The plane's state is in Postgres, not in the object: nothing observed was lost.
    expect(await h.sql('select node_id from nodes where cluster_uid = $1', [c.uid])).toEqual([{ node_id: 'n1' }]);
    again.close();
  });

  it('a reconnect within the retention period still resumes', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.close();
    await peer.closed;
    const again = await h.connect(c.token, sessionId);
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    expect(w.payload.full_resync).toBe(false);
    again.close();
  });
});
