/**
 * One cluster's operator cannot stall another cluster's connects through the shared gateway.
 *
 * Every hello's claim locks its cluster's owner row, where it waits while that cluster's own
 * session holds the row for a long write (its fence, FOR SHARE) or another claim holds it. A
 * claim waiting there holds the gateway connection it runs on, and everything queued behind it
 * on that connection waits too. Found by review: the operator of cluster A (any holder of A's
 * token, or a buggy operator reconnecting in a loop) opening a few connections at once while A's
 * row was held put a waiting claim at the head of every connection of the shard, and cluster B's
 * token lookup and claim queued behind them: B could not connect until A's lock went away or
 * A's claims reached the statement timeout, again at A's next burst.
 */
import { describe, expect, inject, it } from 'vitest';
import { eventually, FAST_TIMERS, helloBurst, holdLock, sleep, useHub, waitingOnLock, type Peer } from './support/hub';

// One shard of the default three connections, so every statement shares it. A statement timeout
// far beyond the test's waits: a claim waiting on the lock stays waiting until it is released.
const h = useHub({
  ...FAST_TIMERS,
  DB_GATEWAY_SHARDS: '1',
  DB_GATEWAY_CONNECTIONS: '3',
  PG_QUERY_TIMEOUT_MS: '20000',
  HANDSHAKE_TIMEOUT_MS: '30000',
  PING_INTERVAL_MS: '5000',
  IDLE_TIMEOUT_MS: '30000',
});
const EMBEDDED = inject('embeddedPostgres');

describe('cross-cluster isolation at the shared gateway', () => {
  // PGlite has one backend: a held lock blocks everything, so this needs a real server.
  it.skipIf(EMBEDDED)("a burst of one cluster's hellos waiting on its locked owner row does not hold up another cluster's connect", async () => {
    const a = await h.newCluster('pile-a');
    const b = await h.newCluster('pile-b');
    const first = await h.openFresh(a);
    // What a long write of A's session holds for its duration: its fence, FOR SHARE on A's owner row.
    const release = await holdLock('select 1 from cluster_owners where cluster_uid = $1 for share', [a.uid]);
    let burst: Peer[] = [];
    try {
      // Twice the shard's connections: with every claim on the least busy connection, each
      // connection would have one of A's claims waiting at its head.
      burst = await helloBurst(h, a, 6);
      await eventually(async () => (await waitingOnLock(h, '%cluster_owners%')) >= 1, 10_000);
      // Let every claim of the burst reach the gateway.
      await sleep(500);

      const t0 = Date.now();
      const other = await h.openFresh(b);
      const took = Date.now() - t0;
      // B was welcomed while A's claims still wait on A's row: B did not queue behind them.
      const stillWaiting = await waitingOnLock(h, '%cluster_owners%');
      expect(stillWaiting, `claims of A waiting on its row once B was welcomed (B took ${took} ms)`).toBeGreaterThanOrEqual(1);
      const owners = await h.sql<{ session_id: string; connected: boolean }>('select session_id, connected from cluster_owners where cluster_uid = $1', [b.uid]);
      expect(owners).toEqual([{ session_id: other.sessionId, connected: true }]);
      // A's own row is untouched by B: its claims still wait, nothing of them committed.
      const ownersA = await h.sql<{ session_id: string }>('select session_id from cluster_owners where cluster_uid = $1', [a.uid]);
      expect(ownersA).toEqual([{ session_id: first.sessionId }]);
      other.peer.close();
    } finally {
      await release();
    }
    // Once A's row is free, A's claims go through, one after another: the newest hello wins.
    await eventually(async () => (await waitingOnLock(h, '%cluster_owners%')) === 0, 10_000);
    for (const p of burst) p.close();
    first.peer.close();
  }, 90_000);
});
