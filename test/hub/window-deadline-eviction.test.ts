/**
 * The replay-window deadline across an eviction, when what waits behind the full window is only
 * answers owed (no desired change pending, so the fleet poll never pokes the session and nothing
 * drains the send path again). PROTOCOL.md "Backpressure": an operator that stays connected
 * without releasing the window for IDLE_TIMEOUT_MS is closed 4429. The wait's start was kept only
 * in memory: an eviction lost it, and with nothing left to drain it was never set again, so the
 * deadline never came at all (found by a review). It is stored with the session now.
 */
import { describe, expect, it } from 'vitest';
import { buildFrame, CloseCode, newId } from '../../src/protocol';
import { FAST_TIMERS, node, sleep, useHub } from './support/hub';

// A window of two frames: the empty resync (resync.begin, stream.end) fills it. A silence limit
// long enough for workerd to evict the idle object (about 10 s after its last event) before the
// window deadline comes.
const IDLE_MS = 30_000;
const h = useHub({ ...FAST_TIMERS, PING_INTERVAL_MS: '10000', IDLE_TIMEOUT_MS: String(IDLE_MS), REPLAY_BUFFER_FRAMES: '2', SEND_QUEUE_FRAMES: '20', RETENTION_MS: '60000' });

describe('replay-window deadline across an eviction', () => {
  // Concurrent: each waits out IDLE_MS for its own object's eviction; together they take the time once.
  it.concurrent('an operator that never releases its window, with only an answer owed behind it, is still closed 4429 after IDLE_TIMEOUT_MS although the object was evicted meanwhile', async () => {
    const c = await h.newCluster('rw-win');
    const peer = await h.connect(c.token);
    await peer.hello({ cluster_id: c.name });
    await peer.next((f) => f.type === 'stream.end', 5_000);
    const instance = (await h.admin('GET', `/clusters/${c.name}`)).json.session.live.instance as string;
    // The window (2) is full and never acknowledged. An unknown type is acked and owes an answer,
    // which waits behind the window: the 4429 wait starts now.
    peer.sendRaw(buildFrame({ type: 'future.thing' as never, payload: {} as never, seq: 1, ack: 0, reply_to: null, id: newId() }));
    await peer.ackedThrough(1);
    const waitingSince = Date.now();
    let closedAt: number | null = null;
    void peer.closed.then(() => (closedAt = Date.now()));
    // Alive (a ping within the silence limit, never acknowledging anything), spaced so the object
    // goes idle long enough to be evicted between pings.
    const pinger = setInterval(() => peer.send('ping', {}, { ack: 0 }), 14_000);
    try {
      while (closedAt === null && Date.now() - waitingSince < IDLE_MS + 12_000) await sleep(500);
    } finally {
      clearInterval(pinger);
    }
    const evicted = (await h.admin('GET', `/clusters/${c.name}`)).json.session?.live?.instance !== instance;
    expect(evicted, 'the session object was not evicted meanwhile (the test proves nothing)').toBe(true);
    expect(closedAt, `the hub kept a connection whose window stayed full for ${IDLE_MS + 12_000} ms open after an eviction`).not.toBeNull();
    expect((await peer.closedWith(1_000)).code).toBe(CloseCode.SEND_QUEUE_FULL);
    expect((closedAt as unknown as number) - waitingSince).toBeLessThan(IDLE_MS + 5_000);
    peer.close();
  }, 90_000);

  // Found by review: the last frame's time is stored at most once a second, and a rebuilt object
  // judged silence from the stored time, up to that second early (spec, heartbeat: closed after
  // 30 s with no frame of any kind).
  it.concurrent('a peer whose last frames came within a second of the stored last-frame time is not closed for silence early by the object rebuilt after an eviction', async () => {
    const { c, peer } = await openWithOneFrame('rw-silence');
    const instance = (await h.admin('GET', `/clusters/${c.name}`)).json.session.live.instance as string;
    // Frames within the second after the stored time that commit nothing (bare acks), then silence.
    let last = 0;
    for (let i = 0; i < 8; i++) {
      await sleep(100);
      peer.send('ack', {}, { ack: peer.hubCursor });
      last = Date.now();
    }
    const closed = await peer.closedWith(IDLE_MS + 15_000);
    const silentFor = Date.now() - last;
    const evicted = (await h.admin('GET', `/clusters/${c.name}`)).json.session?.live?.instance !== instance;
    expect(evicted, 'the session object was not evicted meanwhile (the test proves nothing)').toBe(true);
    expect(closed.code).toBe(CloseCode.TIMEOUT);
    expect(silentFor).toBeGreaterThanOrEqual(IDLE_MS);
  }, 90_000);

  // Found by review of the fix above: the bound was applied to a disconnected session too, whose
  // "last frame" in the views then moved a second past its disconnect when its object was evicted.
  it.concurrent("a disconnected session's last frame time is the same before and after its object is evicted, never after the disconnect", async () => {
    const { c, peer } = await openWithOneFrame('rw-lastframe');
    peer.close();
    const closedAt = Date.now();
    await sleep(500);
    const before = (await h.admin('GET', `/clusters/${c.name}`)).json.session.live;
    expect(before.connected).toBe(false);
    // Idle: workerd evicts the object about 10 s after its last event (a read is an event).
    let after = before;
    for (const wait of [15_000, 20_000]) {
      if (after.instance !== before.instance) break;
      await sleep(wait);
      after = (await h.admin('GET', `/clusters/${c.name}`)).json.session.live;
    }
    expect(after.instance, 'the session object was not evicted meanwhile (the test proves nothing)').not.toBe(before.instance);
    expect(after.last_frame_at).toBe(before.last_frame_at);
    expect(Date.parse(after.last_frame_at as string)).toBeLessThanOrEqual(closedAt);
  }, 90_000);
});

/** A fresh session whose first frame (a node) is committed and acknowledged. */
async function openWithOneFrame(prefix: string) {
  const c = await h.newCluster(prefix);
  const peer = await h.connect(c.token);
  await peer.hello({ cluster_id: c.name });
  await peer.next((f) => f.type === 'stream.end', 5_000);
  peer.send('node.observed', node('n1'));
  await peer.ackedThrough(1);
  return { c, peer };
}
