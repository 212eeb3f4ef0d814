import { describe, expect, inject, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { desired, node, useHub, holdLock } from './support/hub';

const h = useHub();
const EMBEDDED = inject('embeddedPostgres');

describe('resume (spec: Sequence numbers and resume)', () => {
  it('a reconnect naming the session with a cursor resumes it: full_resync false, ack_seq is the hub cursor', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    peer.send('node.observed', node('n2'));
    await peer.ackedThrough(2);
    peer.close();
    await peer.closed;

    const again = await h.connect(c.token, sessionId);
    const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    expect(welcome.payload).toMatchObject({ session_id: sessionId, full_resync: false, ack_seq: 2 });
    again.close();
  });

  it('each direction continues its numbering across a resumed session', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const lastHubSeq = peer.hubCursor;
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    peer.close();
    await peer.closed;

    const again = await h.connect(c.token, sessionId);
    again.hubCursor = lastHubSeq;
    again.nextSeq = 2;
    await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: lastHubSeq });
    again.send('node.observed', node('n2'));
    await again.ackedThrough(2);
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired());
    const d = await again.next((f) => f.type === 'deployment.desired');
    expect(d.seq).toBe(lastHubSeq + 1);
    again.close();
  });

  it('unreleased frames are re-sent immediately after welcome, with their original id and seq', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const before = peer.hubCursor;
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired());
    const sent = await peer.next((f) => f.type === 'deployment.desired');
    // The operator never acknowledges it, and drops.
    peer.close();
    await peer.closed;

    const again = await h.connect(c.token, sessionId);
    const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: before });
    expect(welcome.payload.full_resync).toBe(false);
    const replayed = await again.next();
    expect(replayed).toMatchObject({ type: 'deployment.desired', id: sent.id, seq: sent.seq });
    again.close();
  });

  it('on resume the hub rewinds its arrival expectation to its cursor + 1 and accepts the replay', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    peer.close();
    await peer.closed;

    const again = await h.connect(c.token, sessionId);
    const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    expect(welcome.payload.ack_seq).toBe(1);
    again.nextSeq = 2;
    again.send('node.observed', node('n2'));
    again.send('node.observed', node('n3'));
    await again.ackedThrough(3);
    const rows = await h.sql<{ node_id: string }>('select node_id from nodes where cluster_uid = $1 order by node_id', [c.uid]);
    expect(rows.map((r) => r.node_id)).toEqual(['n1', 'n2', 'n3']);
    again.close();
  });

  it('a session_id the hub has no record of gets full_resync with a different session_id, and that one resumes next time (no resync loop)', async () => {
    const c = await h.newCluster();
    const bogus = '01J9WZZK3M4N5P6Q7R8S9T0V1W.01J9X0A1B2C3D4E5F6G7H8J9K0';
    const peer = await h.connect(c.token, bogus);
    const welcome = await peer.hello({ cluster_id: c.name, session_id: bogus, resume_from: 10 });
    expect(welcome.payload.full_resync).toBe(true);
    expect(welcome.payload.session_id).not.toBe(bogus);
    const granted = welcome.payload.session_id as string;
    await peer.next((f) => f.type === 'stream.end');
    peer.close();
    await peer.closed;

    const again = await h.connect(c.token, granted);
    const second = await again.hello({ cluster_id: c.name, session_id: granted, resume_from: peer.hubCursor });
    expect(second.payload).toMatchObject({ session_id: granted, full_resync: false });
    again.close();
  });

  it('an unroutable hint gets a fresh session', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token, 'not-a-session');
    const welcome = await peer.hello({ cluster_id: c.name, session_id: 'not-a-session', resume_from: 0 });
    expect(welcome.payload.full_resync).toBe(true);
    peer.close();
  });

  it('lossy forces a fresh session even when the session and cursor are known', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.close();
    await peer.closed;
    const again = await h.connect(c.token, sessionId);
    const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor, lossy: true });
    expect(welcome.payload.full_resync).toBe(true);
    expect(welcome.payload.session_id).not.toBe(sessionId);
    again.close();
  });

  it('a fresh session restarts numbering at 1 both ways and drops both buffers', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    peer.send('node.observed', node('n2'));
    await peer.ackedThrough(2);
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired());
    await peer.next((f) => f.type === 'deployment.desired');
    peer.close();
    await peer.closed;

    const again = await h.connect(c.token, sessionId);
    const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor, lossy: true });
    expect(welcome.payload.ack_seq).toBe(0);
    // The old desired frame is not re-sent: the resync supersedes it, numbered from 1.
    const begin = await again.next();
    expect(begin).toMatchObject({ type: 'resync.begin', seq: 1 });
    const d = await again.next();
    expect(d).toMatchObject({ type: 'deployment.desired', seq: 2, reply_to: begin.id });
    const end = await again.next();
    expect(end).toMatchObject({ type: 'stream.end', seq: 3, reply_to: begin.id, payload: { complete: true, count: 1 } });
    // The operator numbers from 1 again too.
    again.send('node.observed', node('n9'), { seq: 1 });
    await again.ackedThrough(1);
    again.close();
  });

  it('a resume_from ahead of anything the hub sent is not a resumable point: fresh session', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    // The operator claims a cursor ahead of anything the hub sent: not a resumable point.
    peer.close();
    await peer.closed;
    const again = await h.connect(c.token, sessionId);
    const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor + 100 });
    expect(welcome.payload.full_resync).toBe(true);
    again.close();
  });

  it('a newer connection for the same session supersedes the older one (4409 on the old)', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const again = await h.connect(c.token, sessionId);
    await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    expect((await peer.closedWith()).code).toBe(CloseCode.DISPLACED);
    again.close();
  });

  // PGlite has one backend: a held lock or transaction blocks everything, so these need a real server.
  it.skipIf(EMBEDDED)('a resume whose connection drops while its claim is in flight stays resumable: the next hello resumes it (a cut during the handshake is not a resync)', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const cursor = peer.hubCursor;
    peer.close();
    await peer.closed;
    const generation = async () =>
      Number((await h.sql<{ generation: string }>('select generation from cluster_owners where cluster_uid = $1', [c.uid]))[0]?.generation);
    const before = await generation();
    // Hold the claim row so the resume's claim waits; the operator's link is cut meanwhile, so the
    // claim (which bumps the generation) completes for a connection that is already gone.
    const release = await holdLock('select 1 from cluster_owners where cluster_uid = $1 for update', [c.uid]);
    try {
      const cut = await h.connect(c.token, sessionId);
      cut.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: sessionId, resume_from: cursor, lossy: false });
      await new Promise((r) => setTimeout(r, 200));
      cut.close();
      await cut.closed;
    } finally {
      await release();
    }
    for (let i = 0; i < 50 && (await generation()) === before; i++) await new Promise((r) => setTimeout(r, 50));
    expect(await generation()).toBe(before + 1);

    const again = await h.connect(c.token, sessionId);
    const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: cursor });
    expect(welcome.payload).toMatchObject({ session_id: sessionId, full_resync: false });
    again.close();
  });

  // PGlite has one backend: a held lock or transaction blocks everything, so these need a real server.
  it.skipIf(EMBEDDED)('frames numbered on the old connection while the resume is being claimed are re-sent after welcome too', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const cursor = peer.hubCursor;
    // Hold the claim row so the resume's claim statement waits; meanwhile the old connection is
    // still the session's, and a desired change is numbered and sent on it. (The waiting claim
    // holds one of its gateway shard's connections; the PUT and the poke go through others.)
    let again;
    const release = await holdLock('select 1 from cluster_owners where cluster_uid = $1 for update', [c.uid]);
    try {
      again = await h.connect(c.token, sessionId);
      again.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: sessionId, resume_from: cursor, lossy: false });
      await new Promise((r) => setTimeout(r, 200));
      await h.admin('PUT', `/clusters/${c.name}/deployments/during-claim`, desired());
      const onOld = await peer.next((f) => f.type === 'deployment.desired');
      expect(onOld.seq).toBe(cursor + 1);
    } finally {
      await release();
    }
    const welcome = await again.next((f) => f.type === 'welcome');
    expect(welcome.payload).toMatchObject({ full_resync: false, session_id: sessionId });
    const replayed = await again.next((f) => f.seq !== null);
    expect(replayed).toMatchObject({ type: 'deployment.desired', seq: cursor + 1 });
    expect((replayed.payload as { deployment_id: string }).deployment_id).toBe('during-claim');
    again.close();
  });
});
