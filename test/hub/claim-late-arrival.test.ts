/**
 * A claim the hub gave up on writes nothing if it reaches Postgres later. A path that stalled
 * (bytes held in the network, the socket up) and then healed delivered a hello's claim after the
 * hello had been refused 1013 and the operator had opened a session on a fresh connection:
 * Postgres started its timeout only on arrival and committed it, so a session no connection
 * carried took the cluster from the live one, which the fleet poll then cut (4409), and its
 * operator's return cost a full resync. The claim now names when it must have arrived by
 * (db/arrival.ts, migration 0030), as every admin write does. Fails on the code before.
 *
 * The hub reaches the database through the WS→TCP proxy, whose TCP side goes through a stall relay
 * (support/stall-relay.ts); one gateway connection, so the claim asked for during the stall is the
 * one sent into it.
 */
import { describe, expect, it } from 'vitest';
import { useHubBehindRelay } from './support/proxy-hub';
import { startStallRelay } from './support/stall-relay';
import { FAST_TIMERS, sleep } from './support/hub';

const { h, relay } = useHubBehindRelay(
  { ...FAST_TIMERS, IDLE_TIMEOUT_MS: '30000', HANDSHAKE_TIMEOUT_MS: '8000', PG_QUERY_TIMEOUT_MS: '1500', DB_GATEWAY_SHARDS: '1', DB_GATEWAY_CONNECTIONS: '1' },
  startStallRelay,
);

describe('a claim delivered after its hello was refused', () => {
  it('writes nothing: the session the operator opened meanwhile keeps the cluster, undisplaced', async () => {
    const c = await h.newCluster('late-claim');
    // The upgrade's token lookup runs on the one gateway connection; the stall starts after it.
    const first = await h.connect(c.token);
    relay().stallOpen();
    first.send('hello', { operator_version: '0.1.0', cluster_id: c.name, session_id: null, resume_from: null, lossy: false });
    expect((await first.closedWith(15_000)).code, 'the claim went unanswered').toBe(1013);

    // The operator dials again, as told; the gateway gives up on the stalled connection and opens
    // another (which flows), perhaps after refusing a try or two meanwhile.
    let opened: Awaited<ReturnType<typeof h.openFresh>> | null = null;
    for (let i = 0; opened === null; i++) {
      try {
        opened = await h.openFresh(c);
      } catch (err) {
        if (i >= 20) throw err;
        await sleep(300);
      }
    }
    const { peer, sessionId } = opened;

    // The path heals: the first claim reaches Postgres now.
    expect(relay().heldCount(), 'the first claim is held in the stalled path').toBeGreaterThan(0);
    relay().releaseHeld();
    // Several fleet polls (300 ms): a claim that had committed would have the live session cut.
    for (let i = 0; i < 8; i++) {
      await sleep(250);
      peer.send('ping', {});
    }
    const owners = await h.sql<{ session_id: string; connected: boolean }>('select session_id, connected from cluster_owners where cluster_uid = $1', [c.uid]);
    expect(owners, 'the cluster is still held by the session the operator opened').toEqual([{ session_id: sessionId, connected: true }]);
    expect(await h.sql('select from_session, to_session from cluster_displacements where cluster_uid = $1', [c.uid]), 'no displacement').toEqual([]);
    expect(peer.closeInfo, 'the live session was not cut').toBeNull();
    peer.close();
  }, 60_000);
});
