/**
 * A revocation (rotate-token, disable) racing a hello's claim: the spec's "whether the cluster may
 * hold a session is asked at hello … a cluster that has been disabled, or whose enrollment token
 * was rotated, is refused with an error and a 4403 close", and the README's "a live session on the
 * old token is cut at once".
 *
 * What this proves, on real workerd and real Postgres:
 * - A hello whose claim is waiting for the cluster's owner row (held by an ingest batch's fence or
 *   another claim; here by a test transaction) when the admin rotates the token or disables the
 *   cluster is refused 4403 once the row is free: the claim (ownership.ts CLAIM_SQL) reads the
 *   registry with a locking read after taking the owner row, so it sees a revocation that
 *   committed while it waited, not the registry of its statement's snapshot. (Before: welcomed
 *   after the admin's 200, and cut only by the next fleet poll.)
 * - A claim that locked the cluster row first makes the revocation wait for its commit, and the
 *   revocation then names that claim's session as the one to cut (registry.ts reads it after the
 *   update, not from the update's older snapshot), and that session's own check is refused.
 *   (Before: the revocation did not wait, named no session, and the claim was granted on the
 *   revoked token.)
 */
import { describe, expect, it } from 'vitest';
import { checkSession, claimCluster, type ClaimResult } from '../../src/hub/db/ownership';
import { rotateToken, setDisabled, type RevokedRow } from '../../src/hub/db/registry';
import type { Sql } from '../../src/hub/db/sql';
import { hashToken, toHex } from '../../src/hub/tokens';
import { CloseCode, newId } from '../../src/protocol';
import { withFileSql as withSql } from '../support/file-database';
import { FAST_TIMERS, eventually, holdLock, sleep, useHub, type TestCluster } from './support/hub';
import { claimArgs } from '../support/claim-args';

// The production poll interval, and a query timeout long enough for the claim to wait on the lock.
const h = useHub({ ...FAST_TIMERS, POLL_INTERVAL_MS: '5000', IDLE_TIMEOUT_MS: '30000', PG_QUERY_TIMEOUT_MS: '8000' });

interface RaceOutcome {
  answer: string;
  /** The welcome reached the operator after the admin call had answered 200. */
  welcomedAfterRevocation: boolean;
  close: number | 'still open';
  /** How long after the admin's 200 the connection was closed (null: still open). */
  closedMsAfterRevocation: number | null;
}

