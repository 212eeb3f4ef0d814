/**
 * A claim registers its session for the fleet poll in the same statement; the poll of the
 * cluster's shard is armed by the gateway that runs the claim, before that statement. Only the
 * session's own call afterwards (`ensurePolling`, since removed) armed it: were that call lost
 * (the hub crashed, restarted or was deployed between the claim's commit and it), the session sat
 * registered in a shard nothing polled: shown connected after it ended, and a revocation whose
 * poke was lost too never cut it. Found by review of the fleet poll; failed on the code before
 * (with that call stubbed out, as a crash would have lost it).
 *
 * This file has a Miniflare of its own: no poller has run in it before this test's claim.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { connect, newCluster, sql } from './support/peer';

/** A token hash no cluster has (token hashes are unique). */
const randomHash = () => [...crypto.getRandomValues(new Uint8Array(32))].map((b) => b.toString(16).padStart(2, '0')).join('');

describe('the fleet poll of a claimed session', () => {
  it('runs from the claim alone: a token rotated with no poke cuts the session (4403)', async () => {
    const c = await newCluster('claim-arms');
    const peer = await connect(c.token);
    expect((await peer.hello({ cluster_id: c.name })).type).toBe('welcome');
    await peer.next((f) => f.type === 'stream.end');
    // Alive, as an operator is (the idle limit is 3 s here).
    const pinger = setInterval(() => peer.send('ping', {}), 500);
    try {
      // Rotated behind the admin API's back: only the poll can find it (POLL_INTERVAL_MS 300 here).
      await sql(`update clusters set token_hash = decode($2, 'hex') where uid = $1`, [c.uid, randomHash()]);
      expect((await peer.closedWith(5_000)).code).toBe(CloseCode.REFUSED);
    } finally {
      clearInterval(pinger);
    }
  });
});
