/**
 * The replay-window deadline runs from when frames first waited behind the full window, whatever
 * arrives meanwhile. PROTOCOL.md "Backpressure": an operator that "stays connected without
 * releasing the window for IDLE_TIMEOUT_MS" is closed 4429. Before, every drain (each desired
 * change poked into the session, each answer owed) restarted the wait, so an operator that never
 * acknowledged held its session open, and the changes undelivered, for as long as changes came
 * faster than IDLE_TIMEOUT_MS. The wait restarts only when the operator's ack moves or on a new
 * connection (send-path.ts).
 *
 * And what waits behind the full window must not move the session's desired watermark past what
 * the operator has been sent: a change queued behind an incomplete resync's end (PROTOCOL.md: the
 * withdrawals made before it come as changes from the watermark it left).
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { desired, FAST_TIMERS, insertTooLarge, sleep, useHub, type Frame, type Peer } from './support/hub';

// PING_INTERVAL_MS only advertises a cadence; set so that IDLE_TIMEOUT_MS is two ping intervals.
const h = useHub({ ...FAST_TIMERS, PING_INTERVAL_MS: '1000', REPLAY_BUFFER_FRAMES: '2' });
const IDLE_MS = Number(FAST_TIMERS.IDLE_TIMEOUT_MS);

describe('the replay-window deadline', () => {
  it.concurrent('an operator that never releases its window is closed 4429 after IDLE_TIMEOUT_MS even while desired changes keep arriving', async () => {
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

  it.concurrent("a withdrawal made before an incomplete resync reaches the operator though a change queued behind the resync's end was written, and the link dropped, before the re-fetch", async () => {
    const c = await h.newCluster('inc');
    const ids = ['a0', 'a1', 'a2', 'a3', 'a4', 'gone'];
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments`, { deployments: ids.map((id) => ({ deployment_id: id, ...desired() })) })).status).toBe(200);
    // A first session takes everything, acknowledging frame by frame (the window is 2).
    const p1 = await h.connect(c.token);
    await p1.hello({ cluster_id: c.name });
    for (let f = await p1.next((x) => x.seq !== null); ; f = await p1.next((x) => x.seq !== null)) {
      p1.send('ack', {}, { ack: p1.hubCursor });
      if (f.type === 'stream.end') break;
    }
    p1.close();
    await p1.closed;
    // While the operator is away: 'gone' withdrawn, and a deployment too large to send appears.
    expect((await h.admin('DELETE', `/clusters/${c.name}/deployments/gone`)).status).toBe(200);
    await insertTooLarge(h, c.uid);
    // A fresh session, acknowledging nothing yet: its resync waits behind the window, and a change
    // written now is queued behind the resync's end.
    const p2 = await h.connect(c.token);
    const sessionId = (await p2.hello({ cluster_id: c.name })).payload.session_id as string;
    await p2.next((x) => x.seq === 2);
    await sleep(500);
    expect((await h.admin('PUT', `/clusters/${c.name}/deployments/new1`, desired({ max_replicas: 3 }))).status).toBe(200);
    await sleep(300);
    // Acknowledge frame by frame until the new change arrives, then drop the link at once.
    p2.send('ack', {}, { ack: p2.hubCursor });
    for (let f = await p2.next((x) => x.seq !== null); !(f.type === 'deployment.desired' && f.payload.deployment_id === 'new1'); f = await p2.next((x) => x.seq !== null)) {
      p2.send('ack', {}, { ack: p2.hubCursor });
    }
    expect(p2.frames.find((x) => x.type === 'stream.end')?.payload).toMatchObject({ complete: false });
    p2.close();
    await p2.closed;
    // It resumes; before, the session's watermark had moved to new1's revision and 'gone' was never withdrawn.
    const p3 = await h.connect(c.token, sessionId);
    p3.hubCursor = p2.hubCursor;
    expect((await p3.hello({ cluster_id: c.name, session_id: sessionId, resume_from: p2.hubCursor })).payload).toMatchObject({ full_resync: false });
    for (let i = 0; i < 15; i++) {
      p3.send('ack', {}, { ack: p3.hubCursor });
      await p3.next(() => false, 200).catch(() => null);
    }
    const held = operatorHolds([[p1], [p2, p3]]);
    const listed = (await h.admin('GET', `/clusters/${c.name}/deployments?limit=100`)).json.items as { deployment_id: string; desired: { deleted?: boolean } | null }[];
    const live = listed.filter((d) => d.desired && !d.desired.deleted && d.deployment_id !== 'huge').map((d) => d.deployment_id);
    expect([...held].filter((id) => id !== 'huge').sort()).toEqual(live.sort());
    p3.close();
  }, 60_000);
});

/**
 * What an operator holds after applying every frame its sessions got, session by session, in seq
 * order, as the spec says: a snapshot prunes only when its stream.end says complete, and
 * `deleted: true` withdraws. A session's peers are its connections: a seq seen on two (a replay)
 * is applied once.
 */
function operatorHolds(sessions: Peer[][]): Set<string> {
  const held = new Set<string>();
  for (const peers of sessions) {
    const bySeq = new Map<number, Frame>();
    for (const p of peers) for (const f of p.frames) if (typeof f.seq === 'number' && !bySeq.has(f.seq)) bySeq.set(f.seq, f);
    let snapshot: { begin: string; ids: Set<string> } | null = null;
    for (const f of [...bySeq.values()].sort((a, b) => (a.seq as number) - (b.seq as number))) {
      if (f.type === 'resync.begin') snapshot = { begin: f.id as string, ids: new Set() };
      else if (f.type === 'stream.end' && snapshot && f.reply_to === snapshot.begin) {
        if (f.payload.complete) for (const id of [...held]) if (!snapshot.ids.has(id)) held.delete(id);
        snapshot = null;
      } else if (f.type === 'deployment.desired') {
        const id = f.payload.deployment_id as string;
        if (snapshot && f.reply_to === snapshot.begin) snapshot.ids.add(id);
        if (f.payload.deleted) held.delete(id);
        else held.add(id);
      }
    }
  }
  return held;
}
