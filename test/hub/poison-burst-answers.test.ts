/**
 * Every poison frame is answered with a sequenced error (PROTOCOL.md "Frames": accepted,
 * acknowledged, dropped, logged, recorded "and answered with a sequenced error {invalid,
 * retryable: false, reply_to: its id}"; spec "Poison frames": "exactly as an unknown type is").
 * A burst of poison frames (an operator a version ahead whose every device fails the hub's
 * schema, say) settles in one ingest statement, and its answers are owed in one go: all of them,
 * past the owed answers' cap too, since the cursor has passed their frames and the operator will
 * never send them again. Before, answers past the cap were dropped and the link closed 4429.
 */
import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, holdLock, node, sleep, useHub, type Peer } from './support/hub';

// Lock waits up to 2 s (the default), so the statement ahead can be held while the burst arrives.
const h = useHub({ ...FAST_TIMERS, PG_QUERY_TIMEOUT_MS: '10000' });

describe('answers to a burst of poison frames', () => {
  it('every poison frame of a burst is acknowledged and answered with a sequenced error naming it, and the link stays up', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    const N = 1_900;
    const ids = new Set<string>();
    // The statement ahead waits on the claim row for a moment, so the burst is applied together,
    // as it is whenever it arrives faster than one statement's round trip.
    const release = await holdLock('select 1 from cluster_owners where cluster_uid = $1 for update', [c.uid]);
    for (let i = 0; i < N; i++) ids.add(peer.send('node.observed', { ...node(''), node_id: '' }));
    await sleep(1_000);
    await release();
    const answeredOn = (p: Peer) => p.frames.filter((f) => f.type === 'error' && f.seq !== null && typeof f.reply_to === 'string' && ids.has(f.reply_to)).map((f) => f.reply_to as string);
    const deadline = Date.now() + 15_000;
    while (answeredOn(peer).length < N && Date.now() < deadline && !peer.isClosed) await sleep(100);
    await sleep(300);
    const closed = peer.isClosed ? await peer.closedWith() : null;
    let resumedAck: unknown = null;
    const answered = new Set(answeredOn(peer));
    if (peer.isClosed) {
      // Whatever the hub still owes must come with the resume.
      const again = await h.connect(c.token, sessionId);
      const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
      resumedAck = w.payload.ack_seq;
      await sleep(2_000);
      for (const id of answeredOn(again)) answered.add(id);
      again.close();
    }
    const rejections = await h.sql<{ n: string }>('select count(*) as n from rejections where cluster_uid = $1', [c.uid]);
    expect({ closed, resumedAck, recorded: Number(rejections[0]?.n), answered: answered.size }).toEqual({
      closed: null,
      resumedAck: null,
      recorded: N,
      answered: N,
    });
    peer.close();
  }, 60_000);
});
