/**
 * A disable (and an enable) that commit while a resume's claim is on its way, the resume's own
 * connection closing before the claim answers (README, Admin API: a live session of a disabled
 * cluster is cut at once, 4403; "only the operator's next hello, once the cluster is enabled,
 * renews it"). The session's older connection, live when the disable committed, must not come out
 * of it holding the claim the dead hello renewed: nothing it sends after the disable may be stored.
 *
 * The claim is held in the gateway (its `claim` is wrapped to wait for the test), so the disable
 * and the enable both commit before the claim's statement starts, and the claim is granted. The
 * disable's poke reaches the object while the hello is under way, so it is answered only after it.
 */
import { afterEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { DbGateway } from '../../src/hub/db/gateway';
import { CloseCode } from '../../src/protocol';
import { admin, connect, eventually, hubEnv, newCluster, node, sleep, sql } from './support/peer';

const spies: MockInstance[] = [];
afterEach(() => {
  for (const s of spies.splice(0)) s.mockRestore();
});

describe('a disable and an enable during a resume whose connection closes before its claim answers', () => {
  it('the session\'s older connection, live through the disable, is cut and what it sends afterwards is not stored', async () => {
    const c = await newCluster('dis-dead-hello');
    const a = await connect(c.token);
    const s = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    await a.next((f) => f.type === 'stream.end');

    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let entered = false;
    const claim = DbGateway.prototype.claim;
    spies.push(
      vi.spyOn(DbGateway.prototype, 'claim').mockImplementation(async function (this: DbGateway, ...args: Parameters<DbGateway['claim']>) {
        if (args[0].clusterUid === c.uid) {
          entered = true;
          await held;
        }
        return claim.apply(this, args);
      }),
    );

    // The operator's resume on a second connection; its claim waits in the gateway.
    const b = await connect(c.token, s);
    b.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: s, resume_from: a.hubCursor, lossy: false });
    await eventually(async () => entered, 2_000, 10);

    expect((await admin('POST', `/clusters/${c.name}/disable`)).status).toBe(200);
    // The disable's poke (cutLiveSession's RPC), delivered while the hello is under way.
    expect(await sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(s) as string }).check(s, 'disabled')).toBe(false);
    expect((await admin('POST', `/clusters/${c.name}/enable`)).status).toBe(200);
    // The operator gives up on the resume before its claim answers: the hello ends without opening.
    b.close();
    await sleep(300);
    release();
    // The claim commits (a resume, granted: the cluster is enabled again) and the hello ends.
    await eventually(async () => (await sql<{ generation: string }>('select generation from cluster_owners where cluster_uid = $1', [c.uid]))[0]?.generation === '2', 3_000, 20);
    await sleep(300);

    if (!a.isClosed) a.send('node.observed', node('after-disable'));
    await sleep(500);
    const nodes = await sql<{ node_id: string }>('select node_id from nodes where cluster_uid = $1', [c.uid]);
    expect(nodes.map((n) => n.node_id), 'a frame of the connection live through the disable was stored').toEqual([]);
    expect(a.isClosed, 'the connection live through the disable is still open').toBe(true);
    expect([CloseCode.REFUSED, CloseCode.DISPLACED]).toContain((await a.closedWith(100)).code);
  });
});
