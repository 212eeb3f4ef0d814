import { describe, expect, inject, it } from 'vitest';
import { desired, node, sleep, useHub, type Peer, holdLock } from './support/hub';

const h = useHub();
const EMBEDDED = inject('embeddedPostgres');

const device = (id: string) => ({
  device_id: id,
  node_id: 'n1',
  vendor: 'nvidia',
  model: 'A100',
  memory_total_mb: 81920,
  health: 'healthy' as const,
  driver_version: '550',
});

async function nodesOf(uid: string): Promise<string[]> {
  return (await h.sql<{ node_id: string }>('select node_id from nodes where cluster_uid = $1 order by 1', [uid])).map((r) => r.node_id);
}
async function devicesOf(uid: string): Promise<string[]> {
  return (await h.sql<{ device_id: string }>('select device_id from devices where cluster_uid = $1 order by 1', [uid])).map((r) => r.device_id);
}

/** Seed nodes n1..n3 and GPU-1..GPU-2 with ordinary frames. */
async function seed(peer: Peer): Promise<void> {
  for (const n of ['n1', 'n2', 'n3']) peer.send('node.observed', node(n));
  for (const d of ['GPU-1', 'GPU-2']) peer.send('device.observed', device(d));
  await peer.ackedThrough(peer.nextSeq - 1);
}

describe('operator resync and prune (spec: Full resync, Resync)', () => {
  it('after stream.end {complete: true} the hub deletes rows absent from the snapshot, for the scopes the begin named only', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('n1'), { reply_to: begin });
    peer.send('node.observed', node('n4'), { reply_to: begin });
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n4']);
    // Devices were not in scope: untouched.
    expect(await devicesOf(c.uid)).toEqual(['GPU-1', 'GPU-2']);
    peer.close();
  });

  it('a snapshot that does not end with complete: true is never pruned against', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('n1'), { reply_to: begin });
    peer.send('stream.end', { complete: false, count: 1 }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2', 'n3']);
    peer.close();
  });

  it('a stream whose count differs from the frames carried is treated as incomplete', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('n1'), { reply_to: begin });
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2', 'n3']);
    peer.close();
  });

  it('concurrent resyncs of different scopes are matched on reply_to alone', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    const a = peer.send('resync.begin', { scope: ['node'] });
    const b = peer.send('resync.begin', { scope: ['device'] });
    peer.send('device.observed', device('GPU-2'), { reply_to: b });
    peer.send('node.observed', node('n2'), { reply_to: a });
    peer.send('device.observed', device('GPU-3'), { reply_to: b });
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: b });
    peer.send('node.observed', node('n3'), { reply_to: a });
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: a });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n2', 'n3']);
    expect(await devicesOf(c.uid)).toEqual(['GPU-2', 'GPU-3']);
    peer.close();
  });

  it('a row reported after the begin outside the stream is not pruned (the snapshot was taken before it)', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('n1'), { reply_to: begin });
    peer.send('node.observed', node('n9'));
    peer.send('stream.end', { complete: true, count: 1 }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n9']);
    peer.close();
  });

  it('a poison frame inside the snapshot makes it incomplete: nothing is pruned, the rejection is recorded', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('n1'), { reply_to: begin });
    peer.send('node.observed', { ...node('x'), node_id: '' }, { reply_to: begin });
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2', 'n3']);
    expect(await h.sql('select type from rejections where cluster_uid = $1', [c.uid])).toEqual([{ type: 'node.observed' }]);
    peer.close();
  });

  it('a resync split across batches and a reconnect still prunes exactly once, correctly', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    await seed(peer);
    const begin = peer.send('resync.begin', { scope: ['node'] });
    peer.send('node.observed', node('n2'), { reply_to: begin });
    await peer.ackedThrough(peer.nextSeq - 1);
    peer.close();
    await peer.closed;
    const again = await h.connect(c.token, sessionId);
    await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    again.nextSeq = peer.nextSeq;
    again.send('node.observed', node('n5'), { reply_to: begin });
    again.send('stream.end', { complete: true, count: 2 }, { reply_to: begin });
    await again.ackedThrough(again.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n2', 'n5']);
    again.close();
  });

  it('an operator may open a resync at any time, not only after a full_resync welcome', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    for (const round of [['n1'], ['n2', 'n3']]) {
      const begin = peer.send('resync.begin', { scope: ['node'] });
      for (const n of round) peer.send('node.observed', node(n), { reply_to: begin });
      peer.send('stream.end', { complete: true, count: round.length }, { reply_to: begin });
      await peer.ackedThrough(peer.nextSeq - 1);
      expect(await nodesOf(c.uid)).toEqual(round);
    }
    peer.close();
  });

  it('a stream.end for a stream that is not open is rejected and prunes nothing', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    await seed(peer);
    peer.send('stream.end', { complete: true, count: 0 }, { reply_to: '01J9X2E5G7QK8V3B0YHN4TZC6M' });
    await peer.ackedThrough(peer.nextSeq - 1);
    expect(await nodesOf(c.uid)).toEqual(['n1', 'n2', 'n3']);
    expect(await h.sql('select type, reason from rejections where cluster_uid = $1', [c.uid])).toEqual([
      { type: 'stream.end', reason: 'stream.end for a stream that is not open' },
    ]);
    peer.close();
  });
});

describe('hub full resync (spec: Full resync; DESIGN decision 6)', () => {
  it('every fresh session gets resync.begin → every desired deployment with reply_to = the begin id → stream.end {complete: true}', async () => {
    const c = await h.newCluster();
    for (const d of ['a', 'b', 'c']) expect((await h.admin('PUT', `/clusters/${c.name}/deployments/${d}`, desired())).status).toBe(200);
    await h.admin('DELETE', `/clusters/${c.name}/deployments/b`);
    for (let round = 0; round < 2; round++) {
      const peer = await h.connect(c.token);
      const w = await peer.hello({ cluster_id: c.name, lossy: round > 0 });
      expect(w.payload.full_resync).toBe(true);
      const begin = await peer.next();
      expect(begin).toMatchObject({ type: 'resync.begin', seq: 1, payload: { scope: ['deployment'] } });
      const items = [await peer.next(), await peer.next()];
      for (const f of items) expect(f).toMatchObject({ type: 'deployment.desired', reply_to: begin.id, payload: { deleted: false } });
      expect(items.map((f) => f.payload.deployment_id)).toEqual(['a', 'c']);
      expect(await peer.next()).toMatchObject({ type: 'stream.end', reply_to: begin.id, payload: { complete: true, count: 2 } });
      peer.close();
      await peer.closed;
    }
  });

  // PGlite has one backend: a held lock or transaction blocks everything, so these need a real server.
  it.skipIf(EMBEDDED)('a row written in the same ingest batch as, but before, the resync.begin is pruned when the snapshot does not carry it', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('blocker'));
    await peer.ackedThrough(1);
    // Stall the next statement on a row lock so the frames behind it gather into one batch.
    const release = await holdLock("select 1 from nodes where cluster_uid = $1 and node_id = 'blocker' for update", [c.uid]);
    try {
      peer.send('node.observed', node('blocker'));
      await sleep(300);
      peer.send('node.observed', node('stale'));
      const begin = peer.send('resync.begin', { scope: ['node'] });
      peer.send('node.observed', node('n1'), { reply_to: begin });
      peer.send('stream.end', { complete: true, count: 1 }, { reply_to: begin });
      await sleep(300);
    } finally {
      await release();
    }
    await peer.ackedThrough(peer.nextSeq - 1, 10_000);
    expect(await nodesOf(c.uid)).toEqual(['n1']);
    peer.close();
  });
});
