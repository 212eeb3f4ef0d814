import { describe, expect, it } from 'vitest';
import { useHub, type Frame, type Peer, type TestCluster } from './support/hub';

/**
 * Human-readable operator text that Postgres cannot hold as is (a NUL, a lone UTF-16 surrogate)
 * is mended to U+FFFD, not refused: before, the frame was refused by the database, recorded as a
 * rejection and acknowledged, so an operation's conclusion was lost (the operation stayed running
 * until it showed deadline_exceeded, and the operator, its conclusion acknowledged, never sends it
 * again), and a deployment's observed state or an event was dropped over its message.
 * MESSAGES.md: an operation is "run to a conclusion and reported"; `message` is "human readable,
 * never parsed". The SDK produced such text itself until it cut a long handler error between
 * code points (test/unit/operator/operations.test.ts); other operators still may.
 */

const h = useHub();

async function startOp(c: TestCluster): Promise<string> {
  const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 300 });
  expect(r.status, JSON.stringify(r.json)).toBe(202);
  return r.json.operation_id as string;
}

function startFrame(peer: Peer, id: string): Promise<Frame> {
  return peer.next((f) => f.type === 'operation.start' && f.payload.operation_id === id);
}

async function getOp(id: string): Promise<any> {
  const r = await h.admin('GET', `/operations/${id}`);
  expect(r.status, JSON.stringify(r.json)).toBe(200);
  return r.json;
}

describe('an operation conclusion carrying text Postgres cannot store as is', () => {
  it('a result whose message ends in half an emoji (an SDK that cut by UTF-16 units) still concludes the operation, the text mended', async () => {
    const c = await h.newCluster('optxt');
    const { peer } = await h.openFresh(c);
    const id = await startOp(c);
    const sf = await startFrame(peer, id);
    // 2,046 characters and the high half of an emoji, then the SDK's ellipsis: what the SDK's
    // cut by UTF-16 units sent for a long handler error (a string the protocol's schema accepts).
    const message = 'operation handler threw: ' + 'x'.repeat(2021) + '\uD83D' + '…';
    peer.send('operation.accepted', { operation_id: id }, { reply_to: sf.id });
    peer.send('operation.result', { operation_id: id, outcome: 'failed', message }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1, 10_000);

    const op = await getOp(id);
    // Concluded as the operator reported, the text mended (as refusals and rejections are), not lost.
    expect(op.state).toBe('failed');
    expect(op.concluded_at).not.toBeNull();
    expect(op.outcome_message).toBe(message.replace('\uD83D', '\uFFFD'));
    const rejections = (await h.admin('GET', `/clusters/${c.name}/rejections`)).json.items;
    expect(rejections).toEqual([]);
    peer.close();
  });

  it('a result whose message carries a NUL still concludes the operation', async () => {
    const c = await h.newCluster('opnul');
    const { peer } = await h.openFresh(c);
    const id = await startOp(c);
    const sf = await startFrame(peer, id);
    peer.send('operation.accepted', { operation_id: id }, { reply_to: sf.id });
    peer.send('operation.result', { operation_id: id, outcome: 'succeeded', message: 'drained\u0000 n-1' }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1, 10_000);
    const op = await getOp(id);
    expect(op.state).toBe('succeeded');
    expect(op.concluded_at).not.toBeNull();
    peer.close();
  });

  it('an error replying to the operation.start whose message carries a NUL still concludes the operation as failed', async () => {
    const c = await h.newCluster('operrnul');
    const { peer } = await h.openFresh(c);
    const id = await startOp(c);
    const sf = await startFrame(peer, id);
    peer.send('error', { code: 'invalid', message: 'no such node\u0000', retryable: false }, { reply_to: sf.id });
    await peer.ackedThrough(peer.nextSeq - 1, 10_000);
    const op = await getOp(id);
    expect(op.state).toBe('failed');
    expect(op.concluded_at).not.toBeNull();
    peer.close();
  });
});

describe('observed state and events whose human-readable text Postgres cannot store as is', () => {
  it('a deployment.observed and an event with a NUL and a lone surrogate in their text are applied, the text mended, nothing rejected', async () => {
    const c = await h.newCluster('obstxt');
    const { peer } = await h.openFresh(c);
    peer.send('deployment.observed', {
      deployment_id: 'd-1',
      observed_revision: null,
      phase: 'degraded',
      ready_replicas: 0,
      replica_ids: [],
      message: 'pull failed\u0000: \uD83D',
    });
    peer.send('node.event', { subject: 'n-1', reason: 'Bad\u0000Reason', message: 'half \uDE00 an emoji', severity: 'warning', occurred_at: new Date().toISOString() });
    await peer.ackedThrough(peer.nextSeq - 1, 10_000);
    const deployments = (await h.admin('GET', `/clusters/${c.name}/deployments`)).json.items;
    expect(deployments.map((d: any) => [d.deployment_id, d.observed?.phase, d.observed?.message])).toEqual([['d-1', 'degraded', 'pull failed\uFFFD: \uFFFD']]);
    const events = (await h.admin('GET', `/clusters/${c.name}/events`)).json.items;
    expect(events.map((e: any) => [e.reason, e.message])).toEqual([['Bad\uFFFDReason', 'half \uFFFD an emoji']]);
    expect((await h.admin('GET', `/clusters/${c.name}/rejections`)).json.items).toEqual([]);
    peer.close();
  });
});
