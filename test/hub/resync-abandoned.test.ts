/**
 * An operator process that crashes part way through streaming its observed snapshot leaves the
 * hub a `resync.begin` that no `stream.end` closes. The next process continues the session (a
 * resume) and streams a new snapshot under a new begin id; it cannot end the old stream, whose id
 * it never knew. The hub cannot tell that stream from one the same process will still finish after
 * a reconnect (resume.test / session-operator-resync.test), so it stays open, bounded by
 * MAX_OPEN_RESYNCS (src/hub/session/ingest-streams.ts). What it must never do: be pruned
 * against, block the new stream's prune, wedge the session, or cost ingest its pipelining (the
 * second statement sent behind the one in flight, src/hub/session/ingest-pipeline.ts) for the
 * rest of the session.
 */
import { describe, expect, inject, it } from 'vitest';
import { device, eventually, FAST_TIMERS, holdLock, waitingOnLock, sleep, useHub } from './support/hub';

// Batches of two frames (as ingest-behind.test.ts), so queued frames make a statement and one behind it.
const h = useHub({
  ...FAST_TIMERS,
  INGEST_BATCH_FRAMES: '2',
  PG_LOCK_TIMEOUT_MS: '2000',
  PG_QUERY_TIMEOUT_MS: '6000',
  HOLE_TIMEOUT_MS: '20000',
  IDLE_TIMEOUT_MS: '20000',
});
const EMBEDDED = inject('embeddedPostgres');

const deviceIds = async (uid: string) => (await h.sql('select device_id from devices where cluster_uid = $1 order by 1', [uid])).map((r) => r.device_id as string);

/** Ingest statements (their fence reads cluster_owners) of this database waiting on a lock right now. */
const ingestWaitingOnLock = () => waitingOnLock(h, '%cluster_owners%');

