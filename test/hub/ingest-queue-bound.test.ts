/**
 * What a session holds unapplied is bounded by bytes as well as by frames. An operator that keeps
 * to the replay window its welcome names (`replay_buffer_bytes`) never has more than that
 * unacknowledged, and the hub acknowledges after the commit, so more than it waiting here (the
 * database slow or stalled) is an operator ignoring its window: it is told to come back (1013)
 * and replays from its cursor. Before, only the count was bounded (100,000 frames), so frames near
 * the size limit could pile up far past what a Durable Object's memory holds (found by a review).
 */
import { inject } from 'vitest';
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { eventually, FAST_TIMERS, holdLock, node, useHub } from './support/hub';

const EMBEDDED = inject('embeddedPostgres');
// A window of 256 KiB and frames of at most 64 KiB: more than 320 KiB unapplied is past it. And
// a window of 200 frames, which 50 batches of 4 do not raise: more than 200 frames is past it.
const WINDOW_FRAMES = 200;
/** How long the hub lets a hole stand before it closes the connection (1013). */
const HOLE_MS = 20_000;
const h = useHub({
  ...FAST_TIMERS,
  REPLAY_BUFFER_BYTES: String(256 << 10),
  MAX_FRAME_BYTES: String(64 << 10),
  REPLAY_BUFFER_FRAMES: String(WINDOW_FRAMES),
  INGEST_BATCH_FRAMES: '4',
  HOLE_TIMEOUT_MS: String(HOLE_MS),
});

/** A node.observed of about 16 KB: 128 labels of 120 characters. */
const bigNode = (id: string) => ({
  ...node(id),
  labels: Object.fromEntries(Array.from({ length: 128 }, (_, i) => [`example.com/label-${String(i).padStart(3, '0')}-${'k'.repeat(30)}`, 'v'.repeat(63)])),
});

describe('the unapplied frames a session holds', () => {
  // PGlite has one backend: a held lock blocks everything, so this needs a real server.
  it.skipIf(EMBEDDED)('past the replay window in bytes while the database stalls: closed 1013, so the operator replays from its cursor', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('n0'));
    await peer.ackedThrough(1);
    const frameBytes = JSON.stringify(bigNode('n-000')).length;
    expect(frameBytes).toBeGreaterThan(15_000);
    const release = await holdLock('lock table nodes in access exclusive mode');
    let closed;
    try {
      // 10 of them (~160 KB) are within the window and held without complaint.
      for (let i = 1; i <= 10; i++) peer.send('node.observed', bigNode(`n-${i}`));
      await new Promise((r) => setTimeout(r, 500));
      expect(peer.isClosed, "still open within the window").toBe(false);
      // 20 more (~480 KB in all) are past it.
      for (let i = 11; i <= 30; i++) peer.send('node.observed', bigNode(`n-${i}`));
      closed = await peer.closedWith(10_000);
    } finally {
      await release();
    }
    expect(closed.code).toBe(CloseCode.TRY_AGAIN_LATER);
    expect(closed.reason).toMatch(/too many frames waiting/);
  }, 30_000);

  // Frames applied past a hole wait for the ack like the frame in the hole: the operator replays
  // them all from its cursor. Counting only those not yet applied, an operator past its window
  // was let on for as long as the hole stood (HOLE_TIMEOUT_MS), each frame's seq kept in memory
  // and in the session's record (found by review: 1,000 frames in with a window of 200).
  //
  // The operator pings while it waits, as a conforming one does (spec "Liveness"). Applying the
  // 150 frames takes a while: each retry of the hole waits out the lock timeout (750 ms here) on
  // the session's one connection, and batches of 4 go between retries: 1.7 to 2.5 s on an idle
  // machine, 2.7 to 4.1 s with two CPU burners a core, against a silence limit of 3 s. A silent
  // peer was closed 4408 "no frame for 3000 ms" mid-way, its unapplied frames dropped for the
  // replay, and the wait below then ran out on frames that could no longer come (a full-suite run
  // with four files at a time). A close while waiting now fails at once, naming its code.
  it.skipIf(EMBEDDED)('past the replay window in frames behind a hole, though everything after the hole applies: closed 1013', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    peer.send('node.observed', node('held'));
    await peer.ackedThrough(1);
    const release = await holdLock('select 1 from nodes where cluster_uid = $1 and node_id = $2 for update', [c.uid, 'held']);
    let closed;
    let unacked = 0;
    const pinger = setInterval(() => {
      if (!peer.isClosed) peer.send('ping', {});
    }, 500);
    try {
      // seq 2 waits on the lock: the hole. Within the window, what follows it applies and waits.
      peer.send('node.observed', node('held', false));
      const within = WINDOW_FRAMES - 50;
      for (let i = 1; i <= within; i++) peer.send('node.observed', node(`free-${i}`));
      // Bounded by the hub's own limit: past HOLE_MS it closes the connection, which ends the wait.
      let gone = '';
      void peer.closed.then((x) => (gone = `${x.code} ${x.reason}`));
      const seen = await eventually(
        async () => (gone ? 'closed' : (await h.sql('select 1 from nodes where cluster_uid = $1 and node_id = $2', [c.uid, `free-${within}`])).length ? 'applied' : undefined),
        HOLE_MS,
      );
      expect(seen, `closed (${gone}) before free-${within} was applied`).toBe('applied');
      expect(peer.isClosed, 'still open within the window').toBe(false);
      expect(peer.lastAck(), 'nothing acknowledged past the hole').toBe(1);
      // 100 more: 251 unacknowledged, past the window of 200.
      for (let i = within + 1; i <= within + 100; i++) peer.send('node.observed', node(`free-${i}`));
      closed = await peer.closedWith(2_500).catch(async () => {
        const view = (await h.admin('GET', `/clusters/${c.uid}`)).json;
        unacked = view.session.live.hub_expected - 1 - view.session.live.hub_cursor;
        return null;
      });
    } finally {
      clearInterval(pinger);
      await release();
    }
    expect(closed, `open with ${unacked} frames unacknowledged, past a window of ${WINDOW_FRAMES}`).not.toBeNull();
    expect(closed?.code).toBe(CloseCode.TRY_AGAIN_LATER);
    expect(closed?.reason).toMatch(/too many frames waiting/);
  }, HOLE_MS + 20_000);
});
