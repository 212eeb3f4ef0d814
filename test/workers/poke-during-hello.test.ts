/**
 * Pokes that reach a session object while it is in a hello must not be lost.
 *
 * A revocation that commits just behind a hello's claim: the admin's rotate-token waits for the
 * claim (it holds the cluster row FOR SHARE), then names the session that claim made and pokes its
 * object, which may still be finishing that hello. The poke must not be dropped there: the
 * session was granted on a token that is no longer current, and the poll (the spec's bound) is
 * the only other thing that would cut it, within one interval, or never should its poke be lost
 * too.
 *
 * Here the poller never runs (its alarm is stubbed out: a claim arms it), so only the poke can cut the session;
 * the rotation commits with the claim (written by the claim's own transaction, in a trigger that
 * also holds the claim for 0.8 s), and the poke is the object's own RPC that disable and
 * rotate-token send (`cutLiveSession`), delivered while the hello waits for its claim.
 *
 * Likewise an admin write of desired state that commits after a fresh session's claim (and its
 * snapshot page): the write pokes the new session's object, which is still in the hello, and a
 * fresh session's hello drops whatever revision the object had learned before it.
 */
import { afterEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { routeKeyOf, sessionStub } from '../../src/hub/address';
import { DbGateway } from '../../src/hub/db/gateway';
import { CloseCode } from '../../src/protocol';
import type { ClaimArgs } from '../../src/hub/db/ownership';
import { admin, connect, desired, eventually, hubEnv, newCluster, sql, withOwnerTrigger } from './support/peer';

const spies: MockInstance[] = [];
afterEach(() => {
  for (const s of spies.splice(0)) s.mockRestore();
});

describe('a poke that arrives during a hello', () => {
  it('is answered once the hello has opened the session: a token rotated behind the claim cuts it 4403', async () => {
    spies.push(vi.spyOn(DbGateway.prototype, 'alarm').mockResolvedValue(undefined));
    const c = await newCluster('poke-hello');
    const a = await connect(c.token);
    const s = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    await a.next((f) => f.type === 'stream.end');
    a.close();
    await eventually(async () => (await sql<{ connected: boolean }>('select connected from cluster_owners where cluster_uid = $1', [c.uid]))[0]?.connected === false, 5_000);

    // The resume's claim updates the owner row: the trigger holds it, then rotates the token in
    // the claim's own transaction (the claim has read the old one), so both commit together.
    const HOLD_AND_ROTATE = `if tg_op = 'UPDATE' then
      perform pg_sleep(0.8);
      update clusters set token_hash = decode(md5(random()::text) || md5(random()::text), 'hex') where uid = new.cluster_uid;
    end if; return new;`;
    await withOwnerTrigger(c.uid, 'rotate', HOLD_AND_ROTATE, ' and new.connected', async () => {
      const b = await connect(c.token, s);
      b.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: s, resume_from: a.hubCursor, lossy: false });
      // The claim is in its trigger's sleep: the object is in the hello, waiting for it.
      await eventually(
        async () => (await sql<{ n: number }>(`select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event = 'PgSleep' and query ilike '%cluster_owners%'`))[0]!.n > 0,
        5_000,
        20,
      );
      // The revocation's poke, while the object is still in the hello.
      const answered = await sessionStub(hubEnv, { clusterUid: c.uid, routeKey: routeKeyOf(s) as string }).check(s, 'token');
      expect(answered).toBe(false);
      const welcome = await b.next((f) => f.type === 'welcome' || f.type === 'error', 5_000);
      expect(welcome.type, 'the claim read the token before it was rotated').toBe('welcome');
      const closed = await b.closedWith(5_000).then(
        (x) => x.code,
        () => 'still open 5 s after a poke about its rotated token',
      );
      expect(closed).toBe(CloseCode.REFUSED);
    });
  });

  it("a desired change committed behind a fresh session's claim reaches that session without the poll", async () => {
    // The poller never runs: only the write's own poke can bring the change.
    spies.push(vi.spyOn(DbGateway.prototype, 'alarm').mockResolvedValue(undefined));
    const c = await newCluster('poke-hello-desired');
    expect((await admin('PUT', `/clusters/${c.uid}/deployments/d1`, desired({ max_replicas: 1 }))).status).toBe(200);
    // The claim (and its first snapshot page, which holds d1 at max 1) commits; before its answer
    // reaches the object, an admin write changes d1. Its poke goes to the claim's new session, whose
    // object is still in the hello that claim is for.
    const claim = DbGateway.prototype.claim;
    let changed: number | null = null;
    spies.push(
      vi.spyOn(DbGateway.prototype, 'claim').mockImplementation(async function (this: DbGateway, args: ClaimArgs, rows: number) {
        const r = await claim.call(this, args, rows);
        if (changed === null && r.ok && r.value.sessionId === args.freshSessionId) {
          const put = await admin('PUT', `/clusters/${c.uid}/deployments/d1`, desired({ max_replicas: 7 }));
          changed = put.status;
          // The write's poke is an RPC of its own: let it reach the object before the claim's answer does.
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
        return r;
      }),
    );
    const a = await connect(c.token);
    const welcome = await a.hello({ cluster_id: c.name });
    expect(welcome.type).toBe('welcome');
    expect(changed).toBe(200);
    const seven = await a.next((f) => f.type === 'deployment.desired' && f.payload.deployment_id === 'd1' && f.payload.max_replicas === 7, 3_000).then(
      () => 'delivered',
      () => 'not delivered within 3 s (the poll, which would bring it, does not run here)',
    );
    expect(seven).toBe('delivered');
    a.close();
  });
});
