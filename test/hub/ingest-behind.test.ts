/**
 * The ingest pipeline sends a second batch statement behind the one running, on the same
 * connection (src/hub/session/ingest-pipeline.ts). test/unit/ingest-pipeline.test.ts settles the
 * two in every order with a scripted statement; this file makes the first of two real statements
 * fail in a real Postgres, through the real driver and session object: the one behind must still
 * run and commit, the ack must stay behind the frames that did not apply, and those must apply
 * once they can, newest value last.
 */
import { describe, expect, inject, it } from 'vitest';
import { device, eventually, FAST_TIMERS, holdLock, waitingOnLock, useHub } from './support/hub';

// Batches of two frames, so five waiting frames make a statement and one behind it. A row lock
// fails a statement after 2 s (the lock timeout is the lower of this and half the query
// deadline); the hole limit is well beyond what the test holds a lock for.
const h = useHub({
  ...FAST_TIMERS,
  INGEST_BATCH_FRAMES: '2',
  PG_LOCK_TIMEOUT_MS: '2000',
  PG_QUERY_TIMEOUT_MS: '6000',
  HOLE_TIMEOUT_MS: '20000',
  IDLE_TIMEOUT_MS: '20000',
});
const EMBEDDED = inject('embeddedPostgres');

/** Ingest statements (their fence reads cluster_owners) of this database waiting on a lock right now. */
const ingestWaitingOnLock = () => waitingOnLock(h, '%cluster_owners%');

describe('ingest: the first of two statements in flight fails in Postgres', () => {
  // PGlite has one backend: a held lock blocks everything, so this needs a real server.
  it.skipIf(EMBEDDED)('the one behind still commits, the ack stays behind the failed frames, and they apply once the lock goes', async () => {
    const c = await h.newCluster();
    const { peer } = await h.openFresh(c);
    const live = async () => (await h.admin('GET', `/clusters/${c.name}`)).json.session.live as Record<string, number>;
    peer.send('device.observed', device('GPU-slow', { driver_version: 'v1' })); // seq 1
    peer.send('device.observed', device('GPU-locked', { driver_version: 'v1' })); // seq 2
    await peer.ackedThrough(2);

    const releaseSlow = await holdLock("select 1 from devices where cluster_uid = $1 and device_id = 'GPU-slow' for update", [c.uid]);
    const releaseLocked = await holdLock("select 1 from devices where cluster_uid = $1 and device_id = 'GPU-locked' for update", [c.uid]);
    let slowHeld = true;
    try {
      // seq 3: a statement of its own, waiting on GPU-slow's lock, while the rest arrive behind it.
      peer.send('device.observed', device('GPU-slow', { driver_version: 'v2' }));
      await eventually(async () => ((await ingestWaitingOnLock()) === 1 ? true : undefined), 5_000);
      peer.send('device.observed', device('GPU-locked', { driver_version: 'v2' })); // seq 4
      for (let i = 1; i <= 4; i++) peer.send('device.observed', device(`GPU-${i}`, { driver_version: 'v1' })); // seq 5..8
      await eventually(async () => ((await live()).hub_expected === 9 ? true : undefined), 5_000);
      expect(await live()).toMatchObject({ hub_cursor: 2, apply_statements_in_flight: 1 });

      // seq 3 commits; then [4, 5] go out and [6, 7] behind them, before either is answered.
      await releaseSlow();
      slowHeld = false;
      await peer.ackedThrough(3);
      const both = await eventually(async () => {
        const l = await live();
        return l.apply_statements_in_flight === 2 && (await ingestWaitingOnLock()) === 1 ? l : undefined;
      }, 1_500);
      expect(both).toMatchObject({ hub_cursor: 3 });

      // The first fails on the lock (55P03); the one behind it runs next and commits, and the
      // first's other frame applies on its own once GPU-locked is set aside.
      const applied = await eventually(async () => {
        const rows = await h.sql<{ device_id: string }>(
          "select device_id from devices where cluster_uid = $1 and driver_version = 'v1' and device_id like 'GPU-_' order by 1",
          [c.uid],
        );
        return rows.length === 4 ? rows.map((r) => r.device_id) : undefined;
      }, 10_000);
      expect(applied).toEqual(['GPU-1', 'GPU-2', 'GPU-3', 'GPU-4']);
      // The ack does not pass seq 4, which has not applied.
      expect(peer.lastAck()).toBe(3);
      expect(await live()).toMatchObject({ hub_cursor: 3, held_subjects: 1 });
      const locked = await h.sql<{ driver_version: string }>("select driver_version from devices where cluster_uid = $1 and device_id = 'GPU-locked'", [c.uid]);
      expect(locked[0]?.driver_version).toBe('v1');
    } finally {
      if (slowHeld) await releaseSlow();
      await releaseLocked();
    }
    await peer.ackedThrough(8, 10_000);
    const rows = await h.sql<{ device_id: string; driver_version: string }>(
      'select device_id, driver_version from devices where cluster_uid = $1 order by 1',
      [c.uid],
    );
    expect(rows).toEqual([
      { device_id: 'GPU-1', driver_version: 'v1' },
      { device_id: 'GPU-2', driver_version: 'v1' },
      { device_id: 'GPU-3', driver_version: 'v1' },
      { device_id: 'GPU-4', driver_version: 'v1' },
      { device_id: 'GPU-locked', driver_version: 'v2' },
      { device_id: 'GPU-slow', driver_version: 'v2' },
    ]);
    expect(await live()).toMatchObject({ hub_cursor: 8, pending_apply: 0, held_subjects: 0, apply_statements_in_flight: 0 });
    peer.close();
  });
});
