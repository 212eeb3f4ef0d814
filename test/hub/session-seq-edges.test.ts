/**
 * Acks, seq, frames outside the session, superseded connections, envelope versions.
 */
import { describe, expect, it } from 'vitest';
import { newId } from '../../src/protocol';
import { node, sleep, useHub, type Peer } from './support/hub';

const h = useHub();

function raw(peer: Peer, env: Record<string, unknown>): string {
  const id = (env.id as string) ?? newId();
  peer.sendRaw(JSON.stringify({ v: 1, id, ack: null, reply_to: null, ts: new Date().toISOString(), payload: {}, ...env }));
  return id;
}

async function errorThenClose(peer: Peer, code: number) {
  const closed = await peer.closedWith(5_000);
  const err = peer.frames.find((f) => f.type === 'error' && f.seq === null);
  expect(err, `a connection-level error precedes ${code}; saw ${JSON.stringify(peer.frames.map((f) => [f.type, f.seq]))}`).toBeDefined();
  expect(closed.code).toBe(code);
  return err!;
}

const nodeIds = async (uid: string) => (await h.sql('select node_id, name from nodes where cluster_uid = $1 order by 1', [uid])).map((r) => `${r.node_id}:${r.name}`);

describe('acks', () => {
  it('an ack beyond what the hub sent: error then 4400; nothing of the frame applied; the session resumes', async () => {
    const c = await h.newCluster('rv-seq');
    const { peer, sessionId } = await h.openFresh(c);
    const id = peer.send('node.observed', node('n1'), { ack: 3 });
    const err = await errorThenClose(peer, 4400);
    expect(err.reply_to).toBe(id);
    expect(await nodeIds(c.uid)).toEqual([]);
    const p = await h.connect(c.token, sessionId);
    const w = await p.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 2 });
    expect(w.payload).toMatchObject({ full_resync: false, ack_seq: 0, session_id: sessionId });
    p.send('node.observed', node('n1'));
    await p.ackedThrough(1);
    p.close();
  });

  it('an ack going backwards is ignored and the session stays usable', async () => {
    const c = await h.newCluster('rv-seq');
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('n1'), { ack: 2 });
    peer.send('node.observed', node('n2'), { ack: 1 });
    peer.send('node.observed', node('n3'), { ack: 0 });
    await peer.ackedThrough(3);
    expect(peer.isClosed).toBe(false);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(JSON.stringify(view.json)).toBeTruthy();
    expect(await nodeIds(c.uid)).toEqual(['n1:n1', 'n2:n2', 'n3:n3']);
    peer.close();
  });

  for (const [label, ack] of [
    ['fractional', 1.5],
    ['negative', -1],
    ['a string', '1'],
  ] as const) {
    it(`a ${label} ack is an undecodable envelope: error then 4400, nothing applied`, async () => {
      const c = await h.newCluster('rv-seq');
      const { peer } = await h.openFresh(c);
      raw(peer, { type: 'node.observed', seq: 1, ack, payload: node('n1') });
      await errorThenClose(peer, 4400);
      await sleep(300);
      expect(await nodeIds(c.uid)).toEqual([]);
    });
  }
});

