/**
 * A fresh session delivers every open operation again after its resync's stream.end (PROTOCOL.md,
 * "Full resync"), once: MESSAGES.md (`error`) "Each fresh session delivers an open operation again
 * in a new operation.start". A delivery already written into the replay buffer is the operator's
 * once the session resumes (replayed, or acknowledged), so a resume in the middle of that
 * redelivery must not fetch and send it a second time under a new frame id: each one takes a slot
 * of the operation's remembered start frames (START_FRAMES_KEPT) and is run past the operator's
 * dedup again.
 */
import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, useHub, type Peer, type TestCluster } from './support/hub';

// A replay window of three frames: the resync's begin, its end and the first redelivered start.
const h = useHub({ ...FAST_TIMERS, REPLAY_BUFFER_FRAMES: '3', RETENTION_MS: '60000' });

async function start(c: TestCluster, target: string): Promise<string> {
  const r = await h.admin('POST', `/clusters/${c.name}/operations`, { kind: 'node.cordon', target, params: {}, deadline_s: 300 });
  expect(r.status, JSON.stringify(r.json)).toBe(202);
  return r.json.operation_id as string;
}

const startsOf = (p: Peer) => p.frames.filter((f) => f.type === 'operation.start').map((f) => [f.payload.operation_id, f.id]);

describe('open operations redelivered by a fresh session', () => {
  it('a resume part way through the redelivery sends only the operations not yet written, each once', async () => {
    const c = await h.newCluster('opr');
    const ops = [await start(c, 'n-1'), await start(c, 'n-2'), await start(c, 'n-3')];

    const peer = await h.connect(c.token);
    const w = await peer.hello({ cluster_id: c.name });
    const sessionId = w.payload.session_id as string;
    const first = await peer.next((f) => f.type === 'operation.start');
    // The window is full (begin, end, this start): the other two wait for the operator's ack.
    expect(first).toMatchObject({ seq: 3, payload: { operation_id: ops[0] } });
    peer.close();
    await peer.closed;

    // The operator processed everything it got (through seq 3) and resumes.
    const again = await h.connect(c.token, sessionId);
    again.hubCursor = 3;
    const welcome = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 3 });
    expect(welcome.payload.full_resync).toBe(false);
    // Redelivered in revision order: a second start of the first would come before the third's.
    await again.next((f) => f.type === 'operation.start' && f.payload.operation_id === ops[2]);
    expect(startsOf(again).map(([id]) => id)).toEqual([ops[1], ops[2]]);
    const rows = await h.sql<{ n: number }>('select cardinality(start_frame_ids) as n from operations where operation_id = $1', [ops[0]]);
    expect(rows[0]?.n).toBe(1);
    again.close();
  });
});
