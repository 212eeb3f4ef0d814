/**
 * "No silent wedge": a session kept connected by pings can stop making progress in a way no close
 * ends. Each such way must show, in the cluster view and (where a deadline exists) in a warn line
 * naming the cluster and the session.
 *
 * - An operator that begins a resync of its observed state and never ends it, while its other
 *   frames keep flowing: nothing ends the stream (only 16 more begins or a fresh session), and it
 *   is never pruned against, so rows gone from the cluster stay. The view showed nothing of it.
 * - An operator that withholds its ack of a desired frame for good (its handler fails every time):
 *   the hub sends it again every 2 × IDLE_TIMEOUT_MS (liveness.test.ts), which the spec's "a replay
 *   loop is at least visible" asks to be seen: a warn line each time, and the cursors in the view.
 *
 * Real workerd and Postgres, the fast timers (IDLE_TIMEOUT_MS 3 s).
 */
import { describe, expect, it } from 'vitest';
import { desired, FAST_TIMERS, node, sleep, useHub } from './support/hub';
import { captureHubLines } from './support/hub-lines';

const lines = captureHubLines();
const h = useHub({ ...FAST_TIMERS });
const IDLE = Number(FAST_TIMERS.IDLE_TIMEOUT_MS);

describe('a connected session that makes no progress is visible', () => {
  it("an operator resync stream begun and never ended while other frames flow shows in the cluster view, with since when, until it ends", async () => {
    const c = await h.newCluster('stall-rs');
    const { peer } = await h.openFresh(c);
    const live = async () => (await h.admin('GET', `/clusters/${c.name}`)).json.session.live as Record<string, unknown>;
    expect(await live()).toMatchObject({ operator_resyncs_open: 0, operator_resync_open_since: null });

    const before = Date.now();
    const begin = peer.send('resync.begin', { scope: ['node'] }); // seq 1
    peer.send('node.observed', node('a'), { reply_to: begin }); // seq 2
    // The operator goes on with ordinary traffic and never sends the stream.end.
    for (let i = 0; i < 3; i++) peer.send('node.observed', node(`n${i}`)); // seq 3..5
    await peer.ackedThrough(5);
    const view = await live();
    expect(view).toMatchObject({ hub_cursor: 5, operator_resyncs_open: 1, operator_resync_open_since: expect.any(String) });
    const since = Date.parse(view.operator_resync_open_since as string);
    expect(since).toBeGreaterThanOrEqual(before - 1_000);
    expect(since).toBeLessThanOrEqual(Date.now());

    // Ended: nothing open any more.
    peer.send('stream.end', { complete: true, count: 1 }, { reply_to: begin }); // seq 6
    await peer.ackedThrough(6);
    expect(await live()).toMatchObject({ operator_resyncs_open: 0, operator_resync_open_since: null });
    expect(peer.isClosed).toBe(false);
    peer.close();
  });

  it('a desired frame the operator never acknowledges while it keeps pinging: a warn line naming the cluster and session at its resend (every 2 × IDLE_TIMEOUT_MS), and the cursors in the view', async () => {
    const c = await h.newCluster('stall-ack');
    const { peer, sessionId } = await h.openFresh(c);
    const acked = peer.hubCursor;
    await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired());
    const first = await peer.next((f) => f.type === 'deployment.desired');
    const resent = () => lines.filter((l) => l.cluster === c.uid && l.msg.startsWith('operator has not acknowledged frames'));
    const start = Date.now();
    // Its handler fails every time: alive (pings), the ack never moves past what it had.
    while (resent().length < 1 && Date.now() - start < 4 * IDLE) {
      peer.send('ping', {}, { ack: acked });
      await sleep(250);
    }
    expect(resent()).toHaveLength(1);
    expect(resent()[0]).toMatchObject({ level: 'warn', session: sessionId, first_seq: first.seq, operator_cursor: acked });
    const view = (await h.admin('GET', `/clusters/${c.name}`)).json.session.live as Record<string, number>;
    expect(view.operator_cursor).toBe(acked);
    expect(view.last_sent_seq).toBeGreaterThanOrEqual(first.seq as number);
    expect(view.replay_buffer_frames).toBeGreaterThanOrEqual(1);
    expect(peer.isClosed).toBe(false);
    peer.close();
  });
});
