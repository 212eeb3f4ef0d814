/**
 * The hub's resync of a fresh session on a cluster that never had desired state (revision 0),
 * its stream.end held back by a full replay window, and the session object evicted before the
 * operator acknowledges: the queue that held the stream.end lived in memory. Found by a review
 * (and in the notes since as "the REPLAY_BUFFER_FRAMES=1 edge"): the ack that released the window
 * found nothing queued to drain, the fleet poll pokes a session only while the cluster's revision
 * is above what it has seen (0 is not above 0), so nothing fetched the rest again and the stream
 * never ended; the operator, which prunes its desired state only at that end, waited for good.
 * Now an ack that frees room while the pump still owes something runs it.
 *
 * Real workerd, real Postgres, the spec's silence limit (30 s), so the object is evicted (about
 * 10 s after its last event) while the operator stays quietly within it.
 */
import { describe, expect, it } from 'vitest';
import { useHub } from './support/hub';

const h = useHub({ REPLAY_BUFFER_FRAMES: '1', PING_INTERVAL_MS: '10000', IDLE_TIMEOUT_MS: '30000' });

describe('a hub resync whose stream.end waits behind a full window when the session object is evicted', () => {
  it('is ended once the operator acknowledges, on a cluster at desired revision 0', async () => {
    const c = await h.newCluster();
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    const begin = await peer.next((f) => f.type === 'resync.begin');
    const before = await h.admin('GET', `/clusters/${c.name}`);
    expect(before.json.desired_revision).toBe(0);
    const instance = before.json.session.live.instance as string;

    // Quiet (within the 30 s limit) until workerd has evicted the object.
    await new Promise((r) => setTimeout(r, 14_000));
    peer.send('ack', {}, { ack: begin.seq });
    const end = await peer.next((f) => f.type === 'stream.end' && f.reply_to === begin.id, 8_000);
    expect(end.payload).toMatchObject({ complete: true, count: 0 });
    const after = await h.admin('GET', `/clusters/${c.name}`);
    // The point of the test: the object that ended the stream is not the one that began it.
    expect(after.json.session.live.instance).not.toBe(instance);
    peer.close();
  }, 40_000);
});
