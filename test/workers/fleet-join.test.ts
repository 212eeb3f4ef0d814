/**
 * A session joins the fleet poll at its claim by asking its shard's poller to run
 * (`ensurePolling`). A poller that found its shard empty has stopped, and only a claim starts it
 * again, so when that one call fails nothing looks at the session's token, registration or claim:
 * a revocation whose admin poke is also lost (the spec makes the poll the bound) would leave the
 * session open on a revoked token until some other session of the shard claimed.
 *
 * Each test file has a Miniflare of its own, so the cluster's poller here has never run: the
 * session's own claim is what must start it.
 */
import { afterEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { DbGateway } from '../../src/hub/db/gateway';
import { CloseCode } from '../../src/protocol';
import { connect, eventually, newCluster, sql } from './support/peer';

const spies: MockInstance[] = [];
afterEach(() => {
  for (const s of spies.splice(0)) s.mockRestore();
});

describe('joining the fleet poll', () => {
  it('a claim whose call to start the poller fails retries it, so a token rotated with no poke still cuts the session (4403)', async () => {
    const ensure = vi.spyOn(DbGateway.prototype, 'ensurePolling').mockRejectedValueOnce(new Error('poller unreachable (simulated)'));
    spies.push(ensure);
    const warn = vi.spyOn(console, 'warn');
    spies.push(warn);

    const c = await newCluster('join-retry');
    const peer = await connect(c.token);
    const w = await peer.hello({ cluster_id: c.name });
    expect(w.type).toBe('welcome');
    await peer.next((f) => f.type === 'stream.end');

    // The first call failed; the session tries again on its own (POLL_INTERVAL_MS 300 here).
    await eventually(async () => ensure.mock.calls.length >= 2, 5_000);
    const retried = warn.mock.calls.map((a) => String(a[0])).find((line) => line.includes('could not reach the fleet poller; retrying'));
    expect(retried, 'the failure is logged with the retry').toBeDefined();
    expect(JSON.parse(retried as string)).toMatchObject({ cluster: c.uid, session: w.payload.session_id, failures: 1 });

    // The rotation is written straight to Postgres: no admin poke, only the fleet poll can see it.
    await sql(`update clusters set token_hash = decode($2, 'hex') where uid = $1`, [c.uid, '00'.repeat(32)]);
    const closed = await peer.closedWith(5_000).then(
      (x) => x.code,
      () => 'still open 5 s after its token was rotated',
    );
    expect(closed).toBe(CloseCode.REFUSED);
  });
});
