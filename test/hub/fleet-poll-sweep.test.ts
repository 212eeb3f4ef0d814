/**
 * The fleet poll records the sessions that answered its previous sweep (`alive`) in its next
 * statement, leaving them out of that statement's sweep only: a session displaced (or disabled,
 * or rotated) right after it answered a sweep is still found by the very next poll, and so cut
 * within one poll interval, not two.
 *
 * README: "a displaced (4409), disabled or rotated (4403) session is cut within one poll interval"
 * (DISPLACEMENT_POKE off "leaves it to the fleet poll").
 */
import { describe, expect, it } from 'vitest';
import { CloseCode } from '../../src/protocol';
import { FAST_TIMERS, sleep, useHub } from './support/hub';

const POLL = 3_000;
const h = useHub({
  ...FAST_TIMERS,
  IDLE_TIMEOUT_MS: '30000',
  RETENTION_MS: '60000',
  DISPLACEMENT_POKE: 'off',
  POLL_INTERVAL_MS: String(POLL),
  LIVE_SWEEP_MS: '1000',
});

describe('fleet poll after a sweep answer', () => {
  it('a session displaced right after it answered a sweep is still cut within one poll interval', async () => {
    const c = await h.newCluster('swx');
    const older = await h.openFresh(c);
    const checks = async (): Promise<number> => {
      const r = await h.admin('GET', `/clusters/${c.name}/session/wakes`);
      return (r.json?.by_kind?.check ?? 0) as number;
    };
    const before = await checks();
    // Wait for a sweep poke (the only kind of check this idle session gets).
    const deadline = Date.now() + 15_000;
    while ((await checks()) === before) {
      if (Date.now() > deadline) throw new Error('no sweep poke seen');
      await sleep(30);
    }
    // Right after that poll: a newer hello takes the claim (no direct poke of the older one).
    const t0 = Date.now();
    const newer = await h.openFresh(c);
    const closed = await older.peer.closedWith(4 * POLL);
    const took = Date.now() - t0;
    expect(closed.code).toBe(CloseCode.DISPLACED);
    // One poll interval, plus a second for the poll's statement and the poke.
    expect(took, `displaced session cut after ${took} ms (poll interval ${POLL} ms)`).toBeLessThan(POLL + 1_000);
    newer.peer.close();
  }, 60_000);
});
