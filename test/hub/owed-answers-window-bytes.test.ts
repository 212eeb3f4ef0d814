/**
 * The cap on answers owed counts the answers a burst will need from the frame's arrival, beyond
 * the room the replay window has for them (send-path.ts `admit`). The window is full on frames or
 * on bytes: counted in frames alone, a window shut by its bytes (large deployments unacknowledged,
 * the default 50,000 frames far off) still had room for tens of thousands of answers, and a burst
 * that size was admitted whole, every answer kept in storage. Here the window's bytes hold two
 * frames and its frame count is the default.
 */
import { describe, expect, it } from 'vitest';
import { buildFrame, CloseCode, newId } from '../../src/protocol';
import { desired, FAST_TIMERS, sleep, useHub } from './support/hub';

// Answers owed capped at 20 (SEND_QUEUE_FRAMES); a window of 3,000 bytes: the resync's begin and
// one large deployment fill it.
const h = useHub({ ...FAST_TIMERS, REPLAY_BUFFER_BYTES: '3000', SEND_QUEUE_FRAMES: '20', RETENTION_MS: '60000' });

describe('answers owed behind a window shut by its bytes', () => {
  it('a burst of frames that need answers is refused at the cap as it arrives', async () => {
    const c = await h.newCluster();
    const large = desired({ serving: { ...desired().serving, env: { NOTE: 'x'.repeat(2_000) } } });
    for (let i = 0; i < 3; i++) expect((await h.admin('PUT', `/clusters/${c.name}/deployments/d${i}`, large)).status).toBe(200);
    const peer = await h.connect(c.token);
    const w = await peer.hello({ cluster_id: c.name });
    const sessionId = w.payload.session_id as string;
    await peer.next((f) => f.seq === 2, 10_000);
    await sleep(200);
    // The window is shut: two frames out, the rest queued behind them.
    expect(peer.frames.filter((f) => f.seq !== null).length).toBe(2);
    for (let seq = 1; seq <= 60; seq++) {
      peer.sendRaw(buildFrame({ type: 'future.thing' as never, payload: {} as never, seq, ack: 0, reply_to: null, id: newId() }));
    }
    expect((await peer.closedWith(10_000)).code).toBe(CloseCode.SEND_QUEUE_FULL);
    const again = await h.connect(c.token, sessionId);
    const resumed = await again.hello({ cluster_id: c.name, session_id: sessionId, resume_from: 2 });
    expect(resumed.payload.full_resync).toBe(false);
    expect(resumed.payload.ack_seq as number).toBeLessThanOrEqual(20);
    again.close();
  }, 40_000);
});
