/**
 * How long the admin views believe "connected" without news from a session, against the fleet
 * poll's sweep (src/hub/db/fleet-poll.ts): an idle live session comes due between one and two
 * sweep periods after its last check-in (an offset of its own), the due session is found by the
 * next poll (up to one interval later), and its answer is recorded by the poll after that.
 */
import { describe, expect, it } from 'vitest';
import { connectedStaleAfterMs, hubConfig } from '../../../src/hub/config';

/** The oldest a live idle session's last check-in can be before the poller records the next one. */
const oldestLiveCheckIn = (sweep: number, poll: number) => 2 * sweep + poll + poll;

describe('connected staleness', () => {
  for (const [name, env] of [
    ['the defaults', {}],
    ['the fast test timers', { POLL_INTERVAL_MS: '300', LIVE_SWEEP_MS: '2000' }],
    ['a long poll beside a short sweep', { POLL_INTERVAL_MS: '60000', LIVE_SWEEP_MS: '60000' }],
  ] as const) {
    it(`never calls a live idle session disconnected between its sweeps (${name})`, () => {
      const cfg = hubConfig(env);
      expect(connectedStaleAfterMs(cfg)).toBeGreaterThan(oldestLiveCheckIn(cfg.LIVE_SWEEP_MS, cfg.POLL_INTERVAL_MS));
    });
  }
});
