/**
 * The fleet poll pokes at most POLL_POKE_LIMIT sessions per interval, "the rest wait for the
 * next". Which ones wait matters: a session whose token was rotated (or whose cluster was
 * disabled, or whose claim was taken) must be cut within one poll when the admin's direct poke is
 * lost (README, rotate-token / disable), and a backlog of sweeps (sessions merely not heard from,
 * as a whole shard is after the poller could not reach the database for a sweep period) must not
 * hold it back. Before the fix the statement took the first due rows in whatever order the table
 * gave them, so a revoked session waited behind every overdue sweep: here about one poll per
 * overdue session, against one poll.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { FAST_TIMERS, useHub } from './support/hub';

const POLL = Number(FAST_TIMERS.POLL_INTERVAL_MS);
const h = useHub({
  ...FAST_TIMERS,
  IDLE_TIMEOUT_MS: '30000',
  RETENTION_MS: '60000',
  DB_GATEWAY_SHARDS: '1',
  POLL_POKE_LIMIT: '1',
});

describe('the fleet poll under its poke limit', () => {
  it('a rotated session is cut at the next poll, ahead of a backlog of overdue sweeps', async () => {
    const overdue = 30;
    const others = [];
    for (let i = 0; i < overdue; i++) others.push(await h.openFresh(await h.newCluster('bg')));
    const target = await h.newCluster('rot');
    const { peer, sessionId } = await h.openFresh(target);
    // A shard whose sessions have not been heard from for a sweep period (the poller was cut off
    // from the database), and then the target's row touched last.
    await h.sql(`update live_sessions set checked_at = now() - interval '1 hour' where session_id <> $1`, [sessionId]);
    await h.sql(`update live_sessions set checked_at = now() where session_id = $1`, [sessionId]);
    // Rotated in Postgres alone: as if the admin's direct poke of the session were lost.
    const t0 = Date.now();
    await h.sql(`update clusters set token_hash = decode(md5(random()::text) || md5(random()::text), 'hex') where uid = $1`, [target.uid]);
    const closed = await peer.closedWith(overdue * POLL * 2 + 5_000);
    const took = Date.now() - t0;
    expect(closed.code).toBe(CloseCode.REFUSED);
    expect(took).toBeLessThan(POLL * 2 + 1_500);
    for (const o of others) o.peer.close();
  }, 60_000);

  it('a rotated session is cut at the next poll, ahead of a backlog of sessions due for desired state', async () => {
    // A rollout over the fleet: every session written to is due for desired state until its
    // check, and here all of them checked in before the target did.
    const backlog = 30;
    const others = [];
    const uids: string[] = [];
    for (let i = 0; i < backlog; i++) {
      const c = await h.newCluster('dd');
      uids.push(c.uid);
      others.push(await h.openFresh(c));
    }
    const target = await h.newCluster('rot-dd');
    const { peer, sessionId } = await h.openFresh(target);
    await h.sql(`update live_sessions set checked_at = now() - interval '1 second' where session_id <> $1`, [sessionId]);
    await h.sql(`update live_sessions set checked_at = now() where session_id = $1`, [sessionId]);
    await h.sql(`update clusters set desired_revision = desired_revision + 1 where uid = any($1::text[])`, [uids]);
    const t0 = Date.now();
    await h.sql(`update clusters set token_hash = decode(md5(random()::text) || md5(random()::text), 'hex') where uid = $1`, [target.uid]);
    const closed = await peer.closedWith(backlog * POLL * 3 + 5_000);
    const took = Date.now() - t0;
    expect(closed.code).toBe(CloseCode.REFUSED);
    expect(took).toBeLessThan(POLL * 2 + 1_500);
    for (const o of others) o.peer.close();
  }, 60_000);
});