describe('an operator resync stream abandoned by a crashed process', () => {
  // PGlite has one backend: a held lock blocks everything, so this needs a real server.
  it.skipIf(EMBEDDED)('after a resume the new snapshot prunes (the old one never does) and ingest still sends a statement behind the one in flight', async () => {
    const c = await h.newCluster('rv-abandon');
    const { peer, sessionId } = await h.openFresh(c);
    const live = async () => (await h.admin('GET', `/clusters/${c.name}`)).json.session.live as Record<string, any>;
    peer.send('device.observed', device('GPU-slow', { driver_version: 'v1' })); // seq 1
    peer.send('device.observed', device('GPU-locked', { driver_version: 'v1' })); // seq 2
    peer.send('device.observed', device('GPU-gone', { driver_version: 'v1' })); // seq 3
    // The first process begins its snapshot, sends one member, and dies.
    const old = peer.send('resync.begin', { scope: ['device'] }); // seq 4
    peer.send('device.observed', device('GPU-slow', { driver_version: 'v1' }), { reply_to: old }); // seq 5
    await peer.ackedThrough(5);
    peer.close();
    await peer.closedWith();
    expect(await deviceIds(c.uid)).toEqual(['GPU-gone', 'GPU-locked', 'GPU-slow']);

    // The next process continues the session from its durable cursor and streams a new snapshot.
    const p = await h.connect(c.token, sessionId);
    p.hubCursor = peer.hubCursor;
    const w = await p.hello({ cluster_id: c.name, session_id: sessionId, resume_from: peer.hubCursor });
    expect(w.payload).toMatchObject({ full_resync: false, ack_seq: 5 });
    p.nextSeq = 6;
    const fresh = p.send('resync.begin', { scope: ['device'] }); // seq 6
    p.send('device.observed', device('GPU-slow', { driver_version: 'v1' }), { reply_to: fresh }); // seq 7
    p.send('device.observed', device('GPU-locked', { driver_version: 'v1' }), { reply_to: fresh }); // seq 8
    p.send('stream.end', { complete: true, count: 2 }, { reply_to: fresh }); // seq 9
    await p.ackedThrough(9);
    await sleep(200);
    // The new stream's prune is not blocked by the open one, and only the new one pruned.
    expect(await deviceIds(c.uid)).toEqual(['GPU-locked', 'GPU-slow']);
    expect((await live()).counters).toMatchObject({ resyncsCompleted: 1, resyncsIncomplete: 0, pruned: 1 });

    // Ordinary traffic from here on: a statement waits on a row lock while more frames queue, then
    // the next statement goes out with another behind it (as ingest-behind.test.ts, no stream here).
    const releaseSlow = await holdLock("select 1 from devices where cluster_uid = $1 and device_id = 'GPU-slow' for update", [c.uid]);
    const releaseLocked = await holdLock("select 1 from devices where cluster_uid = $1 and device_id = 'GPU-locked' for update", [c.uid]);
    let slowHeld = true;
    try {
      p.send('device.observed', device('GPU-slow', { driver_version: 'v2' })); // seq 10
      await eventually(async () => ((await ingestWaitingOnLock()) === 1 ? true : undefined), 5_000);
      p.send('device.observed', device('GPU-locked', { driver_version: 'v2' })); // seq 11
      for (let i = 1; i <= 4; i++) p.send('device.observed', device(`GPU-${i}`, { driver_version: 'v1' })); // seq 12..15
      await eventually(async () => ((await live()).hub_expected === 16 ? true : undefined), 5_000);
      expect(await live()).toMatchObject({ hub_cursor: 9, apply_statements_in_flight: 1 });

      await releaseSlow();
      slowHeld = false;
      await p.ackedThrough(10);
      // [11, 12] wait on GPU-locked's lock; [13, 14] must be in flight behind them.
      const both = await eventually(async () => {
        const l = await live();
        return l.apply_statements_in_flight === 2 ? l : undefined;
      }, 1_500).catch(() => null);
      expect(both, 'a second statement in flight behind the first, with the abandoned stream still open').toMatchObject({ hub_cursor: 10 });
    } finally {
      if (slowHeld) await releaseSlow();
      await releaseLocked();
    }
    await p.ackedThrough(15, 10_000);
    expect(await deviceIds(c.uid)).toEqual(['GPU-1', 'GPU-2', 'GPU-3', 'GPU-4', 'GPU-locked', 'GPU-slow']);
    expect((await live()).counters).toMatchObject({ resyncsCompleted: 1, pruned: 1 });
    expect(p.isClosed).toBe(false);
    p.close();
  });

  it('begins that never end, past MAX_OPEN_RESYNCS: the session stays up, the oldest end incomplete (never pruned against), a new resync still prunes', async () => {
    const c = await h.newCluster('rv-abandon');
    const { peer } = await h.openFresh(c);
    const live = async () => (await h.admin('GET', `/clusters/${c.name}`)).json.session.live as Record<string, any>;
    for (const id of ['a', 'b', 'c']) peer.send('device.observed', device(id)); // seq 1..3
    // An operator crash-looping mid-snapshot, seen from one session: 20 begins, each with one member.
    const abandoned: string[] = [];
    for (let i = 0; i < 20; i++) {
      const begin = peer.send('resync.begin', { scope: ['device'] });
      abandoned.push(begin);
      peer.send('device.observed', device('a'), { reply_to: begin });
    } // seq 4..43
    await peer.ackedThrough(43);
    await sleep(200);
    expect(await deviceIds(c.uid)).toEqual(['a', 'b', 'c']);
    // 16 stay open; each begin past that ended the oldest, incomplete.
    expect((await live()).counters).toMatchObject({ resyncsCompleted: 0, resyncsIncomplete: 4, pruned: 0 });

    // A stream.end naming a superseded begin (complete, right count) is refused: nothing is pruned.
    peer.send('stream.end', { complete: true, count: 1 }, { reply_to: abandoned[0] }); // seq 44
    await peer.ackedThrough(44);
    await sleep(200);
    expect(await deviceIds(c.uid)).toEqual(['a', 'b', 'c']);

    // An honest snapshot still opens (the oldest open one gives way) and prunes when complete.
    const begin = peer.send('resync.begin', { scope: ['device'] }); // seq 45
    peer.send('device.observed', device('a'), { reply_to: begin }); // seq 46
    peer.send('device.observed', device('b'), { reply_to: begin }); // seq 47
    peer.send('stream.end', { complete: true, count: 2 }, { reply_to: begin }); // seq 48
    await peer.ackedThrough(48);
    await sleep(200);
    expect(await deviceIds(c.uid)).toEqual(['a', 'b']);
    expect((await live()).counters).toMatchObject({ resyncsCompleted: 1, resyncsIncomplete: 5, pruned: 1 });
    expect(peer.isClosed).toBe(false);
    peer.close();
  });
});
