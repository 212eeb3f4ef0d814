/**
 * full_resync means "the operator streams its complete observed state back". When the
 * application's snapshot() fails (an API server blip while listing), the SDK used to retry only
 * "after the next welcome": on a link that stays up the hub never got the fresh session's observed
 * snapshot, so it never pruned against one. Proves that a failed snapshot is retried with backoff
 * (1 s doubling to 30 s, jittered) while the link stays up, that the retry is cancelled when the
 * link ends and made at the next welcome instead, and the delays themselves (`snapshotRetryDelay`).
 */
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { snapshotRetryDelay } from '../../../src/operator/send-side';
import { ackAll, makeClient, reconnectAfterBackoff, SNAPSHOT, type TestClient } from './support/harness';
import { eventually, ScriptedHub } from './support/scripted-hub';

let hub: ScriptedHub;
const clients: TestClient[] = [];
beforeEach(async () => {
  hub = await ScriptedHub.start();
});
afterEach(async () => {
  for (const t of clients.splice(0)) await t.client.stop({ graceful: false });
  await hub.stop();
});

const tick = () => new Promise((r) => setTimeout(r, 5));

describe('observed snapshot after a failed snapshot()', () => {
  it('a fresh session whose first snapshot() threw still streams its observed state, without waiting for another welcome', async () => {
    let calls = 0;
    const t = makeClient(hub, {
      snapshot: () => {
        calls++;
        if (calls === 1) throw new Error('apiserver: connection refused');
        return SNAPSHOT;
      },
    });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true });
    await conn.seen((f) => f.type === 'link.stats', 'link.stats');
    await eventually(() => calls >= 1, 'the first snapshot() call');
    // The link stays healthy for a minute: the hub pings, everything is acknowledged.
    for (let i = 0; i < 12; i++) {
      ackAll(conn);
      conn.ping(0);
      await tick();
      t.timers.advance(5_000);
      await tick();
    }
    expect(conn.closed).toBeNull();
    expect(t.client.state).toBe('open');
    expect(conn.frames.some((f) => f.type === 'resync.begin')).toBe(true);
    expect(calls).toBe(2);
  });

  it('keeps retrying, further apart, while snapshot() keeps failing on a link that stays up', async () => {
    const at: number[] = [];
    const t = makeClient(hub, {
      snapshot: () => {
        at.push(t.timers.now());
        if (at.length <= 3) throw new Error('apiserver: connection refused');
        return SNAPSHOT;
      },
    });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true });
    await eventually(() => at.length === 1, 'the first snapshot() call');
    for (let i = 0; i < 40 && !conn.frames.some((f) => f.type === 'resync.begin'); i++) {
      ackAll(conn);
      conn.ping(0);
      await tick();
      t.timers.advance(500);
      await tick();
    }
    expect(conn.frames.some((f) => f.type === 'resync.begin')).toBe(true);
    expect(at).toHaveLength(4);
    // random() is 0.5 in the harness: 3/4 of each ceiling (1 s, 2 s, 4 s).
    const gaps = at.slice(1).map((x, i) => x - at[i]!);
    expect(gaps).toEqual([750, 1_500, 3_000]);
  });

  it('a snapshot that failed while the link then dropped is taken at the next welcome, not on the dead link', async () => {
    let calls = 0;
    const t = makeClient(hub, {
      snapshot: () => {
        calls++;
        if (calls === 1) throw new Error('apiserver: connection refused');
        return SNAPSHOT;
      },
    });
    clients.push(t);
    await t.client.start();
    const conn = await hub.nextConnection();
    await conn.nextOf('hello');
    conn.welcome({ session_id: 'S1', full_resync: true });
    await eventually(() => calls === 1, 'the first snapshot() call');
    conn.close(1011, 'hub restarting');
    await reconnectAfterBackoff(t);
    const conn2 = await hub.nextConnection();
    await conn2.nextOf('hello');
    // Past the retry's delay (750 ms), within the handshake timeout: nothing is taken while no
    // session is open.
    t.timers.advance(9_000);
    await tick();
    expect(calls).toBe(1);
    conn2.welcome({ session_id: 'S1', full_resync: false, ack_seq: 0 });
    await conn2.seen((f) => f.type === 'resync.begin', 'the observed resync on the resumed session');
    expect(calls).toBe(2);
  });

  it('retry delays: 1 s doubling to 30 s, each between half its ceiling and the ceiling', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 50].map((n) => snapshotRetryDelay(n, 0))).toEqual([500, 1_000, 2_000, 4_000, 8_000, 15_000, 15_000, 15_000]);
    expect([1, 2, 6, 50].map((n) => snapshotRetryDelay(n, 0.999999))).toEqual([1_000, 2_000, 30_000, 30_000]);
    expect(snapshotRetryDelay(1, 7)).toBe(500);
  });
});
