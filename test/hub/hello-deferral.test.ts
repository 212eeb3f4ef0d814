/**
 * Frames that arrive while a hello is in progress wait for it to settle (it may change which
 * connection carries the session), but not without bound: a claim can wait seconds on Postgres
 * (here, behind a row lock on the cluster's owner row), and what waits is isolate memory. A frame
 * over the size limit is answered at once (1009), and past eight frames' worth of the largest
 * size the sender is told to come back (1013), both while the hello still waits. And a held frame
 * of the session's own connection is a sign of life when it arrives: a claim slower than the
 * silence limit must not cut an operator that kept talking.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { FAST_TIMERS, holdLock, sleep, useHub, type TestCluster } from './support/hub';

const MAX_FRAME_BYTES = 64 << 10;
const h = useHub({ ...FAST_TIMERS, MAX_FRAME_BYTES: String(MAX_FRAME_BYTES), PG_QUERY_TIMEOUT_MS: '8000' });

/** A live session, and a second connection to its object whose hello waits on the owner row. */
async function helloHeld(c: TestCluster) {
  const { peer: live, sessionId } = await h.openFresh(c);
  const release = await holdLock('select 1 from cluster_owners where cluster_uid = $1 for update', [c.uid]);
  const second = await h.connect(c.token, sessionId);
  const welcome = second.hello({ cluster_id: c.name, session_id: sessionId, resume_from: live.hubCursor }).catch((e: unknown) => e);
  await sleep(300);
  return { live, second, welcome, release };
}

describe('frames held while a hello is in progress', () => {
  it('a frame over max_frame_bytes is refused 1009 at once, not when the hello settles', async () => {
    const c = await h.newCluster();
    const { live, second, welcome, release } = await helloHeld(c);
    try {
      const t0 = Date.now();
      live.sendRaw(JSON.stringify({ v: 1, type: 'node.event', pad: 'x'.repeat(MAX_FRAME_BYTES) }));
      const closed = await live.closedWith(5_000);
      expect(closed.code).toBe(CloseCode.TOO_BIG);
      expect(Date.now() - t0, 'refused while the hello still waited on the lock').toBeLessThan(2_500);
    } finally {
      await release();
    }
    await welcome;
    second.close();
  }, 30_000);

  it('past eight frames of the largest size held, the sender is closed 1013 (retry), while the hello still waits', async () => {
    const c = await h.newCluster();
    const { live, second, welcome, release } = await helloHeld(c);
    try {
      const t0 = Date.now();
      const frame = JSON.stringify({ v: 1, type: 'node.event', pad: 'y'.repeat(MAX_FRAME_BYTES - 200) });
      for (let i = 0; i < 12 && !live.isClosed; i++) live.sendRaw(frame);
      const closed = await live.closedWith(5_000);
      expect(closed.code).toBe(CloseCode.TRY_AGAIN_LATER);
      expect(Date.now() - t0, 'closed while the hello still waited on the lock').toBeLessThan(2_500);
    } finally {
      await release();
    }
    await welcome;
    second.close();
  }, 30_000);

  it('the live connection that keeps talking while the hello waits longer than the silence limit is not closed for silence', async () => {
    const c = await h.newCluster();
    const { live, second, welcome, release } = await helloHeld(c);
    const idle = Number(h.vars.IDLE_TIMEOUT_MS);
    try {
      const t0 = Date.now();
      // Pings every 400 ms, held with everything else (the runtime answers none while a hello is in progress).
      while (Date.now() - t0 < 1.5 * idle && !live.isClosed) {
        live.send('ping', {}, { ack: live.hubCursor });
        await sleep(400);
      }
      const closed = live.isClosed ? await live.closedWith(100) : null;
      expect(closed, `closed ${Date.now() - t0} ms into the wait though it sent a frame every 400 ms`).toBeNull();
    } finally {
      await release();
    }
    await welcome;
    second.close();
  }, 30_000);
});
