/**
 * The operator's resync stream prunes only on a complete stream, and poison frames are
 * counted, acknowledged, answered with a sequenced error, recorded, and leave the session usable.
 */
import { describe, expect, it } from 'vitest';
import { newId } from '../../src/protocol';
import { eventually, node, sleep, useHub, type Peer } from './support/hub';
import { captureHubLines } from './support/hub-lines';

const lines = captureHubLines();
// The stream's end is an info line.
process.env.E2E_HUB_LOG = 'log';
const h = useHub();

const nodeIds = async (uid: string) => (await h.sql('select node_id from nodes where cluster_uid = $1 order by 1', [uid])).map((r) => r.node_id as string);

async function seeded(prefix: string, ids: string[]) {
  const c = await h.newCluster(prefix);
  const { peer, sessionId } = await h.openFresh(c);
  for (const id of ids) peer.send('node.observed', node(id));
  await peer.ackedThrough(ids.length);
  return { c, peer, sessionId };
}

describe('operator resync stream', () => {
  it('complete: true with the right count prunes absent rows and keeps rows re-reported after the begin', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b', 'c']);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('a'), { reply_to: begin });
    peer.send('node.observed', node('c')); // ordinary traffic after the begin: current, stays
    peer.send('stream.end', { complete: true, count: 1 }, { reply_to: begin });
    await peer.ackedThrough(7);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a', 'c']);
    expect(peer.isClosed).toBe(false);
    peer.close();
  });

  it('a kind this hub does not know (a newer operator\'s) is left alone: the kinds it knows are pruned, the unknown type is answered', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b', 'c']);
    const begin = peer.send('resync.begin', { scope: ['node', 'gizmo'] });
    peer.send('node.observed', node('a'), { reply_to: begin });
    // A member of the unknown kind: an unknown type, dropped and answered, and counted.
    const gizmo = newId();
    peer.sendRaw(JSON.stringify({ v: 1, type: 'gizmo.observed', id: gizmo, seq: peer.nextSeq++, ack: peer.hubCursor, reply_to: begin, ts: new Date().toISOString(), payload: { gizmo_id: 'g1' } }));
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(7);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a']);
    const answer = await peer.next((f) => f.type === 'error' && f.reply_to === gizmo);
    expect(answer.payload).toMatchObject({ code: 'invalid', retryable: false, unknown_type: 'gizmo.observed' });
    expect(peer.isClosed).toBe(false);
    // The end's line names the kind no one pruned.
    await eventually(async () => lines.some((l) => l.msg === 'operator resync complete; pruned absent rows' && l.begin === begin && JSON.stringify(l.not_pruned_unknown_kinds) === '["gizmo"]'));
    peer.close();
  });

  it('an unknown type of a known kind the stream does not prune (a device type in a node snapshot) leaves the nodes prunable', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b']);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('a'), { reply_to: begin });
    peer.sendRaw(JSON.stringify({ v: 1, type: 'device.capacity', id: newId(), seq: peer.nextSeq++, ack: peer.hubCursor, reply_to: begin, ts: new Date().toISOString(), payload: { device_id: 'g1' } }));
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(6);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a']);
    peer.close();
  });

  it('an unknown type of a kind the stream prunes leaves that snapshot unknown: nothing is pruned', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b']);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('a'), { reply_to: begin });
    peer.sendRaw(JSON.stringify({ v: 1, type: 'node.capacity', id: newId(), seq: peer.nextSeq++, ack: peer.hubCursor, reply_to: begin, ts: new Date().toISOString(), payload: { node_id: 'b' } }));
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(6);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a', 'b']);
    peer.close();
  });

  it('complete: false prunes nothing', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b']);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('a'), { reply_to: begin });
    peer.send('stream.end', { complete: false, count: 1 }, { reply_to: begin });
    await peer.ackedThrough(5);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a', 'b']);
    peer.close();
  });

  it('a miscounted complete stream prunes nothing', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b']);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('a'), { reply_to: begin });
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(5);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a', 'b']);
    peer.close();
  });

  it('a stream.end whose reply_to names no begin prunes nothing; the open stream is untouched and later ends', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b']);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('a'), { reply_to: begin });
    peer.send('stream.end', { complete: true, count: 1 }, { reply_to: newId() });
    await peer.ackedThrough(5);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a', 'b']);
    // The real end still completes the open stream.
    peer.send('stream.end', { complete: true, count: 1 }, { reply_to: begin });
    await peer.ackedThrough(6);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a']);
    peer.close();
  });

  it('a stream.end with no begin at all (reply_to null) prunes nothing; the session stays usable', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b']);
    peer.send('stream.end', { complete: true, count: 0 });
    peer.send('node.observed', node('d'));
    await peer.ackedThrough(4);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a', 'b', 'd']);
    peer.close();
  });

  it('a stream.end whose reply_to names an ordinary frame (not a begin) prunes nothing', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b']);
    const plain = peer.send('node.observed', node('a'));
    peer.send('stream.end', { complete: true, count: 0 }, { reply_to: plain });
    await peer.ackedThrough(4);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a', 'b']);
    peer.close();
  });

  it('a second begin before the first ends: the first, completed, prunes only what neither carried nor was reported after it', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b']);
    const first = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('a'), { reply_to: first });
    const second = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('x'), { reply_to: second });
    peer.send('stream.end', { complete: true, count: 1 }, { reply_to: first });
    await peer.ackedThrough(7);
    await sleep(200);
    // b is absent from the first snapshot and was not reported after its begin; x was.
    expect(await nodeIds(c.uid)).toEqual(['a', 'x']);
    // The second, ended incomplete, prunes nothing further.
    peer.send('stream.end', { complete: false, count: 1 }, { reply_to: second });
    await peer.ackedThrough(8);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a', 'x']);
    peer.close();
  });

  it('a complete stream carrying a poison member prunes nothing (tainted)', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b']);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('a'), { reply_to: begin });
    peer.send('node.observed', { ...node('b'), node_id: '' }, { reply_to: begin });
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(6);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a', 'b']);
    peer.close();
  });

  it('a resync scoped to device does not prune nodes', async () => {
    const { c, peer } = await seeded('rv-rs', ['a', 'b']);
    const begin = peer.send('resync.begin', { scope: ['device'] });
    peer.send('stream.end', { complete: true, count: 0 }, { reply_to: begin });
    await peer.ackedThrough(4);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a', 'b']);
    peer.close();
  });

  it('a complete stream resumed across a reconnect (end replayed after resume) prunes correctly', async () => {
    const { c, peer, sessionId } = await seeded('rv-rs', ['a', 'b']);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('a'), { reply_to: begin });
    await peer.ackedThrough(4);
    peer.close();
    await peer.closedWith();
    const p = await h.connect(c.token, sessionId);
    const w = await p.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 2 });
    expect(w.payload).toMatchObject({ full_resync: false, ack_seq: 4 });
    p.nextSeq = 5;
    p.send('stream.end', { complete: true, count: 1 }, { reply_to: begin });
    await p.ackedThrough(5);
    await sleep(200);
    expect(await nodeIds(c.uid)).toEqual(['a']);
    p.close();
  });
});

