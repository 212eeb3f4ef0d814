/**
 * A replay buffer bounded in bytes below the largest frame the hub may send (a configuration the
 * hub accepts): the send path lets such a frame go out alone, into an empty window ("an empty
 * window takes any frame"), and the buffer must keep it, or a resume from just before it has to
 * be a full resync although nothing but this one frame is outstanding.
 *
 * Before the fix the sequencer pushed the frame it had just numbered straight out of its buffer
 * (it alone was over the byte bound): the resume below got full_resync: true.
 */
import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, useHub } from './support/hub';

const h = useHub({ ...FAST_TIMERS, REPLAY_BUFFER_FRAMES: '4', REPLAY_BUFFER_BYTES: '6000', MAX_FRAME_BYTES: '8192', RETENTION_MS: '60000' });

function big() {
  return {
    workload_id: 'w',
    min_replicas: 1,
    max_replicas: 1,
    serving: { engine: 'vllm', model: 'm', image: 'img', args: Array.from({ length: 7 }, () => 'x'.repeat(1000)), env: {}, gpus_per_replica: 1, gpu_model: null, port: 8000 },
  };
}

describe('a frame larger than the replay buffer\'s byte bound, sent alone', () => {
  it('stays in the replay buffer until acknowledged: a resume from just before it replays it instead of a full resync', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    peer.send('ack', {}, { ack: peer.hubCursor });
    const before = peer.hubCursor;
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/big`, big())).status).toBe(200);
    const sent = await peer.next((f) => f.type === 'deployment.desired');
    expect(sent.seq).toBe(before + 1);
    // Not acknowledged; the link drops.
    peer.close();
    await peer.closed;

    const again = await h.connect(c.token, sessionId);
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: before });
    expect(w.payload).toMatchObject({ session_id: sessionId, full_resync: false });
    const replayed = await again.next((f) => f.seq !== null);
    expect(replayed).toMatchObject({ type: 'deployment.desired', id: sent.id, seq: sent.seq });
    again.close();
  });
});
