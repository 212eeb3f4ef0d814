/**
 * A connection that ends without its close reaching the session object (the object crashed or
 * was reset with it; a hub restart on the same storage) leaves Postgres showing the session
 * connected and in the fleet poll. The object's next alarm (its silence deadline, always armed
 * for an open session) finds no connection: it now publishes the disconnect then, instead of
 * leaving it to the fleet poll's sweep, LIVE_SWEEP_MS (5 minutes) to twice that away, during
 * which the admin view called the cluster connected and the next hello counted as taking the
 * cluster from a connected session. Found by review of the sweep (the e2e sweep test's flake:
 * a restart before the close was handled); fails on the code before.
 */
import { runDurableObjectAlarm, runInDurableObject } from 'cloudflare:test';
import { describe, expect, it } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { admin, connect, eventually, hubEnv, newCluster, sql } from './support/peer';

describe('a connection whose end never reached its session object', () => {
  it("is published as ended at the object's next alarm: the registry stops calling the cluster connected", async () => {
    const c = await newCluster('ended-unheard');
    const a = await connect(c.token);
    const s = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    await a.next((f) => f.type === 'stream.end');
    // A stub of its own for each call: one that saw the crash stays broken.
    const stub = () => sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(s) as string });
    const live = async () => (await sql('select 1 from live_sessions where session_id = $1', [s])).length;
    const connected = async () => (await admin('GET', `/clusters/${c.name}`)).json.session.connected as boolean;
    expect(await live()).toBe(1);

    // The object crashes, and its connection with it: no close event reaches a live instance.
    await runInDurableObject(stub(), (_i, state) => state.abort('crash (test)')).catch(() => undefined);
    await a.closed;
    expect(await live(), 'nothing has told Postgres yet').toBe(1);

    expect(await runDurableObjectAlarm(stub()), 'the session had its silence alarm armed').toBe(true);
    await eventually(async () => (await live()) === 0, 3_000);
    expect(await connected()).toBe(false);
  });
});
