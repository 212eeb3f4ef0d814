/**
 * A hub resync whose page read failed is retried by a timer in the session object (desired-pump.ts
 * `retryLater`), which an eviction drops. On a cluster at desired revision 0 nothing else runs
 * the pump again: the fleet poll pokes only when the revision passes what the session has seen,
 * a sweep's poke only asks whether it is alive, and an operator whose frames are all acked
 * advances no ack. The stream.end {complete: true} was never sent and the operator never pruned
 * what it held (DESIGN 6; spec, Full resync). The session's alarm, which an open session always
 * has (its silence deadline), now runs the pump when something is owed. Found by review; fails
 * on the code before.
 */
import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { afterEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { DbGateway } from '../../src/hub/db/gateway';
import type { ClaimArgs } from '../../src/hub/db/ownership';
import { connect, eventually, hubEnv, newCluster } from './support/peer';

const spies: MockInstance[] = [];
afterEach(() => {
  for (const s of spies.splice(0)) s.mockRestore();
});

describe('a hub resync whose page read failed, on a cluster at revision 0', () => {
  it('ends with stream.end {complete: true} at the session\'s next alarm when an eviction dropped the retry\'s timer', async () => {
    // No first page with the claim, and the session's own page reads fail (a table held by a
    // migration, say) until the test lets them through.
    const claim = DbGateway.prototype.claim;
    spies.push(
      vi.spyOn(DbGateway.prototype, 'claim').mockImplementation(async function (this: DbGateway, args: ClaimArgs, rows: number) {
        const r = await claim.call(this, args, rows);
        return r.ok ? { ...r, value: { ...r.value, snapshot: null } } : r;
      }),
    );
    let failing = true;
    let failed = 0;
    const query = DbGateway.prototype.query;
    spies.push(
      vi.spyOn(DbGateway.prototype, 'query').mockImplementation(async function (this: DbGateway, ...args: Parameters<DbGateway['query']>) {
        if (failing && args[0].includes('from desired_deployments')) {
          failed++;
          return { ok: false, message: 'canceling statement due to lock timeout (simulated)', code: '55P03', name: 'DatabaseError' };
        }
        return query.apply(this, args);
      }),
    );
    const c = await newCluster('resync-evicted-retry');
    const peer = await connect(c.token);
    const welcome = await peer.hello({ cluster_id: c.name });
    expect(welcome.payload.full_resync).toBe(true);
    const begin = await peer.next((f) => f.seq !== null);
    expect(begin.type).toBe('resync.begin');
    // Acknowledged, as an operator does: nothing of the session's is left unacknowledged; and
    // alive (the idle limit is short here).
    peer.send('ack', {});
    const pinger = setInterval(() => peer.send('ping', {}), 500);
    try {
      await eventually(async () => failed >= 1, 5_000);

      const stub = sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(welcome.payload.session_id as string) as string });
      type Pump = { retryTimer: ReturnType<typeof setTimeout> | null };
      await eventually(() => runInDurableObject(stub, (instance) => (instance as unknown as { pump: Pump }).pump.retryTimer !== null), 5_000);
      // What an eviction does to the retry: its timer is gone.
      await runInDurableObject(stub, (instance) => {
        const pump = (instance as unknown as { pump: Pump }).pump;
        if (pump.retryTimer !== null) clearTimeout(pump.retryTimer);
        pump.retryTimer = null;
      });
      failing = false;
      expect(await runDurableObjectAlarm(stub), 'an open session has its silence alarm armed').toBe(true);
      const end = await peer.next((f) => f.type === 'stream.end', 5_000);
      expect(end.reply_to).toBe(begin.id);
      expect(end.payload).toEqual({ complete: true, count: 0 });
    } finally {
      clearInterval(pinger);
      peer.close();
    }
  });
});
