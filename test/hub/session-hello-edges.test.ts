/**
 * Hello field edge cases against the real hub. Each bad hello gets the documented error
 * and close code, and never corrupts the session it named: the session still resumes after.
 */
import { describe, expect, it } from 'vitest';
import { newId } from '../../src/protocol';
import { node, useHub, type Frame, type Peer, type TestCluster } from './support/hub';

const h = useHub();

/** Open a fresh session, apply n1 and n2 (acked), and return it still open. */
async function opened(c: TestCluster) {
  const { peer, sessionId } = await h.openFresh(c);
  peer.send('node.observed', node('n1'));
  peer.send('node.observed', node('n2'));
  await peer.ackedThrough(2);
  // Release the hub's frames (begin, end) with an ack frame.
  peer.send('ack', {} as never);
  return { peer, sessionId };
}

function rawHello(peer: Peer, payload: Record<string, unknown>): string {
  const id = newId();
  peer.sendRaw(JSON.stringify({ v: 1, type: 'hello', id, seq: null, ack: null, reply_to: null, ts: new Date().toISOString(), payload }));
  return id;
}

async function expectRefused(peer: Peer, code: number): Promise<Frame> {
  const err = await peer.next((f) => f.type === 'error' || f.type === 'welcome', 5_000).catch(() => null);
  const closed = await peer.closedWith(5_000);
  expect(err?.type, `an error precedes the close ${code}; saw ${JSON.stringify(peer.frames)}`).toBe('error');
  expect(closed.code).toBe(code);
  return err as Frame;
}

/** The session still resumes, with its cursor intact. */
async function resumes(c: TestCluster, sessionId: string, resumeFrom: number, ackSeq: number) {
  const p = await h.connect(c.token, sessionId);
  const w = await p.hello({ cluster_id: c.name, session_id: sessionId, resume_from: resumeFrom });
  expect(w.payload).toMatchObject({ session_id: sessionId, full_resync: false, ack_seq: ackSeq });
  return p;
}

describe('hello resume_from edge cases', () => {
  for (const [label, value] of [
    ['negative', -1],
    ['fractional', 1.5],
    ['2^53', 2 ** 53],
    ['a string', '2'],
  ] as const) {
    it(`resume_from ${label} is refused with an error and 4400, and the session still resumes`, async () => {
      const c = await h.newCluster('rv-hello');
      const { peer, sessionId } = await opened(c);
      const p = await h.connect(c.token, sessionId);
      rawHello(p, { cluster_id: c.name, operator_version: '0.1.0', session_id: sessionId, resume_from: value, lossy: false });
      await expectRefused(p, 4400);
      // The live connection was not displaced by a hello that was refused.
      await new Promise((r) => setTimeout(r, 300));
      expect(peer.isClosed, 'the live connection survives a refused hello').toBe(false);
      peer.close();
      await peer.closedWith();
      const p2 = await resumes(c, sessionId, 2, 2);
      p2.close();
      expect((await h.sql('select node_id from nodes where cluster_uid = $1 order by 1', [c.uid])).map((r) => r.node_id)).toEqual(['n1', 'n2']);
    });
  }

  it('resume_from beyond what the hub sent gives a fresh session (full_resync, a new session_id) and keeps the rows', async () => {
    const c = await h.newCluster('rv-hello');
    const { peer, sessionId } = await opened(c);
    peer.close();
    await peer.closedWith();
    const p = await h.connect(c.token, sessionId);
    const w = await p.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 999 });
    expect(w.payload.full_resync).toBe(true);
    expect(w.payload.session_id).not.toBe(sessionId);
    expect(w.payload.ack_seq).toBe(0);
    const begin = await p.next((f) => f.type === 'resync.begin');
    expect(begin.seq).toBe(1);
    await p.next((f) => f.type === 'stream.end');
    // Numbering restarted at 1: the operator's seq 1 is accepted.
    p.nextSeq = 1;
    p.send('node.observed', node('n3'));
    await p.ackedThrough(1);
    expect((await h.sql('select node_id from nodes where cluster_uid = $1 order by 1', [c.uid])).map((r) => r.node_id)).toEqual(['n1', 'n2', 'n3']);
    // And the new session resumes on the next reconnect (a resync never repeats).
    p.close();
    await p.closedWith();
    const p2 = await resumes(c, w.payload.session_id as string, 2, 1);
    p2.close();
  });

  it('resume_from at the last frame sent resumes exactly (the boundary)', async () => {
    const c = await h.newCluster('rv-hello');
    const { peer, sessionId } = await opened(c);
    peer.close();
    await peer.closedWith();
    const p = await resumes(c, sessionId, 2, 2);
    p.close();
  });
});

