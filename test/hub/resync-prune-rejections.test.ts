/**
 * MESSAGES.md: a snapshot with a rejected frame inside it prunes nothing. An operation frame in
 * the operator's resync stream (reply_to = the begin's id) naming an operation this cluster does
 * not have is found to be a rejection only by the ingest statement, and the stream was never told:
 * a stream.end {complete: true} with a matching count pruned (in the same batch, and when the
 * rejected frame had committed in an earlier one). Both cases failed before; the other four tests
 * guard what a review of the hub's snapshot ingest (2026-12-04) found sound.
 */
import { describe, expect, it } from 'vitest';
import { newId } from '../../src/protocol';
import { node, useHub, type Peer } from './support/hub';

const h = useHub();

async function nodesOf(uid: string): Promise<string[]> {
  return (await h.sql<{ node_id: string }>('select node_id from nodes where cluster_uid = $1 order by 1', [uid])).map((r) => r.node_id);
}

async function seed(peer: Peer): Promise<void> {
  for (const n of ['n1', 'n2', 'n3']) peer.send('node.observed', node(n));
  await peer.ackedThrough(peer.nextSeq - 1);
}

describe('review: what a prune may remove', () => {
  // Before: the statement recorded the operation frame as a rejection (op_unknown) but pruned in the
  // same statement, and a stream whose rejected operation frame committed in an earlier batch was
  // never marked: n2 and n3 were deleted against a snapshot with a rejected frame inside it.
  it('an operation frame inside the snapshot naming an operation the cluster does not have is a rejection: nothing is pruned', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('n1'), { reply_to: begin });
    peer.send('operation.progress', { operation_id: newId(), phase: 'x', message: 'y' }, { reply_to: begin });
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await h.sql('select type from rejections where cluster_uid = $1', [c.uid])).toEqual([{ type: 'operation.progress' }]);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2', 'n3']);
    peer.close();
  });

  it('the same, when the rejected operation frame commits in an earlier batch than the stream.end', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('n1'), { reply_to: begin });
    peer.send('operation.result', { operation_id: newId(), outcome: 'succeeded', message: 'y' }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2', 'n3']);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.session.live.counters).toMatchObject({ resyncsCompleted: 0, resyncsIncomplete: 1, pruned: 0 });
    peer.close();
  });

  it('a stream.end naming a begin of an earlier (fresh-replaced) session prunes nothing', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('n1'), { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    peer.close();
    await peer.closed;
    const again = await h.connect(c.token, sessionId);
    const w = await again.hello({ cluster_id: c.name, session_id: null, resume_from: null });
    expect(w.payload.full_resync).toBe(true);
    again.send('node.observed', node('n7'));
    again.send('stream.end', { complete: true, count: 1 }, { reply_to: begin });
    await again.ackedThrough(again.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2', 'n3', 'n7']);
    again.close();
  });

  it('a poison member in an earlier batch than stream.end still makes the snapshot incomplete', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', { ...node('x'), node_id: '' }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    peer.send('node.observed', node('n1'), { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2', 'n3']);
    peer.close();
  });

  it('a member the database refuses (NUL in a name) makes the snapshot incomplete', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('n1'), { reply_to: begin });
    peer.send('node.observed', { ...node('n2'), name: 'bad\u0000' }, { reply_to: begin });
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1, 10_000);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2', 'n3']);
    peer.close();
  });

  it('a frame with seq but of an unsequenced type inside the stream taints it', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('n1'), { reply_to: begin });
    peer.send('deployment.desired' as any, {} as any, { reply_to: begin });
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2', 'n3']);
    peer.close();
  });
});
