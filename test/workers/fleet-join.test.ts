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
import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { afterEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { DbGateway } from '../../src/hub/db/gateway';
import { CloseCode } from '../../src/protocol';
import { connect, eventually, hubEnv, newCluster, sql } from './support/peer';

const spies: MockInstance[] = [];
/** A token hash no cluster has (token hashes are unique). */
const randomHash = () => [...crypto.getRandomValues(new Uint8Array(32))].map((b) => b.toString(16).padStart(2, '0')).join('');
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
    await sql(`update clusters set token_hash = decode($2, 'hex') where uid = $1`, [c.uid, randomHash()]);
    const closed = await peer.closedWith(5_000).then(
      (x) => x.code,
      () => 'still open 5 s after its token was rotated',
    );
    expect(closed).toBe(CloseCode.REFUSED);
  });

  it("a join still owed is stored, and tried again at the session's next alarm (an eviction drops the retry's timer)", async () => {
    const failing = vi.spyOn(DbGateway.prototype, 'ensurePolling').mockRejectedValue(new Error('poller unreachable (simulated)'));
    spies.push(failing);
    const c = await newCluster('join-alarm');
    const peer = await connect(c.token);
    const s = (await peer.hello({ cluster_id: c.name })).payload.session_id as string;
    await peer.next((f) => f.type === 'stream.end');
    const stub = sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(s) as string });
    type Fleet = { pollJoinTimer: ReturnType<typeof setTimeout> | null };
    const stored = () =>
      runInDurableObject(stub, (_i, state) => {
        const row = state.storage.sql.exec<{ doc: string }>('select doc from meta where k = 1').toArray()[0];
        return row ? (JSON.parse(row.doc) as { pollJoinOwed?: boolean }).pollJoinOwed ?? false : null;
      });
    await eventually(async () => failing.mock.calls.length >= 1 && (await stored()) === true, 5_000);

    // What an eviction does to the retry: its timer is gone; the stored debt is all that is left.
    failing.mockRestore();
    const ensure = vi.spyOn(DbGateway.prototype, 'ensurePolling');
    spies.push(ensure);
    await runInDurableObject(stub, (instance) => {
      const fleet = (instance as unknown as { fleet: Fleet }).fleet;
      if (fleet.pollJoinTimer !== null) clearTimeout(fleet.pollJoinTimer);
      fleet.pollJoinTimer = null;
    });
    expect(await runDurableObjectAlarm(stub), 'an open session has its silence alarm armed').toBe(true);
    await eventually(async () => ensure.mock.calls.length >= 1 && (await stored()) === false, 5_000);

    // The poller now runs: a rotation with no poke is found by the poll.
    await sql(`update clusters set token_hash = decode($2, 'hex') where uid = $1`, [c.uid, randomHash()]);
    expect((await peer.closedWith(5_000)).code).toBe(CloseCode.REFUSED);
  });
});
