/**
 * A resume whose claim may have committed but whose answer was lost (a statement timeout, or its
 * connection lost under it): the gateway releases what the claim granted (releaseUnansweredClaim:
 * not connected, out of the fleet poll) and the hello is refused 1013. The claim may also have
 * moved the session to a new generation that the session's other connection, still open, does
 * not hold. That connection is then fenced off from every write, but neither the fleet poll (the
 * session is no longer in it) nor a revocation (it finds no connected session to poke) would
 * ever reach it, and an operator that only pings is answered by the runtime without waking the
 * object: it would stay open through a disable or a token rotation. So the refused resume closes
 * the session's other connections too, and the operator resumes on one connection.
 */
import { afterEach, describe, expect, it, vi, type MockInstance } from 'vitest';
import { DbGateway } from '../../src/hub/db/gateway';
import { releaseUnansweredClaim } from '../../src/hub/db/ownership';
import { gatewaySql } from '../../src/hub/db/gateway-client';
import { CloseCode } from '../../src/protocol';
import { admin, connect, hubEnv, newCluster, sleep, sql } from './support/peer';

const spies: MockInstance[] = [];
afterEach(() => {
  for (const s of spies.splice(0)) s.mockRestore();
});

describe('a resume whose claim committed but was not answered', () => {
  it("closes the session's other connection, which no poll or revocation would reach", async () => {
    const c = await newCluster('resume-unknown');
    const a = await connect(c.token);
    const s = (await a.hello({ cluster_id: c.name })).payload.session_id as string;
    await a.next((f) => f.type === 'stream.end');
    // The operator behind the first connection keeps pinging (the runtime answers).
    const pinging = setInterval(() => a.send('ping', {}), 500);
    try {
      const claim = DbGateway.prototype.claim;
      spies.push(
        vi.spyOn(DbGateway.prototype, 'claim').mockImplementation(async function (this: DbGateway, ...args: Parameters<DbGateway['claim']>) {
          const r = await claim.apply(this, args);
          if (args[0].clusterUid !== c.uid || !r.ok) return r;
          // As the gateway does for a claim whose outcome is unknown: release it, then fail.
          await releaseUnansweredClaim(gatewaySql(hubEnv), c.uid, args[0].freshSessionId);
          return { ok: false, message: 'query exceeded 1500 ms', code: null, name: 'QueryTimeoutError', unknown: true };
        }),
      );
      const b = await connect(c.token, s);
      b.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: s, resume_from: a.hubCursor, lossy: false });
      expect((await b.closedWith(5_000)).code).toBe(CloseCode.TRY_AGAIN_LATER);
      // The claim committed: the session is at a generation the first connection does not hold.
      expect((await sql<{ generation: string }>('select generation from cluster_owners where cluster_uid = $1', [c.uid]))[0]?.generation).toBe('2');
      // A disable: the first connection must not outlive it.
      expect((await admin('POST', `/clusters/${c.name}/disable`)).status).toBe(200);
      const closed = await a.closedWith(3_000).then(
        (x) => x.code,
        () => 'still open 3 s after the disable',
      );
      // Closed when the resume was refused (1013), or at the latest by the disable (4403).
      expect([CloseCode.TRY_AGAIN_LATER, CloseCode.REFUSED]).toContain(closed);
      await sleep(50);
    } finally {
      clearInterval(pinging);
      a.close();
    }
  });
});
