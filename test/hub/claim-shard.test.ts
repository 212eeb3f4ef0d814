/**
 * A cluster's claims all run on one gateway shard, the cluster's poll shard, so one connection of
 * the whole gateway is what a burst of its hellos can hold while its owner row is locked.
 *
 * A shard runs a cluster's claims in flight on one connection (its claim lane,
 * cross-cluster-claim-pileup.test.ts), but each claim went to a shard chosen at random: a burst
 * of one cluster's hellos put a waiting claim on a connection of every shard, each holding it and
 * what queued behind it until the row was free or the statement timed out.
 */
import { describe, expect, inject, it } from 'vitest';
import { eventually, FAST_TIMERS, helloBurst, holdLock, sleep, useHub, waitingOnLock, type Peer } from './support/hub';

// The default shape: 4 shards of 3 connections. A statement timeout beyond the test's waits.
const h = useHub({
  ...FAST_TIMERS,
  DB_GATEWAY_SHARDS: '4',
  DB_GATEWAY_CONNECTIONS: '3',
  PG_QUERY_TIMEOUT_MS: '20000',
  HANDSHAKE_TIMEOUT_MS: '30000',
  PING_INTERVAL_MS: '5000',
  IDLE_TIMEOUT_MS: '30000',
});
const EMBEDDED = inject('embeddedPostgres');

describe("a cluster's claims at the gateway", () => {
  // PGlite has one backend: a held lock blocks everything, so this needs a real server.
  it.skipIf(EMBEDDED)("a burst of one cluster's hellos waiting on its locked owner row holds one gateway connection, not one per shard", async () => {
    const a = await h.newCluster('lane-a');
    const b = await h.newCluster('lane-b');
    const first = await h.openFresh(a);
    const release = await holdLock('select 1 from cluster_owners where cluster_uid = $1 for share', [a.uid]);
    let burst: Peer[] = [];
    try {
      // Sixteen: at random, every one of the four shards would get some (all but 4·(3/4)^16 ≈ 4% of runs).
      burst = await helloBurst(h, a, 16);
      await eventually(async () => (await waitingOnLock(h, '%cluster_owners%')) >= 1, 10_000);
      // Let every claim of the burst reach its shard.
      await sleep(1_000);
      expect(await waitingOnLock(h, '%cluster_owners%'), 'backends waiting on A\'s owner row: one per shard its claims reached').toBe(1);
      // Another cluster connects meanwhile.
      const other = await h.openFresh(b);
      other.peer.close();
    } finally {
      await release();
    }
    // Once A's row is free, its claims go through one after another.
    await eventually(async () => (await waitingOnLock(h, '%cluster_owners%')) === 0, 10_000);
    for (const p of burst) p.close();
    first.peer.close();
  }, 90_000);
});
