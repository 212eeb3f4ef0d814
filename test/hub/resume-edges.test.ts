/**
 * The hub's outbound stream and resume against the fields an operator controls (resume_from, ack)
 * at the edges resume.test.ts leaves out: mid-buffer resume points, a resume below the operator's
 * own ack, acks going backwards or past the last seq, a resume racing the open connection or a
 * second hello, and a resume after the object was evicted. Guards written by a review of the
 * resume path (2026-12-04); all held on the code they were written against.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { desired, FAST_TIMERS, node, sleep, useHub, type Frame } from './support/hub';

const h = useHub({ ...FAST_TIMERS, RETENTION_MS: '60000' });

async function threeDesired(): Promise<{ c: Awaited<ReturnType<typeof h.newCluster>>; peer: Awaited<ReturnType<typeof h.connect>>; sessionId: string; seqs: Frame[] }> {
  const c = await h.newCluster();
  const { peer, sessionId } = await h.openFresh(c);
  const seqs: Frame[] = [];
  for (let i = 0; i < 3; i++) {
    await h.admin('PUT', `/clusters/${c.name}/deployments/d${i}`, desired());
    seqs.push(await peer.next((f) => f.type === 'deployment.desired'));
  }
  return { c, peer, sessionId, seqs };
}

describe('review: resume edges', () => {
  it('a resume from between the operator ack and the last seq sent replays exactly the frames after it, then numbering continues', async () => {
    const { c, peer, sessionId, seqs } = await threeDesired();
    const [a, b, d] = seqs as [Frame, Frame, Frame];
    peer.send('ack', {}, { ack: a.seq });
    await sleep(200);
    peer.close();
    await peer.closed;
    const again = await h.connect(c.token, sessionId);
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: b.seq });
    expect(w.payload.full_resync).toBe(false);
    const r = await again.next((f) => f.seq !== null);
    expect(r).toMatchObject({ seq: d.seq, id: d.id });
    again.hubCursor = d.seq as number;
    await h.admin('PUT', `/clusters/${c.name}/deployments/d9`, desired());
    const n = await again.next((f) => f.seq !== null);
    expect(n).toMatchObject({ type: 'deployment.desired', seq: (d.seq as number) + 1 });
    again.close();
  });

  it('a Wingsmith-Session hint with whitespace around it (not part of a field value, RFC 9110 5.5) still resumes the session', async () => {
    const c = await h.newCluster('hint-ws');
    const { peer, sessionId } = await h.openFresh(c);
    peer.close();
    await peer.closed;
    const again = await h.connect(c.token, `${sessionId} `);
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 0 });
    again.close();
    expect({ session_id: w.payload.session_id, full_resync: w.payload.full_resync }).toEqual({ session_id: sessionId, full_resync: false });
  });

  it('a resume from below what the operator already acknowledged is a fresh session', async () => {
    const { c, peer, sessionId, seqs } = await threeDesired();
    peer.send('ack', {}, { ack: seqs[1]?.seq });
    await sleep(200);
    peer.close();
    await peer.closed;
    const again = await h.connect(c.token, sessionId);
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: seqs[0]?.seq });
    expect(w.payload.full_resync).toBe(true);
    expect(w.payload.session_id).not.toBe(sessionId);
    again.close();
  });

  it('an ack going backwards is ignored; an ack beyond the last seq sent closes 4400 with an error', async () => {
    const { peer, seqs } = await threeDesired();
    peer.send('ack', {}, { ack: seqs[2]?.seq });
    peer.send('ack', {}, { ack: 1 });
    peer.send('node.observed', node('n1'), { ack: 0 });
    await peer.ackedThrough(1);
    expect(peer.isClosed).toBe(false);
    peer.send('ack', {}, { ack: (seqs[2]?.seq as number) + 1 });
    expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
  });

  it('a resume while the old connection is open, mid-buffer, replays exactly the rest on the new one', async () => {
    const { c, peer, sessionId, seqs } = await threeDesired();
    const again = await h.connect(c.token, sessionId);
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: seqs[0]?.seq });
    expect(w.payload.full_resync).toBe(false);
    expect((await peer.closedWith()).code).toBe(CloseCode.DISPLACED);
    const got = [await again.next((f) => f.seq !== null), await again.next((f) => f.seq !== null)];
    expect(got.map((f) => f.id)).toEqual([seqs[1]?.id, seqs[2]?.id]);
    await sleep(300);
    expect(again.frames.filter((f) => f.seq !== null).length).toBe(2);
    again.close();
  });

  it('pipelined hellos on two new connections: each welcome is followed by the replay', async () => {
    const { c, peer, sessionId, seqs } = await threeDesired();
    const b = await h.connect(c.token, sessionId);
    const d = await h.connect(c.token, sessionId);
    b.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: sessionId, resume_from: seqs[0]?.seq as number, lossy: false });
    d.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: sessionId, resume_from: seqs[0]?.seq as number, lossy: false });
    const wd = await d.next((f) => f.type === 'welcome' || f.type === 'error');
    expect(wd.payload.full_resync).toBe(false);
    const got = [await d.next((f) => f.seq !== null), await d.next((f) => f.seq !== null)];
    expect(got.map((f) => f.id)).toEqual([seqs[1]?.id, seqs[2]?.id]);
    void peer;
    d.close();
  });

  it('after an eviction the resume replays exactly the unacknowledged rest and numbering continues', async () => {
    const { c, peer, sessionId, seqs } = await threeDesired();
    peer.send('ack', {}, { ack: seqs[0]?.seq });
    await sleep(200);
    peer.close();
    await peer.closed;
    const inst = async () => String((await h.admin('GET', `/clusters/${c.name}`)).json.session?.live?.instance ?? '');
    const before = await inst();
    const quiet = await h.connect(c.token, sessionId);
    quiet.close();
    await quiet.closed;
    await sleep(300);
    if ((await inst()) === before) await sleep(25_000);
    expect(await inst()).not.toBe(before);
    const again = await h.connect(c.token, sessionId);
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: seqs[0]?.seq });
    expect(w.payload.full_resync).toBe(false);
    const got = [await again.next((f) => f.seq !== null), await again.next((f) => f.seq !== null)];
    expect(got.map((f) => f.id)).toEqual([seqs[1]?.id, seqs[2]?.id]);
    again.hubCursor = seqs[2]?.seq as number;
    await h.admin('PUT', `/clusters/${c.name}/deployments/d9`, desired());
    expect(await again.next((f) => f.seq !== null)).toMatchObject({ seq: (seqs[2]?.seq as number) + 1 });
    again.close();
  }, 60_000);
});
