import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { eventually, node, useHub } from './support/hub';

const h = useHub();

describe('inbound order and acknowledgement (spec: Sequence numbers, Acknowledgement is continuous)', () => {
  it('a duplicate (seq below the expected) is dropped and the session continues', async () => {
    const c = await h.newCluster();
    const peer = (await h.openFresh(c)).peer;
    peer.send('node.observed', node('n1', true), { seq: 1 });
    peer.send('node.observed', node('n1', false), { seq: 1 });
    peer.send('node.observed', node('n2'), { seq: 2 });
    await peer.ackedThrough(2);
    const rows = await h.sql<{ node_id: string; ready: boolean }>('select node_id, ready from nodes where cluster_uid = $1 order by node_id', [c.uid]);
    expect(rows).toEqual([
      { node_id: 'n1', ready: true },
      { node_id: 'n2', ready: true },
    ]);
    expect(peer.isClosed).toBe(false);
    peer.close();
  });

  it('a gap (seq above the expected) closes the connection with an error and 4400 instead of being accepted as a hole', async () => {
    const c = await h.newCluster();
    const peer = (await h.openFresh(c)).peer;
    peer.send('node.observed', node('n1'), { seq: 1 });
    const gapId = peer.send('node.observed', node('n3'), { seq: 3 });
    const err = await peer.next((f) => f.type === 'error');
    expect(err).toMatchObject({ reply_to: gapId, payload: { code: 'invalid' } });
    expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
    // Frames before the gap were accepted and are applied; the one past it was not.
    await eventually(async () => (await h.sql('select 1 from nodes where cluster_uid = $1', [c.uid])).length === 1);
    const rows = await h.sql('select node_id from nodes where cluster_uid = $1', [c.uid]);
    expect(rows.map((r) => r.node_id)).toEqual(['n1']);
  });

  it('an unknown type is never fatal: it is dropped, acknowledged, and answered with a sequenced error naming the type (retryable false)', async () => {
    const c = await h.newCluster();
    const peer = (await h.openFresh(c)).peer;
    const hubSeqBefore = peer.hubCursor;
    const id = crypto.randomUUID();
    peer.sendRaw(JSON.stringify({ v: 1, type: 'recipe.desired', id: '01J9X2E5G7QK8V3B0YHN4TZC6M', seq: 1, ack: null, reply_to: null, ts: new Date().toISOString(), payload: { id } }));
    const err = await peer.next((f) => f.type === 'error');
    expect(err).toMatchObject({
      seq: hubSeqBefore + 1,
      reply_to: '01J9X2E5G7QK8V3B0YHN4TZC6M',
      payload: { code: 'invalid', retryable: false, unknown_type: 'recipe.desired' },
    });
    peer.nextSeq = 2;
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(2);
    expect(peer.isClosed).toBe(false);
    const rej = await h.sql('select seq, type from rejections where cluster_uid = $1', [c.uid]);
    expect(rej).toEqual([{ seq: '1', type: 'recipe.desired' }]);
    peer.close();
  });

  it('an error frame is never fatal to an established session, whatever its retryable value', async () => {
    const c = await h.newCluster();
    const peer = (await h.openFresh(c)).peer;
    peer.send('error', { code: 'internal', message: 'operator hiccup', retryable: false });
    peer.send('error', { code: 'unavailable', message: 'try later', retryable: true });
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(3);
    expect(peer.isClosed).toBe(false);
    peer.close();
  });

  it('only the envelope is fatal: a frame that is not JSON closes with 4400 after an error with reply_to null', async () => {
    const c = await h.newCluster();
    const peer = (await h.openFresh(c)).peer;
    peer.sendRaw('not json at all');
    expect(await peer.next((f) => f.type === 'error')).toMatchObject({ reply_to: null, payload: { code: 'invalid' } });
    expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
  });

  it('a frame whose v is outside the range closes the connection (4400)', async () => {
    const c = await h.newCluster();
    const peer = (await h.openFresh(c)).peer;
    peer.sendRaw(JSON.stringify({ v: 2, type: 'ping', id: '01J9X2E5G7QK8V3B0YHN4TZC6M', seq: null, ack: null, reply_to: null, ts: new Date().toISOString(), payload: {} }));
    expect(await peer.next((f) => f.type === 'error')).toMatchObject({ reply_to: '01J9X2E5G7QK8V3B0YHN4TZC6M' });
    expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
  });

  it('an ack beyond anything the hub sent is a protocol error', async () => {
    const c = await h.newCluster();
    const peer = (await h.openFresh(c)).peer;
    peer.send('ping', {}, { ack: peer.hubCursor + 50 });
    expect(await peer.next((f) => f.type === 'error')).toMatchObject({ payload: { code: 'invalid' } });
    expect((await peer.closedWith()).code).toBe(CloseCode.PROTOCOL_ERROR);
  });

  it('under one-way load the hub releases the operator promptly with ack frames, acknowledging only what is applied', async () => {
    const c = await h.newCluster();
    const peer = (await h.openFresh(c)).peer;
    for (let i = 0; i < 200; i++) peer.send('node.observed', node(`n${i}`));
    await peer.ackedThrough(200);
    const acks = peer.frames.filter((f) => f.type === 'ack');
    expect(acks.length).toBeGreaterThan(0);
    expect(acks.length).toBeLessThan(200);
    const [{ n }] = await h.sql<{ n: string }>('select count(*) as n from nodes where cluster_uid = $1', [c.uid]) as [{ n: string }];
    expect(Number(n)).toBe(200);
    peer.close();
  });

  it('every hub frame carries the hub cursor in ack', async () => {
    const c = await h.newCluster();
    const peer = (await h.openFresh(c)).peer;
    peer.send('node.observed', node('n1'));
    await peer.ackedThrough(1);
    peer.send('ping', {});
    const pong = await peer.next((f) => f.type === 'pong');
    expect(pong.ack).toBe(1);
    peer.close();
  });
});