function rawFrame(peer: Peer, seq: number, type: string, payload: unknown, id = newId()): string {
  peer.sendRaw(JSON.stringify({ v: 1, type, id, seq, ack: peer.hubCursor, reply_to: null, ts: new Date().toISOString(), payload }));
  return id;
}

describe('poison frames', () => {
  it('each poison frame is counted, acked, answered with a sequenced error (reply_to its id), recorded in /rejections; the session stays usable', async () => {
    const c = await h.newCluster('rv-poison');
    const { peer, sessionId } = await h.openFresh(c);
    const ids: string[] = [];
    ids.push(rawFrame(peer, 1, 'node.observed', { ...node('n1'), ready: 'yes' }));
    ids.push(rawFrame(peer, 2, 'node.observed', 'not an object'));
    ids.push(rawFrame(peer, 3, 'resync.begin', { scope: ['Nodes!'] }));
    ids.push(rawFrame(peer, 4, 'stream.end', { complete: 'yes', count: -1 }));
    ids.push(rawFrame(peer, 5, 'device.observed', { device_id: 'g1' }));
    // A begin naming no kind, or one kind twice, opens no stream: it is answered as any poison.
    ids.push(rawFrame(peer, 6, 'resync.begin', { scope: [] }));
    ids.push(rawFrame(peer, 7, 'resync.begin', { scope: ['node', 'node'] }));
    const unknown = rawFrame(peer, 8, 'future.thing', { x: 1 });
    peer.nextSeq = 9;
    peer.send('node.observed', node('ok'));
    await peer.ackedThrough(9);
    await sleep(300);
    const errors = peer.frames.filter((f) => f.type === 'error' && f.seq !== null);
    for (const id of [...ids, unknown]) expect(errors.some((e) => e.reply_to === id), `a sequenced error answers ${id}; got ${JSON.stringify(errors.map((e) => [e.reply_to, e.payload]))}`).toBe(true);
    expect(await nodeIds(c.uid)).toEqual(['ok']);
    const rej = await h.admin('GET', `/clusters/${c.name}/rejections`);
    expect(rej.status).toBe(200);
    const items = (rej.json.items ?? rej.json.data ?? rej.json) as { seq: number | string; session_id?: string }[];
    const seqs = items.map((i) => Number(i.seq)).sort((a, b) => a - b);
    for (const s of [1, 2, 3, 4, 5, 6, 7]) expect(seqs, JSON.stringify(rej.json)).toContain(s);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.rejections, JSON.stringify(view.json)).toBeGreaterThanOrEqual(7);
    // Still usable.
    peer.send('node.observed', node('ok2'));
    await peer.ackedThrough(10);
    expect(peer.isClosed).toBe(false);
    expect(sessionId).toBeTruthy();
    peer.close();
  });

  it('a poison frame replayed after a resume (it was acked) is a duplicate: not recorded twice', async () => {
    const c = await h.newCluster('rv-poison');
    const { peer, sessionId } = await h.openFresh(c);
    const id = rawFrame(peer, 1, 'node.observed', { ...node('n1'), ready: 'yes' });
    await peer.ackedThrough(1);
    peer.close();
    await peer.closedWith();
    const p = await h.connect(c.token, sessionId);
    await p.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 2 });
    rawFrame(p, 1, 'node.observed', { ...node('n1'), ready: 'yes' }, id);
    p.nextSeq = 2;
    p.send('node.observed', node('n2'));
    await p.ackedThrough(2);
    await sleep(300);
    const rows = await h.sql('select seq from rejections where cluster_uid = $1', [c.uid]);
    expect(rows).toEqual([{ seq: '1' }]);
    p.close();
  });
});
