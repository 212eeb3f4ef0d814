/**
 * A hub resync whose page read failed is retried by the session itself until it ends.
 * DESIGN 6: "Full resync from the hub: resync.begin → every deployment.desired … → stream.end
 * {complete: true}"; PROTOCOL.md: "A page that cannot be read does not hold up the welcome: the
 * session fetches it itself, with retries."
 *
 * Before, the only retry was the fleet poll's poke, which comes when the cluster's desired
 * revision passes what the session has seen: a cluster at revision 0 (never written; re-registered
 * after the plane's state was wiped) never moves, so the resync stayed open (resync.begin, no
 * stream.end) until the next admin write or reconnect, and the operator could never prune what it
 * held. Now a failed fetch retries with backoff while anything is owed (desired-pump.ts).
 */
import { describe, expect, it } from 'vitest';
import { FAST_TIMERS, holdLock, sleep, useHub } from './support/hub';

// PING_INTERVAL_MS only advertises a cadence; set so that IDLE_TIMEOUT_MS is two ping intervals.
const h = useHub({ ...FAST_TIMERS, PING_INTERVAL_MS: '1000' });

describe('hub resync after a failed page read', () => {
  it('a fresh session of a cluster with no desired state ever gets stream.end {complete: true} once the snapshot can be read again', async () => {
    const c = await h.newCluster('empty');
    // The desired-state table is held (a migration, say): the claim's first page and the
    // session's own page read both give up at their deadlines; the claim itself succeeds.
    const release = await holdLock('lock table desired_deployments in access exclusive mode');
    const peer = await h.connect(c.token);
    let pinger: ReturnType<typeof setInterval> | undefined;
    try {
      const w = await peer.hello({ cluster_id: c.name });
      expect(w.payload.full_resync).toBe(true);
      // Alive and acknowledging, as a real operator is (pings every half second, idle limit 3 s).
      pinger = setInterval(() => peer.send('ping', {}, { ack: peer.hubCursor }), 500);
      const begin = await peer.next((f) => f.seq !== null, 5_000);
      expect(begin.type).toBe('resync.begin');
      // The session's own read waits on the lock until PG_QUERY_TIMEOUT_MS (1.5 s) and fails.
      await sleep(3_000);
    } finally {
      await release();
    }
    try {
      // Many poll intervals (300 ms) later the stream must have ended, complete.
      const end = await peer.next((f) => f.type === 'stream.end', 8_000);
      expect(end.payload).toEqual({ complete: true, count: 0 });
    } finally {
      clearInterval(pinger);
      peer.close();
    }
  }, 40_000);
});
