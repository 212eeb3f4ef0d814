/**
 * MESSAGES.md (operation.result): "The first result concludes the operation; later ones
 * (redeliveries) change nothing about its state, outcome or timestamps". An operation the
 * operator refused (an `error` replying to its operation.start) concludes as failed with no
 * accepted_at (test/hub/operation-refusal.test.ts). Before the fix, a frame arriving after that
 * conclusion (a late operation.result, accepted or progress) still stamped accepted_at, in a later
 * batch as in the same one: the concluded operation's timestamps moved, and a refused operation
 * was shown accepted.
 */
import { describe, expect, inject, it } from 'vitest';
import { holdLock, node, sleep, useHub, type TestCluster } from './support/hub';

const h = useHub();
const EMBEDDED = inject('embeddedPostgres');

async function startOp(c: TestCluster): Promise<string> {
  const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 300 });
  expect(r.status, JSON.stringify(r.json)).toBe(202);
  return r.json.operation_id as string;
}

describe('an operation concluded by an error reply', () => {
  it('keeps accepted_at null when a result, an accepted or a progress frame follows in a later batch', async () => {
    const c = await h.newCluster('rvts');
    const { peer } = await h.openFresh(c);
    const id = await startOp(c);
    const sf = await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === id);
    peer.send('error', { code: 'invalid', message: 'no node n-1 here', retryable: false }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1);
    const refused = (await h.admin('GET', `/operations/${id}`)).json;
    expect(refused).toMatchObject({ state: 'failed', accepted_at: null });

    peer.send('operation.result', { operation_id: id, outcome: 'succeeded', message: 'done after all' }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1);
    peer.send('operation.accepted', { operation_id: id }, { reply_to: sf.id });
    peer.send('operation.progress', { operation_id: id, phase: 'evicting', message: 'late' }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1);
    const after = (await h.admin('GET', `/operations/${id}`)).json;
    expect(after).toMatchObject({
      state: 'failed',
      outcome_message: refused.outcome_message,
      concluded_at: refused.concluded_at,
      sent_at: refused.sent_at,
      accepted_at: null,
    });
    peer.close();
  });

  it.skipIf(EMBEDDED)('keeps accepted_at null when the result follows the error in the same ingest batch', async () => {
    const c = await h.newCluster('rvtsb');
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('blocker'));
    await peer.ackedThrough(1);
    const id = await startOp(c);
    const sf = await peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === id);
    const release = await holdLock("select 1 from nodes where cluster_uid = $1 and node_id = 'blocker' for update", [c.uid]);
    try {
      peer.send('node.observed', node('blocker'));
      await sleep(200);
      peer.send('error', { code: 'deadline', message: 'cannot drain before the deadline', retryable: false }, { reply_to: sf.id });
      peer.send('operation.result', { operation_id: id, outcome: 'succeeded', message: 'done after all' }, { reply_to: sf.id });
      await sleep(200);
    } finally {
      await release();
    }
    await peer.ackedThrough(peer.nextSeq - 1, 10_000);
    const op = (await h.admin('GET', `/operations/${id}`)).json;
    expect(op).toMatchObject({ state: 'failed', accepted_at: null });
    peer.close();
  });
});
