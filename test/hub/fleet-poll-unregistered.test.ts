/**
 * "A cluster that is not registered, has been disabled, or whose enrollment token was rotated
 * after this session opened is refused with an error and a 4403 close" (spec, Authentication),
 * asked "on every ownership poll for as long as the session lives". The hub has no delete route;
 * other plane components write the registry in Postgres, and one that removes a cluster's row must
 * see its live session cut by the fleet poll like a disable. Before the fix, the row's removal
 * cascaded to the session's fleet-poll registration, so the poll never found it again: an idle
 * session of a deregistered cluster stayed open for as long as its operator pinged.
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { eventually, FAST_TIMERS, useHub } from './support/hub';

// A silence limit long enough that only the poll can end the session within the test's window.
const h = useHub({ ...FAST_TIMERS, IDLE_TIMEOUT_MS: '30000' });
const withinPolls = Number(FAST_TIMERS.POLL_INTERVAL_MS) * 4 + 2_000;

describe('a cluster removed from the registry', () => {
  it('its live session is refused (error, then 4403) by the fleet poll, and leaves the poll', async () => {
    const c = await h.newCluster();
    const { peer, sessionId } = await h.openFresh(c);
    expect(await h.sql('select 1 from live_sessions where session_id = $1', [sessionId])).toHaveLength(1);
    await h.sql('delete from clusters where uid = $1', [c.uid]);
    const closed = await peer.closedWith(withinPolls);
    expect(closed.code).toBe(CloseCode.REFUSED);
    const err = peer.frames.find((f) => f.type === 'error');
    expect(err?.payload.code).toBe('not_found');
    // Nothing of the session is left for the poll to look at.
    await eventually(async () => (await h.sql('select 1 from live_sessions where session_id = $1', [sessionId])).length === 0, 5_000);
  });
});
