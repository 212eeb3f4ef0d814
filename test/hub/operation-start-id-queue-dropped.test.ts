/**
 * An operation.start whose frame id was recorded (markOperationsSent) and queued, and whose queue
 * was then dropped before the frame was written (the connection closed while the frame waited for
 * the replay window): the re-fetch recorded a new id and sent that one, and the first slot, kept
 * for good, held an id no operator ever saw (as 71f2071 mended for a lost statement answer; found
 * by review of the desired pump). The id now stays the pump's until the frame is written.
 */
import { describe, expect, it } from 'vitest';
import { desired, FAST_TIMERS, useHub } from './support/hub';

// Three frames in flight at most: a fresh session's resync.begin and stream.end, and one change.
const h = useHub({ ...FAST_TIMERS, REPLAY_BUFFER_FRAMES: '3', IDLE_TIMEOUT_MS: '30000', RETENTION_MS: '60000' });

describe('an operation.start queued behind a full replay window when the connection closes', () => {
  it('is sent after the resume under the id first recorded, which stays the only one kept', async () => {
    const c = await h.newCluster('opid-queue');
    const { peer, sessionId } = await h.openFresh(c);
    // The window fills (begin, end, d1: none acknowledged) ...
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/d1`, desired())).status).toBe(200);
    const d1 = await peer.next((f) => f.type === 'deployment.desired');
    // ... and the operation's start is recorded and queued behind it.
    const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.drain', target: 'n-1', params: {}, deadline_s: 300 });
    expect(r.status, JSON.stringify(r.json)).toBe(202);
    const op = r.json.operation_id as string;
    const recorded = async () => (await h.sql<{ ids: string[] }>('select start_frame_ids as ids from operations where operation_id = $1', [op]))[0]?.ids ?? [];
    const deadline = Date.now() + 10_000;
    while ((await recorded()).length === 0 && Date.now() < deadline) await new Promise((res) => setTimeout(res, 50));
    const first = await recorded();
    expect(first).toHaveLength(1);
    expect(peer.frames.some((f) => f.type === 'operation.start'), 'not written: the window is full').toBe(false);
    peer.close();

    // The operator resumes, having processed everything it got: the window opens.
    const again = await h.connect(c.token, sessionId);
    const w = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: d1.seq as number });
    expect(w.payload).toMatchObject({ session_id: sessionId, full_resync: false });
    const start = await again.next((f) => f.type === 'operation.start' && f.payload.operation_id === op, 10_000);
    expect(start.id).toBe(first[0]);
    expect(await recorded()).toEqual(first);
    again.close();
  }, 40_000);
});