async function helloDuringRevocation(revoke: (c: { name: string }) => Promise<number>): Promise<RaceOutcome> {
  const c = await withPastSession('race');

  // Something holds the owner row for a moment (in production: an ingest batch's fence, a claim).
  const release = await holdLock('select 1 from cluster_owners where cluster_uid = $1 for update', [c.uid]);
  let released = false;
  try {
    const peer = await h.connect(c.token); // the token is still current and enabled: admitted
    peer.send('hello', { cluster_id: c.name, operator_version: '0.1.0', session_id: null, resume_from: null, lossy: false });
    let answeredAt = 0;
    const answer = peer.next((f) => f.type === 'welcome' || f.type === 'error', 15_000).then((f) => {
      answeredAt = Date.now();
      return f;
    });
    let closedAt = 0;
    void peer.closed.then(() => (closedAt = Date.now()));
    // The claim is running and waits for the row.
    await eventually(
      async () =>
        (await h.sql<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike '%insert into cluster_owners%'`,
        ))[0]!.n > 0,
      5_000,
    );
    let revokedAt = 0;
    const revoked = revoke(c).then((status) => {
      revokedAt = Date.now();
      return status;
    });
    // The row is let go once the admin call has answered, or after a moment where the revocation
    // waits for the row too (a disable: it revokes the claim on it), well inside the hello's
    // handshake deadline (1.5 s), which the claim's wait counts against.
    await Promise.race([revoked, sleep(600)]);
    await release();
    released = true;
    expect(await revoked).toBe(200);
    const f = await answer;
    await peer.closedWith(2_500).catch(() => null);
    return {
      answer: f.type,
      welcomedAfterRevocation: f.type === 'welcome' && answeredAt > revokedAt,
      close: peer.isClosed ? (await peer.closed).code : 'still open',
      closedMsAfterRevocation: closedAt ? closedAt - revokedAt : null,
    };
  } finally {
    if (!released) await release();
    await sleep(10);
  }
}

/**
 * Right: refused at hello (error, 4403); or, if the claim committed before the revocation did,
 * welcomed before the admin's 200 and then cut at once by the revocation (well inside one poll).
 */
function acceptable(r: RaceOutcome): boolean {
  if (r.answer === 'error') return r.close === CloseCode.REFUSED;
  return !r.welcomedAfterRevocation && r.close === CloseCode.REFUSED && r.closedMsAfterRevocation !== null && r.closedMsAfterRevocation < 2_500;
}

describe('a revocation racing a hello', () => {
  it('rotate-token: a hello on the old token answered after the rotation committed (and was acknowledged 200) is refused 4403, not welcomed', async () => {
    const r = await helloDuringRevocation(async (c) => (await h.admin('POST', `/clusters/${c.name}/rotate-token`)).status);
    expect(acceptable(r), `a hello on a token whose rotation had already committed must not be welcomed: ${JSON.stringify(r)}`).toBe(true);
  }, 40_000);

  it('disable: a hello answered after the disable committed (and was acknowledged 200) is refused 4403, not welcomed', async () => {
    const r = await helloDuringRevocation(async (c) => (await h.admin('POST', `/clusters/${c.name}/disable`)).status);
    expect(acceptable(r), `a hello of a cluster whose disablement had already committed must not be welcomed: ${JSON.stringify(r)}`).toBe(true);
  }, 40_000);
});

/** The cluster's first session has come and gone: its owner row exists, not connected. */
async function withPastSession(prefix: string): Promise<TestCluster> {
  const c = await h.newCluster(prefix);
  const first = await h.openFresh(c);
  first.peer.close();
  await eventually(async () => (await h.sql<{ connected: boolean }>('select connected from cluster_owners where cluster_uid = $1', [c.uid]))[0]?.connected === false, 10_000);
  return c;
}

/**
 * A claim (the statement the gateway runs at hello) held up after it has read and locked the
 * registry, a revocation started meanwhile, then the claim let go: what each answered.
 */
async function revocationBehindClaim(
  revoke: (sql: Sql, uid: string) => Promise<RevokedRow | null>,
): Promise<{ claim: ClaimResult; session: string; revoked: RevokedRow | null; revokedWhileClaimHeld: boolean; check: Awaited<ReturnType<typeof checkSession>> }> {
  const c = await withPastSession('behind');
  const tokenHashHex = toHex(await hashToken(c.token));
  // No route key in the id: nothing in the hub pokes a session object for it.
  const session = `race-${newId()}`;
  // The claim's last step registers its session in the fleet poll (live_sessions, upsert by
  // session id): a committed row of that id, held FOR UPDATE, stops it there, after the owner and
  // cluster rows are locked. (A row lock on live_sessions only: no lock on the cluster row.)
  await h.sql(`insert into live_sessions (session_id, cluster_uid, poll_shard, generation, token_hash, seen_revision) values ($1, $2, 0, 0, decode('00', 'hex'), 0)`, [session, c.uid]);
  const release = await holdLock('select 1 from live_sessions where session_id = $1 for update', [session]);
  let released = false;
  try {
    const claim = withSql((sql) =>
      claimCluster(sql, claimArgs(c.uid, tokenHashHex, { freshSessionId: session }), null),
    );
    await eventually(
      async () =>
        (await h.sql<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock' and query ilike '%insert into cluster_owners%'`,
        ))[0]!.n > 0,
      5_000,
    );
    let settled = false;
    const revocation = withSql((sql) => revoke(sql, c.uid)).finally(() => (settled = true));
    await Promise.race([revocation, sleep(1_000)]);
    const revokedWhileClaimHeld = settled;
    await release();
    released = true;
    const [claimed, revoked] = await Promise.all([claim, revocation]);
    // What the revocation's poke has the session do: its own check.
    const check = await withSql((sql) =>
      checkSession(sql, { clusterUid: c.uid, tokenHashHex, sessionId: session, generation: claimed.generation ?? 0, live: {}, connected: true, watermark: 0 }),
    );
    return { claim: claimed, session, revoked, revokedWhileClaimHeld, check };
  } finally {
    if (!released) await release();
  }
}

/** Sent at once: the deadline a write must reach Postgres by (db/arrival.ts) is no concern here. */
const ARRIVE_BY = () => new Date(Date.now() + 60_000).toISOString();

describe('a revocation behind a claim that locked the cluster row first', () => {
  it('rotate-token waits for the claim and names the session it made, which its check then refuses', async () => {
    const r = await revocationBehindClaim((sql, uid) => rotateToken(sql, uid, toHex(crypto.getRandomValues(new Uint8Array(32))), ARRIVE_BY(), sql));
    expect(r.claim).toMatchObject({ refusal: null, sessionId: r.session });
    expect(r.revokedWhileClaimHeld, 'the rotation answered while the claim that read the old token had not committed').toBe(false);
    expect(r.revoked?.live_session, 'the rotation must name the session of the claim it waited for').toBe(r.session);
    expect(r.check.refusal).toBe('token_rotated');
  }, 30_000);

  it('disable waits for the claim and names the session it made, which its check then refuses', async () => {
    const r = await revocationBehindClaim((sql, uid) => setDisabled(sql, uid, true, ARRIVE_BY(), sql));
    expect(r.claim).toMatchObject({ refusal: null, sessionId: r.session });
    expect(r.revokedWhileClaimHeld, 'the disable answered while the claim that read the cluster enabled had not committed').toBe(false);
    expect(r.revoked?.live_session, 'the disable must name the session of the claim it waited for').toBe(r.session);
    expect(r.check.refusal).toBe('disabled');
  }, 30_000);
});
