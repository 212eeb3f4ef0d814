/**
 * A session joins the fleet poll by its claim: the gateway shard that runs the claim (the
 * cluster's poll shard) arms its poll before the statement registers the session. A poller that
 * found its shard empty has stopped, and only a claim starts it again, so a claim that could not
 * arm it must not register anything: were it to, nothing would look at that session's token,
 * registration or claim (a revocation whose admin poke is lost too would leave it open on a
 * revoked token). The session's own call to the poller after the welcome, and its retries, are
 * gone: the claim is the one place (test/workers/claim-arms-poll.test.ts shows the poll runs
 * without it).
 *
 * Each test file has a Miniflare of its own, so the cluster's poller here has never run.
 */
import { afterEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { FleetPoller } from '../../src/hub/db/fleet-poller';
import { CloseCode } from '../../src/protocol';
import { connect, newCluster, sql } from './support/peer';

const spies: MockInstance[] = [];
/** A token hash no cluster has (token hashes are unique). */
const randomHash = () => [...crypto.getRandomValues(new Uint8Array(32))].map((b) => b.toString(16).padStart(2, '0')).join('');
afterEach(() => {
  for (const s of spies.splice(0)) s.mockRestore();
});

describe('joining the fleet poll', () => {
  it('a claim that cannot arm its shard\'s poll registers nothing and is refused, retryable; the next hello joins and is polled (a rotation with no poke cuts it)', async () => {
    const arm = vi.spyOn(FleetPoller.prototype, 'arm').mockRejectedValueOnce(new Error('storage unavailable (simulated)'));
    spies.push(arm as unknown as MockInstance);
    const c = await newCluster('join-arm');
    const first = await connect(c.token);
    first.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
    const refused = await first.next((f) => f.type === 'error' || f.type === 'welcome');
    expect(refused.type).toBe('error');
    expect(refused.payload).toMatchObject({ code: 'unavailable', retryable: true });
    expect((await first.closedWith(5_000)).code).toBe(CloseCode.TRY_AGAIN_LATER);
    expect(await sql('select session_id from live_sessions where cluster_uid = $1', [c.uid]), 'nothing registered').toEqual([]);

    const peer = await connect(c.token);
    expect((await peer.hello({ cluster_id: c.name })).type).toBe('welcome');
    await peer.next((f) => f.type === 'stream.end');
    const pinger = setInterval(() => peer.send('ping', {}), 500);
    try {
      await sql(`update clusters set token_hash = decode($2, 'hex') where uid = $1`, [c.uid, randomHash()]);
      expect((await peer.closedWith(5_000)).code).toBe(CloseCode.REFUSED);
    } finally {
      clearInterval(pinger);
    }
  });
});
