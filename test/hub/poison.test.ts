import { describe, expect, it } from 'vitest';
import { newId } from '../../src/protocol';
import { node, useHub } from './support/hub';

const h = useHub();

describe('poison frames (spec: Poison frames)', () => {
  it('a payload that violates its schema is accepted, acknowledged, dropped and recorded; the stream behind it advances', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('node.observed', node('n1'));
    const badId = peer.send('node.observed', { ...node(''), node_id: '' });
    peer.send('deployment.observed', {
      deployment_id: 'd1',
      observed_revision: 1,
      phase: 'ready',
      ready_replicas: 5,
      replica_ids: ['a'],
      message: 'more ready than named: a stated invariant broken',
    });
    peer.send('node.observed', node('n3'));
    await peer.ackedThrough(4);
    expect((await h.sql('select node_id from nodes where cluster_uid = $1 order by 1', [c.uid])).map((r) => r.node_id)).toEqual(['n1', 'n3']);
    const rej = await h.sql('select session_id, seq, frame_id, type, reason from rejections where cluster_uid = $1 order by seq', [c.uid]);
    expect(rej).toMatchObject([
      { session_id: sessionId, seq: '2', frame_id: badId, type: 'node.observed', reason: expect.stringMatching(/node_id/) },
      { session_id: sessionId, seq: '3', type: 'deployment.observed', reason: expect.stringMatching(/ready_replicas/) },
    ]);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.rejections).toBe(2);
    peer.close();
  });

  it('a frame the database itself refuses is found by splitting the batch and rejected alone; its neighbours apply', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    for (let i = 1; i <= 9; i++) peer.send('node.observed', node(`n${i}`));
    // Postgres text cannot hold NUL: zod accepts the string, the database refuses it.
    peer.send('node.observed', { ...node('n10'), name: 'bad\u0000name' });
    for (let i = 11; i <= 20; i++) peer.send('node.observed', node(`n${i}`));
    await peer.ackedThrough(20, 10_000);
    const rows = await h.sql<{ n: string }>('select count(*) as n from nodes where cluster_uid = $1', [c.uid]);
    expect(Number(rows[0]?.n)).toBe(19);
    const rej = await h.sql('select seq, reason from rejections where cluster_uid = $1', [c.uid]);
    expect(rej).toMatchObject([{ seq: '10', reason: expect.stringMatching(/database refused/) }]);
    peer.close();
  });

  it('a frame with a malformed envelope id is poison, not fatal', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.sendRaw(JSON.stringify({ v: 1, type: 'node.observed', id: 'not-a-ulid', seq: 1, ack: null, reply_to: null, ts: new Date().toISOString(), payload: node('n1') }));
    peer.send('node.observed', node('n2'), { seq: 2, id: newId() });
    await peer.ackedThrough(2);
    expect(peer.isClosed).toBe(false);
    expect(await h.sql('select seq, frame_id from rejections where cluster_uid = $1', [c.uid])).toEqual([{ seq: '1', frame_id: 'not-a-ulid' }]);
    peer.close();
  });

  it('a poison frame is answered with a sequenced error naming the reason, exactly as an unknown type is', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const badId = peer.send('node.observed', { ...node(''), node_id: '' });
    const refusedId = peer.send('node.observed', { ...node('n-nul'), name: 'bad\u0000name' });
    await peer.ackedThrough(2);
    const schemaAnswer = await peer.next((f) => f.type === 'error' && f.reply_to === badId);
    expect(schemaAnswer.seq).not.toBeNull();
    expect(schemaAnswer.payload).toMatchObject({ code: 'invalid', retryable: false, message: expect.stringMatching(/node_id/) });
    const dbAnswer = await peer.next((f) => f.type === 'error' && f.reply_to === refusedId, 10_000);
    expect(dbAnswer.payload).toMatchObject({ code: 'invalid', retryable: false, message: expect.stringMatching(/database refused/) });
    expect(peer.isClosed).toBe(false);
    const view = await h.admin('GET', `/clusters/${c.name}`);
    expect(view.json.session.live.counters).toMatchObject({ answeredRejections: 2 });
    peer.close();
  });

  it('an operation frame naming an operation this cluster does not have is recorded as a rejection and answered', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const stray = newId();
    const id = peer.send('operation.progress', { operation_id: stray, phase: 'draining', message: 'half way' });
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(2);
    const answer = await peer.next((f) => f.type === 'error' && f.reply_to === id);
    expect(answer.payload).toMatchObject({ code: 'invalid', retryable: false, message: expect.stringContaining(stray) });
    expect(await h.sql('select session_id, seq, frame_id, type from rejections where cluster_uid = $1', [c.uid])).toEqual([
      { session_id: sessionId, seq: '1', frame_id: id, type: 'operation.progress' },
    ]);
    peer.close();
  });
});
