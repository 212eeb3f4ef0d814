/**
 * The replay-window deadline runs from when frames first waited behind the full window, whatever
 * arrives meanwhile. PROTOCOL.md "Backpressure": an operator that "stays connected without
 * releasing the window for IDLE_TIMEOUT_MS" is closed 4429. Before, every drain (each desired
 * change poked into the session, each answer owed) restarted the wait, so an operator that never
 * acknowledged held its session open, and the changes undelivered, for as long as changes came
 * faster than IDLE_TIMEOUT_MS. The wait restarts only when the operator's ack moves or on a new
 * connection (send-path.ts).
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { desired, FAST_TIMERS, sleep, useHub } from './support/hub';

// PING_INTERVAL_MS only advertises a cadence; set so that IDLE_TIMEOUT_MS is two ping intervals.
const h = useHub({ ...FAST_TIMERS, PING_INTERVAL_MS: '1000', REPLAY_BUFFER_FRAMES: '2' });
const IDLE_MS = Number(FAST_TIMERS.IDLE_TIMEOUT_MS);

describe('the replay-window deadline', () => {
  it('an operator that never releases its window is closed 4429 after IDLE_TIMEOUT_MS even while desired changes keep arriving', async () => {
    const c = await h.newCluster('win');
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    // The empty resync (resync.begin, stream.end) fills the window of 2; the operator stays alive
    // (pings) but never acknowledges anything.
    const pinger = setInterval(() => peer.send('ping', {}, { ack: 0 }), 500);
    try {
      await peer.next((f) => f.type === 'stream.end', 5_000);
      const firstWaiting = Date.now();
      // One change a second: each waits behind the full window.
      let closedAt: number | null = null;
      void peer.closed.then(() => (closedAt = Date.now()));
      for (let i = 0; i < 12 && closedAt === null; i++) {
        const r = await h.admin('PUT', `/clusters/${c.name}/deployments/d${i}`, desired());
        expect(r.status).toBe(200);
        await sleep(1_000);
      }
      expect(closedAt, 'the hub kept a connection whose window stayed full for 12 s open').not.toBeNull();
      expect((await peer.closedWith(1_000)).code).toBe(CloseCode.SEND_QUEUE_FULL);
      // Within the deadline (and some slack for the alarm), not after the writes stopped.
      expect((closedAt as unknown as number) - firstWaiting).toBeLessThan(IDLE_MS + 3_000);
      // Nothing beyond the window was sent meanwhile.
      expect(peer.frames.filter((f) => f.seq !== null && f.type === 'deployment.desired')).toEqual([]);
    } finally {
      clearInterval(pinger);
      peer.close();
    }
  }, 60_000);
});