describe('hello session_id and cluster_id edge cases', () => {
  it("a session_id of another cluster's session gives a fresh session of this cluster and leaves the other untouched", async () => {
    const a = await h.newCluster('rv-hello-a');
    const b = await h.newCluster('rv-hello-b');
    const sa = await opened(a);
    const sb = await opened(b);
    sb.peer.close();
    await sb.peer.closedWith();
    const p = await h.connect(a.token, sb.sessionId);
    const w = await p.hello({ cluster_id: a.name, session_id: sb.sessionId, resume_from: 2 });
    expect(w.payload.full_resync).toBe(true);
    expect(w.payload.session_id).not.toBe(sb.sessionId);
    await p.next((f) => f.type === 'stream.end');
    // A's older connection is displaced by A's newer session.
    expect((await sa.peer.closedWith(5_000)).code).toBe(4409);
    p.close();
    // B's session still resumes with its cursor.
    const pb = await resumes(b, sb.sessionId, 2, 2);
    pb.close();
    const view = await h.admin('GET', `/clusters/${b.name}`);
    expect(view.status).toBe(200);
  });

  for (const [label, sid] of [
    ['garbage', '!!!not a session'],
    ['one ulid', newId()],
    ['two dots', `${newId()}.${newId()}.${newId()}`],
    ['unicode', 'séssion.ünïcode'],
  ] as const) {
    it(`a malformed session_id in hello (${label}) gives a fresh session, not an error`, async () => {
      const c = await h.newCluster('rv-hello');
      const p = await h.connect(c.token);
      const w = await p.hello({ cluster_id: c.name, session_id: sid, resume_from: 5 });
      expect(w.payload).toMatchObject({ full_resync: true, ack_seq: 0 });
      expect(w.payload.session_id).not.toBe(sid);
      await p.next((f) => f.type === 'stream.end');
      p.close();
    });
  }

  it('a session_id longer than the schema allows is refused with an error and 4400', async () => {
    const c = await h.newCluster('rv-hello');
    const p = await h.connect(c.token);
    rawHello(p, { cluster_id: c.name, operator_version: '0.1.0', session_id: 'x'.repeat(200), resume_from: null, lossy: false });
    await expectRefused(p, 4400);
  });

  it("cluster_id naming another cluster is refused with an error and 4400, and the token's live session is not displaced", async () => {
    const a = await h.newCluster('rv-hello-a');
    const b = await h.newCluster('rv-hello-b');
    const sa = await opened(a);
    const p = await h.connect(a.token, sa.sessionId);
    rawHello(p, { cluster_id: b.name, operator_version: '0.1.0', session_id: sa.sessionId, resume_from: 2, lossy: false });
    await expectRefused(p, 4400);
    const p2 = await h.connect(a.token);
    rawHello(p2, { cluster_id: b.uid, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
    await expectRefused(p2, 4400);
    await new Promise((r) => setTimeout(r, 300));
    expect(sa.peer.isClosed).toBe(false);
    // The live session still applies.
    sa.peer.send('node.observed', node('n9'));
    await sa.peer.ackedThrough(3);
    // Nothing was written for B.
    expect(await h.sql('select node_id from nodes where cluster_uid = $1', [b.uid])).toEqual([]);
    sa.peer.close();
  });

  it('cluster_id given as the uid is admitted', async () => {
    const c = await h.newCluster('rv-hello');
    const p = await h.connect(c.token);
    const w = await p.hello({ cluster_id: c.uid });
    expect(w.payload.full_resync).toBe(true);
    p.close();
  });
});

describe('hello operator_version shapes', () => {
  for (const v of ['dev', 'abc1234', 'v0.9.9', '0.99.0-rc.1', '0.1.0+build.5', 'é-build', '0']) {
    it(`operator_version ${JSON.stringify(v)} is admitted`, async () => {
      const c = await h.newCluster('rv-ver');
      const p = await h.connect(c.token);
      const w = await p.hello({ cluster_id: c.name, operator_version: v });
      expect(w.type).toBe('welcome');
      p.close();
    });
  }
  for (const v of ['1.0.0', 'v1.0.0', '2.3.4-rc.1', '12.0.0']) {
    it(`operator_version ${JSON.stringify(v)} (another major) is refused retryable: false with 4400`, async () => {
      const c = await h.newCluster('rv-ver');
      const p = await h.connect(c.token);
      rawHello(p, { cluster_id: c.name, operator_version: v, session_id: null, resume_from: null, lossy: false });
      const err = await expectRefused(p, 4400);
      expect(err.payload.retryable).toBe(false);
    });
  }
  for (const [label, v] of [
    ['empty', ''],
    ['a number', 1],
    ['null', null],
  ] as const) {
    it(`operator_version ${label} is refused with an error and 4400`, async () => {
      const c = await h.newCluster('rv-ver');
      const p = await h.connect(c.token);
      rawHello(p, { cluster_id: c.name, operator_version: v, session_id: null, resume_from: null, lossy: false });
      await expectRefused(p, 4400);
    });
  }
});