describe('seq', () => {
  it('a gap closes 4400 after an error; the frame before it is applied, the one after is not', async () => {
    const c = await h.newCluster('rv-seq');
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    peer.send('node.observed', node('n3'), { seq: 3 });
    await errorThenClose(peer, 4400);
    await sleep(300);
    expect(await nodeIds(c.uid)).toEqual(['n1:n1']);
  });

  it('seq 2^53-1 as the first frame is a gap (4400)', async () => {
    const c = await h.newCluster('rv-seq');
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('n1'), { seq: Number.MAX_SAFE_INTEGER });
    await errorThenClose(peer, 4400);
  });

  it('seq 2^53 (beyond safe) is an undecodable envelope (4400)', async () => {
    const c = await h.newCluster('rv-seq');
    const { peer } = await h.openFresh(c);
    raw(peer, { type: 'node.observed', seq: 2 ** 53, payload: node('n1') });
    await errorThenClose(peer, 4400);
  });

  it('a duplicate after a resume (different content, acked seq) is dropped, not applied again', async () => {
    const c = await h.newCluster('rv-seq');
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    peer.send('node.observed', node('n2'));
    await peer.ackedThrough(2);
    peer.close();
    await peer.closedWith();
    const p = await h.connect(c.token, sessionId);
    const w = await p.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 2 });
    expect(w.payload).toMatchObject({ full_resync: false, ack_seq: 2 });
    // A replay of seq 2 with different content: a duplicate.
    p.send('node.observed', { ...node('n2'), name: 'CHANGED' }, { seq: 2 });
    p.send('node.observed', { ...node('n1'), name: 'CHANGED' }, { seq: 1 });
    p.send('node.observed', node('n3'), { seq: 3 });
    await p.ackedThrough(3);
    expect(await nodeIds(c.uid)).toEqual(['n1:n1', 'n2:n2', 'n3:n3']);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.status).toBe(200);
    p.close();
  });

  it('an unacknowledged frame replayed after a resume applies once (same effect)', async () => {
    const c = await h.newCluster('rv-seq');
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    peer.close();
    await peer.closedWith();
    const p = await h.connect(c.token, sessionId);
    const w = await p.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 2 });
    expect(w.payload.ack_seq).toBe(1);
    p.nextSeq = 2;
    p.send('node.observed', node('n2'));
    await p.ackedThrough(2);
    expect(await nodeIds(c.uid)).toEqual(['n1:n1', 'n2:n2']);
    p.close();
  });
});

describe('frames outside the session', () => {
  it('a sequenced frame before the hello: error then 4400, nothing applied', async () => {
    const c = await h.newCluster('rv-seq');
    const p = await h.connect(c.token);
    p.send('node.observed', node('n1'));
    await errorThenClose(p, 4400);
    await sleep(300);
    expect(await nodeIds(c.uid)).toEqual([]);
  });

  it('an ack frame before the hello: error then 4400', async () => {
    const c = await h.newCluster('rv-seq');
    const p = await h.connect(c.token);
    p.send('ack', {} as never, { ack: 0 });
    await errorThenClose(p, 4400);
  });

  it('a second hello: error then 4400; the session resumes', async () => {
    const c = await h.newCluster('rv-seq');
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    const hid = peer.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: sessionId, resume_from: 2, lossy: false });
    const err = await errorThenClose(peer, 4400);
    expect(err.reply_to).toBe(hid);
    const p = await h.connect(c.token, sessionId);
    const w = await p.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 2 });
    expect(w.payload).toMatchObject({ full_resync: false, ack_seq: 1 });
    p.close();
  });

  it('a newer connection for the session closes the older 4409 after an error; frames on the older one are not applied', async () => {
    const c = await h.newCluster('rv-seq');
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    const p = await h.connect(c.token, sessionId);
    const w = await p.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 2 });
    expect(w.payload).toMatchObject({ full_resync: false, ack_seq: 1, session_id: sessionId });
    // The older connection sends at once, racing its close.
    try {
      peer.send('node.observed', { ...node('old'), name: 'from-old' });
    } catch {
      // already closed
    }
    const closed = await peer.closedWith(5_000);
    expect(closed.code).toBe(4409);
    expect(peer.frames.find((f) => f.type === 'error' && f.seq === null)).toBeDefined();
    // The new connection numbers from the resumed cursor; its seq 2 is its own frame.
    p.nextSeq = 2;
    p.send('node.observed', node('n2'));
    await p.ackedThrough(2);
    await sleep(300);
    expect(await nodeIds(c.uid)).toEqual(['n1:n1', 'n2:n2']);
    p.close();
  });
});

describe('envelope versions', () => {
  for (const v of [0, 2, 1.5, '1', null]) {
    it(`v ${JSON.stringify(v)}: error then 4400, nothing applied`, async () => {
      const c = await h.newCluster('rv-seq');
      const { peer } = await h.openFresh(c);
      raw(peer, { v, type: 'node.observed', seq: 1, payload: node('n1') });
      await errorThenClose(peer, 4400);
      await sleep(300);
      expect(await nodeIds(c.uid)).toEqual([]);
    });
  }

  it('v 2 on the hello: error then 4400', async () => {
    const c = await h.newCluster('rv-seq');
    const p = await h.connect(c.token);
    raw(p, { v: 2, type: 'hello', seq: null, payload: { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false } });
    await errorThenClose(p, 4400);
  });
});
